"""A shell session that keeps its working directory and exported variables between commands.

[`Session.run_shell`][langchain_sandbox.Session.run_shell] runs each command
in a fresh ``bash -c`` (through ``Session.run_command``, so one implementation serves every
provider), wrapped in a short script that

1. notes the environment the sandbox starts every command with;
2. sources the session's saved shell state: ``cd`` to the saved directory, re-export the
   variables earlier commands exported or changed, unset those they removed;
3. runs the command with ``eval`` (so its own ``exit`` still ends it);
4. when it ends (and from an ``EXIT`` trap, so ``exit N`` and ``set -e`` are covered) writes
   the new state: the directory and only the variables that differ from the starting environment, so
   values the sandbox was created with (``SessionSpec.env``, which may hold keys) are never
   copied into the state, and a new sandbox created with new values keeps them.

Why re-apply state around each command rather than keep one long-lived bash reading commands:
a timeout or a killed command cannot wedge or lose the session (the state file is replaced
atomically and only by a command that finished: one stopped by a timeout, a signal or a kill
leaves the state as it was before it, on every provider, whether the provider terminates or
kills it), nothing needs a sentinel protocol over a provider's streams, and every provider
gets it through the contract it already has. The price: only the directory and exported
variables persist; shell functions, aliases, options and unexported variables last one command,
and background jobs are not kept as jobs of the next command.

The state file lives in the workspace (`STATE_PATH`), so a workspace snapshot carries it:
a resumed, forked or restored thread has the directory and variables of its checkpoint, on every
provider, without the graph state ever holding an environment value.
"""

from __future__ import annotations

import shlex

from langchain_sandbox.core.workspace import WORKSPACE_ROOT, relative_path, resolve_path
from langchain_sandbox.errors import InvalidInputError

STATE_PATH = f"{WORKSPACE_ROOT}/.langchain_sandbox/shell_state.sh"
"""Where the shell state is kept: in the workspace, so snapshots carry it across resumes."""

_STATE_RELATIVE = relative_path(STATE_PATH)

_ESCAPES = str.maketrans(
    {
        "\\": "\\\\",
        "'": "\\'",
        **{chr(n): f"\\x{n:02x}" for n in (*range(1, 32), 127)},
    }
)
"""How `_one_line` writes the characters a ``$'...'`` word cannot hold as they are."""

# Every name the wrapper uses starts with __lcs_ and none is exported, so none is saved.
#
# Each process the wrapper starts costs a fork (and an exec), a large share of a command as small
# as ``echo hi`` (more in a sandbox under load), so a command that leaves the state as it was
# starts none of the wrapper's:
# - __lcs_list_exported lists the exported variables through a file in /tmp (outside the
#   workspace: snapshots never see it), as $(compgen -e) would fork. The list ends with the
#   shell's pid, so a shell that reads another's list (two commands at once) notices and forks;
# - the state is built with ``printf -v`` and compared with the file as it is when the command
#   ends (the command may have changed or removed it), read with ``read``; only a change costs a
#   ``mv``, from a temporary name that noclobber (``set -C``) makes as safe as a mktemp one.
# Comparisons use ``[ = ]``, which a command's ``shopt -s nocasematch`` cannot make case-blind;
# ``local -`` with ``set +eu`` keeps a command's ``set -e``/``-u`` out of the save, and the save
# starts with xtrace off (silently) so a command's ``set -x`` does not trace it.
_SETUP = r"""
__lcs_root=$PWD
__lcs_state="$__lcs_root/%(state)s"
__lcs_names=/tmp/.langchain_sandbox_exported
__lcs_list_exported() {
  { compgen -e && printf '%%s\n' "$$"; } 2>/dev/null >|"$__lcs_names" \
    && mapfile -t __lcs_exported <"$__lcs_names" \
    && (( ${#__lcs_exported[@]} )) && [ "${__lcs_exported[-1]}" = "$$" ] \
    && unset -v '__lcs_exported[-1]' && return 0
  mapfile -t __lcs_exported < <(compgen -e)
}
declare -A __lcs_start=()
__lcs_list_exported
for __lcs_name in "${__lcs_exported[@]}"; do __lcs_start[$__lcs_name]=${!__lcs_name}; done
__lcs_save() {
  [[ -z ${__lcs_saved-} ]] || return 0
  __lcs_saved=1
  local - dir=${__lcs_state%%/*} new line old= tmp name
  set +eu -C
  declare -A now=()
  if [ "$PWD" = "$__lcs_root" ]; then
    new=$'__lcs_cwd=.\n'
  elif [ "${PWD#"$__lcs_root"/}" != "$PWD" ]; then
    printf -v new '__lcs_cwd=%%q\n' "${PWD#"$__lcs_root"/}"
  else
    printf -v new '__lcs_cwd=%%q\n' "$PWD"
  fi
  __lcs_list_exported
  for name in "${__lcs_exported[@]}"; do
    now[$name]=1
    case $name in PWD|OLDPWD|SHLVL|_) continue ;; esac
    if [[ ! -v "__lcs_start[$name]" ]] || [ "${__lcs_start[$name]}" != "${!name}" ]; then
      printf -v line 'export %%s=%%q\n' "$name" "${!name}"
      new+=$line
    fi
  done
  for name in "${!__lcs_start[@]}"; do
    [[ -v "now[$name]" ]] || new+="unset -v $name"$'\n'
  done
  [[ -f $__lcs_state ]] && IFS= read -r -d '' old <"$__lcs_state"
  [ "$new" = "$old" ] && return 0
  [[ -d $dir ]] || mkdir -p -- "$dir" 2>/dev/null || return 0
  tmp=$dir/.shell_state.$$.$RANDOM
  { printf '%%s' "$new" >"$tmp"; } 2>/dev/null && mv -f -- "$tmp" "$__lcs_state" || rm -f -- "$tmp"
}
"""
"""Defines the wrapper's functions and notes the environment the sandbox starts commands
with: nothing in it depends on the saved state, so a shell may run it before its command
arrives (the local provider's spare shells do)."""

