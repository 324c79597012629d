"""Spare shells: a ``bash`` the local worker starts while it is idle after a persistent-shell
command, waiting for the next one's script, so that command does not wait for a process to start
(stdlib only; the local worker loads it from a copy beside it, see `packer`).

Starting a process (fork, exec, bash's own start) is most of a small command's time in the local
worker. A spare takes it off the command's path, and is used only when it was started exactly as a
fresh process for the command would be (`Spares.run`).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

_SPARE_BOOT = (
    " read -r __lcs_go <&{go} || exit 0; IFS= read -r -d '' __lcs_script <&{script}; "
    'exec {go}<&- {script}<&-; SECONDS=0; eval "unset -v __lcs_go __lcs_script;$__lcs_script"'
)
"""What a spare shell runs after the request's preamble: wait for the go line (end of file: the
spare is discarded, exit), read the script (a memfd, so ``read`` takes it in blocks, not a byte
at a time as from a pipe), close both descriptors and ``eval`` it, on the script's first line so
its messages keep their line numbers. ``SECONDS`` counts from the command, not from the spare's
start."""

SPARE_IDLE_MS = 2
"""How long the worker waits for a next request before it starts a spare."""

_INHERITED_STATUS = (
    b"Umask:",
    b"SigBlk:",
    b"SigIgn:",
    b"NoNewPrivs:",
    b"Cpus_allowed:",
    b"Mems_allowed:",
)


def inherited() -> bytes:
    """What a process started by the calling thread inherits from it besides the environment,
    the working directory and the descriptors (each given explicitly): umask, blocked and ignored
    signals, no_new_privs, CPU and memory placement, priority, nice value, scheduling policy and
    resource limits.

    A spare is used only if these are as they were when it started: the requests that run user
    code in this process (cells, loading variables) discard it, but a variables dump runs
    pickling hooks, which could change any of them.
    """
    with open("/proc/thread-self/status", "rb") as handle:
        parts = [line for line in handle if line.startswith(_INHERITED_STATUS)]
    with open("/proc/thread-self/stat", "rb") as handle:
        fields = handle.read().rpartition(b")")[2].split()
    parts += [fields[15], fields[16], fields[38]]  # priority, nice, policy (fields 18, 19, 41)
    with open("/proc/self/limits", "rb") as handle:
        parts.append(handle.read())
    return b"\n".join(parts)


class Spare:
    """A shell started before its command arrives, blocked reading the go line.

    Starting a process (fork, exec, bash's own start) is most of a small command's time in
    here; a spare takes it off the command's path. It runs the command exactly as a fresh
    ``bash -c`` would, with one difference: the script is ``eval``-ed, so bash names a syntax
    error of the script's own text ``eval`` instead of ``-c``. The persistent shell evals the
    user's command itself, so its commands read the same either way; only requests marked
    ``warm`` (the persistent shell's) use spares.
    """

    def __init__(
        self,
        shell: str,
        cwd: str | None,
        env: dict[str, str],
        preamble: bytes,
        end_group: Callable[[int], None],
    ) -> None:
        import subprocess

        self.key = (shell, cwd, env, inherited(), preamble)
        self._end_group = end_group
        self._script = os.memfd_create("command", os.MFD_CLOEXEC)
        go, self._go = os.pipe()
        try:
            self.process = subprocess.Popen(
                [shell, "-c", preamble + _SPARE_BOOT.format(go=go, script=self._script).encode()],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=(go, self._script),
            )
        except BaseException:
            os.close(self._go)
            os.close(self._script)
            raise
        finally:
            os.close(go)

    def run(self, script: bytes) -> subprocess.Popen[bytes]:
        """Hand the spare its script: from here on it is the command's process."""
        try:
            os.pwrite(self._script, script + b"\0", 0)
            os.write(self._go, b"\n")
        finally:
            os.close(self._go)
            os.close(self._script)
        return self.process

    def discard(self) -> None:
        """End the spare unused (closing the go pipe alone would end it, but not at once)."""
        os.close(self._go)
        os.close(self._script)
        self._end_group(self.process.pid)
        self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


class Spares:
    """The worker's one spare (at most), started for the command the worker expects next."""

    def __init__(self, end_group: Callable[[int], None]) -> None:
        self._end_group = end_group
        self._spare: Spare | None = None

    @property
    def waiting(self) -> bool:
        """Whether a spare was started (it may have died since: `run` checks)."""
        return self._spare is not None

    def start(self, shell: str, cwd: str | None, env: dict[str, str], preamble: bytes) -> bool:
        """Start a spare for a command like this; ``False`` when none can be (then no spare is
        tried again until another persistent-shell command)."""
        if "BASH_ENV" in env:
            # bash sources that file when it starts: a spare would read it too early.
            return False
        try:
            self._spare = Spare(shell, cwd, env, preamble, self._end_group)
        except Exception:
            # No spare this time (no memfd, the process limit reached...): commands start
            # their own process, as without spares.
            return False
        return True

    def drop(self) -> None:
        spare = self._take()
        if spare is not None:
            spare.discard()

    def run(
        self, shell: str, cwd: str | None, env: dict[str, str], script: bytes, preamble: bytes
    ) -> subprocess.Popen[bytes] | None:
        """The spare's process running ``script``, if the spare was started exactly as a fresh
        process for this command would be and already ran the script's ``preamble``; ``None``
        (and no spare) otherwise."""
        spare = self._take()
        if spare is None:
            return None
        if (
            b"\0" in script
            or not script.startswith(preamble)
            or spare.key != (shell, cwd, env, inherited(), preamble)
        ):
            spare.discard()
            return None
        return spare.run(script[len(preamble) :])

    def _take(self) -> Spare | None:
        """The spare, detached, if it is still waiting (something may have killed it)."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.process.poll() is not None:
            spare.discard()
            return None
        return spare
