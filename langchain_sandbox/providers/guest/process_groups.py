"""How a guest worker starts a command in a process group of its own and ends the whole group
(stdlib only; the local worker loads it from a copy, the Runloop and Kubernetes worker carries it
inline, see `packer`), and how the local worker ends what a cell left in its own group.

The rule every provider keeps: what a command starts ends with it (forks, children, a fork bomb),
whether it finished, timed out or was interrupted; a service meant to outlive the call starts a
session of its own (``setsid``, ``start_new_session=True``, or the process supervisor).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any

# Below this line, what the Runloop and Kubernetes worker carries inline (`packer.shipped_part`).
# <shipped>
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402


def start_group() -> dict[str, Any]:
    """``subprocess.Popen`` keywords that start a command as the leader of a new process group
    (and session, so a terminal's signals never reach it): its pid is the group's id."""
    return {"start_new_session": True}


def end_group(pgid: int, *, wait: float = 0.0) -> None:
    """SIGKILL the process group ``pgid``; with ``wait``, again until it is gone (reaped) or
    ``wait`` seconds pass, so "a command's leftovers end with it" holds when the reply is sent,
    not a moment later."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return  # the group is gone
        if time.monotonic() >= deadline:
            return
        time.sleep(0.001)


def end_strays() -> None:
    """Kill what a cell left running in the worker's own process group, and reap it.

    The rule, as for commands: what code starts ends with the call (forks and children that
    did not start a session of their own); a service meant to outlive the call is started with
    ``start_new_session=True`` (or ``setsid``). Only this process group is touched, so without
    isolation nothing else on the host is.
    """
    me, group = os.getpid(), os.getpgrp()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        pid = int(name)
        try:
            if os.getpgid(pid) != group:
                continue
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            continue  # gone already, or not our child (its parent or pid 1 reaps it)


def pid_counter() -> bytes | None:
    """The last pid the sandbox's pid namespace gave out (``None`` if it cannot be read)."""
    try:
        fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 32)
    except OSError:
        return None
    finally:
        os.close(fd)


def terminate_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """End a command that ran out of time with its group: SIGTERM, up to ``grace`` seconds for
    its leader to exit (SIGKILL and ``grace`` more if it does not), then SIGKILL to what is left
    of the group: children that outlived their leader end with it too."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except OSError:
        return
    if not _reaped(process, grace):
        end_group(process.pid)
        _reaped(process, grace)
    end_group(process.pid)


def _reaped(process: subprocess.Popen[bytes], timeout: float) -> bool:
    import subprocess

    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True
