"""The default background-process operations of a [`Session`][langchain_sandbox.Session]: the guest
supervisor (`guest.supervisor`) run through the session's own ``run_command``.

Every provider that can run a command gets them unchanged: one ``python3 -I -S -c SOURCE OP
JSON`` per operation (``-I``: nothing of the workspace or the environment shadows the standard
library it imports). The supervisor's refusals come back as typed errors: a bad or unknown name
is [`InvalidInputError`][langchain_sandbox.InvalidInputError] (the model's mistake, which it can
fix), the cap is [`ProcessLimitError`][langchain_sandbox.ProcessLimitError]; a supervisor that
could not run at all is a [`SandboxError`][langchain_sandbox.SandboxError].
"""

from __future__ import annotations

import base64
import functools
import json
import math
import shlex
from typing import TYPE_CHECKING, Any

from langchain_sandbox.errors import InvalidInputError, ProcessLimitError, SandboxError
from langchain_sandbox.processes import (
    OUTPUT_READ,
    ProcessInfo,
    ProcessOutput,
    ProcessSpec,
    check_process_name,
)
from langchain_sandbox.providers.guest.packer import source_path

if TYPE_CHECKING:
    from langchain_sandbox.providers.base import Session

_OP_TIMEOUT = 30.0  # one operation of the supervisor; start waits half a second at most
_ENVELOPE = 1024  # bytes of a reply besides the output it carries


@functools.cache
def supervisor_source() -> str:
    """The supervisor's source, as sent to the sandbox."""
    return source_path("supervisor").read_text(encoding="utf-8")


def guest_command(python: str, op: str, request: dict[str, Any]) -> str:
    """The shell command that runs one supervisor operation with ``python`` in the sandbox."""
    return " ".join(
        [
            shlex.quote(python),
            "-I",
            "-S",
            "-c",
            shlex.quote(supervisor_source()),
            op,
            shlex.quote(json.dumps(request)),
        ]
    )


async def call(
    session: Session,
    op: str,
    request: dict[str, Any],
    *,
    cwd: str | None = None,
    timeout: float = _OP_TIMEOUT,
) -> dict[str, Any]:
    """Run one supervisor operation in ``session`` and return its JSON reply, or raise."""
    command = guest_command(session.guest_python, op, request)
    result = await session.run_command(command, timeout=timeout, cwd=cwd)
    lines = result.stdout.strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else None
    except ValueError:
        reply = None
    if isinstance(reply, dict) and result.exit_code == 2 and "error" in reply:
        error = ProcessLimitError if reply.get("kind") == "limit" else InvalidInputError
        raise error(str(reply["error"]), provider=session.provider_name)
    if not isinstance(reply, dict) or not result.ok:
        raise SandboxError(
            f"The sandbox's process supervisor failed ({op}):\n{result.render(max_chars=2000)}",
            provider=session.provider_name,
        )
    return reply


def _info(reply: dict[str, Any]) -> ProcessInfo:
    try:
        return ProcessInfo(
            name=str(reply["name"]),
            command=str(reply["command"]),
            cwd=str(reply["cwd"]),
            state=reply["state"],
            exit_code=None if reply.get("exit_code") is None else int(reply["exit_code"]),
            started_at=float(reply["started_at"]),
            pid=None if reply.get("pid") is None else int(reply["pid"]),
            restart=bool(reply.get("restart", True)),
            output=str(reply.get("output", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SandboxError(f"The process supervisor sent a malformed reply ({exc!r}).") from None


async def start_process(
    session: Session, spec: ProcessSpec, *, existing_ok: bool = False
) -> ProcessInfo:
    """Start ``spec`` (already `ProcessSpec.checked`) in ``session``; with ``existing_ok``, a
    process of that name that is running already is returned as it is instead of refused."""
    request = {
        "existing_ok": existing_ok,
        "name": spec.name,
        "command": spec.command,
        "cwd": spec.cwd,
        "env": dict(spec.env),
        "restart": spec.restart,
        "cap": session.spec.limits.max_background_processes,
    }
    return _info(await call(session, "start", request, cwd=spec.cwd))


async def process_output(
    session: Session, name: str, since: int, *, internal: bool = False
) -> ProcessOutput:
    """Output of ``name`` from byte ``since`` on."""
    check_process_name(name, internal=internal)
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise InvalidInputError(f"since must be a byte offset (an integer >= 0), not {since!r}.")
    # The reply carries the bytes in base64 and must fit the session's output capture.
    room = (session.spec.limits.max_output_bytes - _ENVELOPE) * 3 // 4
    limit = max(1024, min(OUTPUT_READ, room))
    reply = await call(session, "output", {"name": name, "since": since, "limit": limit})
    try:
        return ProcessOutput(
            name=str(reply["name"]),
            text=base64.b64decode(reply["data"]).decode("utf-8", "replace"),
            next_offset=int(reply["next_offset"]),
            state=reply["state"],
            exit_code=None if reply.get("exit_code") is None else int(reply["exit_code"]),
            dropped=int(reply["dropped"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SandboxError(f"The process supervisor sent a malformed reply ({exc!r}).") from None


async def stop_process(
    session: Session, name: str, grace: float, *, internal: bool = False
) -> ProcessInfo:
    """Stop ``name``: ``SIGTERM`` to its process group, ``SIGKILL`` after ``grace`` seconds."""
    check_process_name(name, internal=internal)
    if (
        isinstance(grace, bool)
        or not isinstance(grace, (int, float))
        or not math.isfinite(grace)
        or not 0 <= grace <= 600
    ):
        raise InvalidInputError(f"grace must be a number of seconds from 0 to 600, not {grace!r}.")
    reply = await call(session, "stop", {"name": name, "grace": grace}, timeout=_OP_TIMEOUT + grace)
    return _info(reply)


async def list_processes(session: Session) -> list[ProcessInfo]:
    """Every named process of ``session`` (internal ones, such as port relays, left out)."""
    reply = await call(session, "list", {})
    processes = reply.get("processes")
    if not isinstance(processes, list):
        raise SandboxError("The process supervisor sent a malformed list.")
    return [_info(item) for item in processes]


__all__ = [
    "call",
    "guest_command",
    "list_processes",
    "process_output",
    "start_process",
    "stop_process",
    "supervisor_source",
]