_RESTORE = r"""
if [[ -f $__lcs_state ]]; then
  . "$__lcs_state"
  case $__lcs_cwd in /*) __lcs_dir=$__lcs_cwd ;; *) __lcs_dir=$__lcs_root/$__lcs_cwd ;; esac
  if ! cd -- "$__lcs_dir" 2>/dev/null; then
    printf '[shell] %s no longer exists; the working directory is %s again.\n' \
      "$__lcs_dir" "$__lcs_root" >&2
  fi
fi
trap '{ set +x; } 2>/dev/null; __lcs_save' EXIT
trap '__lcs_saved=1; exit 129' HUP
trap '__lcs_saved=1; exit 130' INT
trap '__lcs_saved=1; exit 143' TERM
"""
"""Applies the saved state and sets the traps that save the new one."""


def shell_script(command: str, cwd: str | None = None) -> str:
    """The ``bash -c`` script that runs ``command`` in the session's persistent shell state.

    Args:
        command: The user's command line.
        cwd: A directory to change to first (workspace path); the shell stays there afterwards,
            as after a ``cd``.
    """
    if not isinstance(command, str) or not command.strip():
        raise InvalidInputError("command must be a non-empty string.")
    if "\x00" in command:
        raise InvalidInputError("command contains a NUL byte, which no shell command can hold.")
    change = ""
    if cwd is not None:
        where = relative_path(resolve_path(cwd))
        change = f'cd -- "$__lcs_root"/{shlex.quote(where)} || exit 1; '
    # All on one line, strings quoted without a raw newline: bash then numbers the lines of its
    # messages about the command as it would for a plain ``bash -c command``. The save after
    # eval covers a command that replaced the EXIT trap with its own.
    return (
        f'{SHELL_SETUP}__lcs_restore={_RESTORE_WORD}; eval "$__lcs_restore"; {change}'
        f'__lcs_command={_one_line(command)}; eval "$__lcs_command"; '
        "{ __lcs_status=$?; set +x; } 2>/dev/null; __lcs_save; exit $__lcs_status"
    )


def _one_line(text: str) -> str:
    """``text`` as one bash ``$'...'`` word with no raw newline (control characters escaped)."""
    return "$'" + text.translate(_ESCAPES) + "'"


SHELL_SETUP = f'__lcs_setup={_one_line(_SETUP % {"state": _STATE_RELATIVE})}; eval "$__lcs_setup"; '
"""How every script starts (built once: it never changes): the part a shell may run before its
command arrives. The rest of the script is on the same line, so it still reads as line 1."""

_RESTORE_WORD = _one_line(_RESTORE)


__all__ = ["SHELL_SETUP", "STATE_PATH", "shell_script"]
