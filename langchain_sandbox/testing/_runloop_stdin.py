"""The stdin of an emulated Runloop execution started with ``attach_stdin`` (``send_std_in``).

A devbox's commands run in a local-provider session, whose commands have no stdin, and which
runs one at a time (so a second command cannot write into the first). The emulator therefore
makes a FIFO in the session's workspace, holds it open on the host, and starts the command with
its stdin read from it; the command's shell unlinks it as soon as it has it open, so no listing
or snapshot of the workspace sees it afterwards. ``send_std_in``'s text is written into it, and
its ``EOF`` closes the host's end.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import threading
from pathlib import Path

from langchain_sandbox.core.workspace import WORKSPACE_ROOT

_PREFIX = ".runloop-emulator-stdin-"


class StdinPipe:
    """One execution's stdin.

    Args:
        workspace: The host directory that is the devbox's ``/home/user``.
        execution_id: Names the FIFO.
    """

    def __init__(self, workspace: str | os.PathLike[str], execution_id: str) -> None:
        name = _PREFIX + execution_id
        self._host = Path(workspace) / name
        self._sandbox_path = f"{WORKSPACE_ROOT}/{name}"
        os.mkfifo(self._host, 0o600)
        owner = Path(workspace).stat()
        os.chown(self._host, owner.st_uid, owner.st_gid)
        # Read-write, so opening never waits for the command and its reads wait for text.
        self._fd: int | None = os.open(self._host, os.O_RDWR | os.O_NONBLOCK)
        self._lock = threading.Lock()

    def wrap(self, command: str) -> str:
        """``command``, with its stdin read from this pipe."""
        path = shlex.quote(self._sandbox_path)
        return f"exec 0<{path} && rm -f -- {path}\n{command}"

    def write(self, text: str, ended: threading.Event) -> bool:
        """Write ``text`` for the command to read; ``False`` if its stdin is closed or the
        command ended before it could take all of it."""
        data = text.encode()
        with self._lock:
            while data:
                if self._fd is None or ended.is_set():
                    return False
                try:
                    data = data[os.write(self._fd, data) :]
                except BlockingIOError:
                    select.select([], [self._fd], [], 0.05)
        return True

    def close(self) -> None:
        """The end of the input (``EOF``), or of the execution."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        with contextlib.suppress(FileNotFoundError):
            self._host.unlink()  # the command never opened it


__all__ = ["StdinPipe"]
