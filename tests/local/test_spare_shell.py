"""Spare shells: a persistent-shell command runs in a ``bash`` the worker started while idle.

Each test checks both that the spare path was (or was not) taken, through the shell's
``BASH_EXECUTION_STRING`` (a spare's is its boot line, a fresh shell's the script), and that the
command saw exactly what a fresh ``bash -c`` would have.
"""

from __future__ import annotations

import asyncio

from langchain_sandbox.providers.local import LocalSession

_MARK = 'echo "${BASH_EXECUTION_STRING: -7}"'
_SPARE = 'script"'  # how a spare's boot line ends (a fresh shell's script ends with its exit)


async def _idle() -> None:
    """Long enough for the worker to go idle and start a spare (it waits 2 ms for a request)."""
    await asyncio.sleep(0.3)


def _split_mark(stdout: str) -> tuple[str, bool]:
    """The command's own output, and whether it ran in a spare."""
    body, _, mark = stdout.rstrip("\n").rpartition("\n")
    return body, mark == _SPARE


async def test_a_command_in_a_spare_reads_as_in_a_fresh_shell(session: LocalSession) -> None:
    command = (
        'echo "$0 $# $SHLVL $- $LINENO $SECONDS"; (cd /proc/$$/fd && echo *); umask; ulimit -n\n'
        "no_such_command\n"
        "f() { return 3; }; f; echo $?\n"
        "eval 'echo ${x'\n"
        f"{_MARK}"
    )
    fresh = await session.run_shell(command)
    await _idle()
    spare = await session.run_shell(command)
    fresh_out, fresh_in_spare = _split_mark(fresh.stdout)
    spare_out, in_spare = _split_mark(spare.stdout)
    assert (fresh_in_spare, in_spare) == (False, True)
    assert spare_out == fresh_out
    assert fresh_out.startswith("/bin/bash 0 1 hBc 1 0\n0 1 2")
    assert (spare.stderr, spare.exit_code) == (fresh.stderr, fresh.exit_code)
    assert "line 2: no_such_command: command not found" in spare.stderr


async def test_a_spare_keeps_the_persistent_shell_state(session: LocalSession) -> None:
    await session.run_shell("mkdir -p app && cd app && export MODE=dev")
    await _idle()
    result = await session.run_shell(f'echo "$PWD $MODE"; cd /tmp; export MODE=prod; {_MARK}')
    assert _split_mark(result.stdout) == ("/home/user/app dev", True)
    await _idle()
    result = await session.run_shell(f'echo "$PWD $MODE"; {_MARK}')
    assert _split_mark(result.stdout) == ("/tmp prod", True)


async def test_a_command_in_a_spare_stops_at_its_timeout(session: LocalSession) -> None:
    await session.run_shell("true")
    await _idle()
    stopped = await session.run_shell("echo started; sleep 30", timeout=0.5)
    assert stopped.timed_out
    assert stopped.stdout == "started\n"
    after = await session.run_shell(f"echo ok; {_MARK}")
    assert _split_mark(after.stdout)[0] == "ok"


async def test_a_cell_discards_the_spare(session: LocalSession) -> None:
    await session.run_shell("true")
    await _idle()
    await session.run_code("import os\nos.environ['FROM_CELL'] = 'yes'\nos.umask(0o077)")
    await _idle()
    result = await session.run_shell(f'echo "$FROM_CELL"; umask; {_MARK}')
    # No spare after a cell until the next shell command: this one starts its own process.
    assert _split_mark(result.stdout) == ("yes\n0077", False)


async def test_a_spare_is_not_used_once_what_it_inherited_changed(session: LocalSession) -> None:
    # A thread of an earlier cell changes the worker's umask after the next spare started: the
    # spare would run the command with the old one.
    await session.run_code(
        "import os, threading\nthreading.Timer(0.5, lambda: os.umask(0o077)).start()"
    )
    await session.run_shell("true")
    await asyncio.sleep(1.0)
    result = await session.run_shell(f"umask; {_MARK}")
    assert _split_mark(result.stdout) == ("0077", False)
    await _idle()
    result = await session.run_shell(f"umask; {_MARK}")
    assert _split_mark(result.stdout) == ("0077", True)


async def test_a_variables_dump_that_changes_the_environment_is_seen(
    session: LocalSession,
) -> None:
    # Pickling hooks are the user's code, run by a dump while a spare waits.
    await session.run_code(
        "import os\n"
        "class Odd:\n"
        "    def __reduce__(self):\n"
        "        os.environ['FROM_DUMP'] = 'yes'\n"
        "        return (Odd, ())\n"
        "odd = Odd()"
    )
    await session.run_shell("true")
    await _idle()
    await session.dump_variables()
    result = await session.run_shell(f'echo "$FROM_DUMP"; {_MARK}')
    assert _split_mark(result.stdout) == ("yes", False)
