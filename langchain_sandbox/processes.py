"""Processes that outlive a call: what starts one, and what the session says about it.

A session can run named background processes (a dev server, a watcher, a training run) next to
its calls; see [`Session.start_process`][langchain_sandbox.Session.start_process]. A
[`ProcessSpec`][langchain_sandbox.ProcessSpec] is everything needed to start one again, which is
why the sandbox record keeps it (a restore starts ``restart=True`` processes again). Their output
is kept inside the sandbox in a bounded ring per process (the first `OUTPUT_HEAD` bytes and the
last `OUTPUT_TAIL`), readable from any byte offset, so it never grows host memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_sandbox.core.environment import validate_env
from langchain_sandbox.core.workspace import WORKSPACE_ROOT, resolve_path
from langchain_sandbox.errors import InvalidInputError

ProcessState = Literal["running", "exited", "stopped", "lost"]
"""``running``; ``exited`` on its own (``exit_code`` says how); ``stopped`` by
[`Session.stop_process`][langchain_sandbox.Session.stop_process]; ``lost``: what supervised it is
gone (the sandbox restarted under it), so nothing more is known."""

OUTPUT_HEAD = 64 * 1024
"""Bytes of a process's first output always kept."""

OUTPUT_TAIL = 1024 * 1024
"""Bytes of a process's latest output kept (older ones, past the head, are dropped)."""

OUTPUT_READ = 256 * 1024
"""Most bytes one `Session.process_output` returns; ``next_offset`` says where to go on."""

_PUBLIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_INTERNAL_NAME = re.compile(r"\.[A-Za-z0-9_-][A-Za-z0-9_.-]{0,62}")


def check_process_name(name: object, *, internal: bool = False) -> str:
    """``name`` if it may name a process: 1 to 64 of ``A-Z a-z 0-9 _ . -``, not starting with
    ``.`` or ``-`` (names starting with ``.`` are the package's own, e.g. port relays, and only
    ``internal`` callers use them).

    Raises:
        InvalidInputError: otherwise, saying what a name may be.
    """
    pattern = _INTERNAL_NAME if internal else _PUBLIC_NAME
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise InvalidInputError(
            f"Invalid process name {name!r}: use 1 to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter, a digit or '_'."
        )
    return name


@dataclass(frozen=True)
class ProcessSpec:
    """What starts a background process, and starts it again after a restore.

    Attributes:
        name: Its name in the session (see `check_process_name`).
        command: A shell command line, run as ``bash -c command`` in a process group of its own
            (stopping the process ends the whole group).
        cwd: Its working directory, an absolute path in the workspace.
        env: Variables on top of the sandbox's own.
        restart: Start it again after a restore (a resume in a new process, a fork, a sandbox
            the provider lost); the runtime reads this, the session does not.
    """

    name: str
    command: str
    cwd: str = WORKSPACE_ROOT
    env: dict[str, str] = field(default_factory=dict)
    restart: bool = True

    def checked(self, *, internal: bool = False) -> ProcessSpec:
        """This spec with its fields checked (``cwd`` made absolute), or raise
        [`InvalidInputError`][langchain_sandbox.InvalidInputError] saying which is wrong."""
        check_process_name(self.name, internal=internal)
        if not isinstance(self.command, str) or not self.command.strip():
            raise InvalidInputError("A process's command must be a non-empty string.")
        if "\x00" in self.command:
            raise InvalidInputError("A process's command must not contain NUL.")
        if not isinstance(self.restart, bool):
            raise InvalidInputError("restart must be True or False.")
        return ProcessSpec(
            name=self.name,
            command=self.command,
            cwd=resolve_path(self.cwd),
            env=validate_env(self.env),
            restart=self.restart,
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-safe form (what a sandbox record keeps)."""
        return {
            "name": self.name,
            "command": self.command,
            "cwd": self.cwd,
            "env": dict(self.env),
            "restart": self.restart,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessSpec:
        """The spec `to_json` gave, checked."""
        try:
            return cls(
                name=data["name"],
                command=data["command"],
                cwd=data.get("cwd", WORKSPACE_ROOT),
                env=dict(data.get("env") or {}),
                restart=data.get("restart", True),
            ).checked(internal=str(data["name"]).startswith("."))
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidInputError(f"Not a process spec: {exc}.") from None


@dataclass(frozen=True)
class ProcessInfo:
    """A background process as the session sees it.

    Attributes:
        name: Its name.
        command: Its command line.
        cwd: Its working directory (a sandbox path).
        state: See `ProcessState`.
        exit_code: How it ended (128 + N when signal N ended it); ``None`` while it runs.
        started_at: When it started (unix time, the sandbox's clock).
        pid: Its process id in the sandbox (also its process group), while known.
        restart: Its spec's ``restart``.
        output: Only from `Session.start_process`: what it printed first (within about half
            a second), so a caller sees at once whether it started well.
    """

    name: str
    command: str
    cwd: str
    state: ProcessState
    exit_code: int | None
    started_at: float
    pid: int | None
    restart: bool
    output: str = ""


@dataclass(frozen=True)
class ProcessOutput:
    """Output of a background process from a byte offset on (stdout and stderr merged in the
    order they were written).

    Attributes:
        name: The process.
        text: The bytes from ``since`` on that the ring holds (at most `OUTPUT_READ`), decoded
            as UTF-8 with invalid bytes replaced.
        next_offset: The offset to pass as ``since`` next time (all the process wrote so far,
            unless this read stopped at `OUTPUT_READ`).
        state: The process's state.
        exit_code: Its exit code, once it ended.
        dropped: Bytes between ``since`` and the first byte of ``text`` that the ring no
            longer holds (they were neither in its head nor in its tail).
    """

    name: str
    text: str
    next_offset: int
    state: ProcessState
    exit_code: int | None
    dropped: int = 0


__all__ = [
    "OUTPUT_HEAD",
    "OUTPUT_READ",
    "OUTPUT_TAIL",
    "ProcessInfo",
    "ProcessOutput",
    "ProcessSpec",
    "ProcessState",
    "check_process_name",
]
