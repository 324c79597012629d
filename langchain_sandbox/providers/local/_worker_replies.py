"""What a local session's worker answers, and what the session makes of it: how a request
ended (`Outcome`: a reply, a timeout, a worker lost), the `ExecutionResult` of a code or command
call (`execution_result`), a reply checked for an infrastructure call (`checked`), a variables
dump as it arrives in chunks or queued behind a call (`DumpChunks`, `QueuedDump`), a request's
events routed to its output or its tool calls, and a reply the sandbox forged turned into a clear
error (`MALFORMED`, `malformed_reply`), never a crash in the host.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_sandbox.errors import SandboxError
from langchain_sandbox.providers.guest_facts import failure_text, figure_notices
from langchain_sandbox.providers.local._streams import OutputStreams
from langchain_sandbox.providers.local._worker_process import WorkerProcess
from langchain_sandbox.providers.names import LOCAL
from langchain_sandbox.providers.tool_channel import ToolEvents, ToolHost
from langchain_sandbox.results import Artifact, ExecutionError, ExecutionResult

WORKER_RESTARTED = "the Python worker was restarted; variables were lost"


@dataclass
class Outcome:
    """How a request to the worker ended."""

    reply: dict[str, Any] | None
    timed_out: bool = False
    lost: str | None = None  # why the worker is gone, when it is
    out_of_memory: bool = False
    elapsed_ms: float = 0.0


def checked(op: str, outcome: Outcome) -> dict[str, Any]:
    """The reply to an infrastructure request (``op``: variables, a cache refresh); a timeout,
    a lost worker or a failure in the worker is a `SandboxError`."""
    if outcome.reply is None or outcome.timed_out:
        raise SandboxError(
            f"The worker could not {op}: {outcome.lost or 'it timed out'}.", provider=LOCAL
        )
    if "failure" in outcome.reply:
        raise SandboxError(
            f"The worker could not {op}: {failure_text(outcome.reply['failure'])}.",
            provider=LOCAL,
        )
    return outcome.reply


def execution_result(
    kind: Literal["code", "command"],
    outcome: Outcome,
    streams: OutputStreams,
    notices: list[str],
) -> ExecutionResult:
    """The result of a code or command request: the reply's fields, the output as ``streams``
    kept it, and ``notices`` plus what the reply adds (a lost worker, figures left out)."""
    reply = outcome.reply or {}
    if "failure" in reply:
        raise SandboxError(f"The worker failed: {failure_text(reply['failure'])}.", provider=LOCAL)
    fields = streams.result_fields(reply.get("dropped"))
    error = None
    if "error" in reply:
        error = ExecutionError(**reply["error"])
    elif outcome.lost is not None and not outcome.timed_out:
        name = "MemoryError" if outcome.out_of_memory else "SandboxWorkerDied"
        error = ExecutionError(name=name, value=outcome.lost)
    if kind == "command":
        code = reply.get("exit_code")
        exit_code = None if code is None else (int(code) if code >= 0 else 128 - int(code))
    else:
        exit_code = 1 if error is not None else (None if outcome.timed_out else 0)
    if outcome.lost is not None:
        notices.append(f"{outcome.lost}; {WORKER_RESTARTED}")
    notices.extend(figure_notices(reply.get("figures_failed"), reply.get("figures_left_out")))
    artifacts = [
        Artifact.from_bytes(f"figure-{index}.png", "image/png", base64.b64decode(png))
        for index, png in enumerate(reply.get("figures", []), start=1)
    ]
    duration = outcome.elapsed_ms if outcome.timed_out else reply.get("duration_ms")
    return ExecutionResult(
        kind=kind,
        exit_code=exit_code,
        error=error,
        value=reply.get("value"),
        artifacts=artifacts,
        duration_ms=float(duration if duration is not None else outcome.elapsed_ms),
        timed_out=outcome.timed_out,
        notices=notices,
        **fields,
    )


@dataclass
class DumpChunks:
    """A variables dump as it arrives: in ``variables`` events, since a line of the event pipe
    is bounded."""

    max_bytes: int
    received: bytearray = field(default_factory=bytearray)
    overflow: bool = False

    def on_event(self, event: dict[str, Any]) -> None:
        # Past what the worker was allowed to send, the rest is not kept; the dump is refused.
        if event.get("stream") != "variables" or self.overflow:
            return
        self.received.extend(base64.b64decode(event["data"], validate=True))
        self.overflow = len(self.received) > self.max_bytes

    def data(self, size: int) -> bytes:
        """The dump's bytes, if the worker sent exactly the ``size`` it announced."""
        if self.overflow or size != len(self.received):
            raise ValueError(f"the dump is {len(self.received)} bytes, not the {size} announced")
        return bytes(self.received)


@dataclass(frozen=True)
class QueuedDump:
    """A variables dump request sent to a worker (see `LocalSession.expect_capture`)."""

    worker: WorkerProcess
    request_id: int
    future: asyncio.Future[dict[str, Any]]
    chunks: DumpChunks

    @classmethod
    def send(cls, worker: WorkerProcess, max_bytes: int) -> QueuedDump:
        chunks = DumpChunks(max_bytes)
        request_id, future = worker.send("dump", {"max_bytes": max_bytes}, chunks.on_event)
        # A dump nobody waits for any more (the call after it made it stale) may still fail.
        future.add_done_callback(_retrieve)
        return cls(worker, request_id, future, chunks)


@contextlib.asynccontextmanager
async def tool_events(
    worker: WorkerProcess, tools: ToolHost | None
) -> AsyncIterator[ToolEvents | None]:
    """The request's tool calls in flight, dropped when it ends (none without ``tools``)."""
    if tools is None:
        yield None
        return
    async with ToolEvents(
        tools, lambda event, reply: worker.answer_tool(int(event["id"]), reply)
    ) as events:
        yield events


def routed(
    on_output: Callable[[dict[str, Any]], None], tools: ToolEvents | None
) -> Callable[[dict[str, Any]], None]:
    """The request's event handler: ``tool`` events to ``tools``, the rest to ``on_output``."""
    if tools is None:
        return on_output

    def on_event(event: dict[str, Any]) -> None:
        (tools.on_event if event.get("ev") == "tool" else on_output)(event)

    return on_event


def killed_by_host(why: str) -> str:
    return f"the host killed the Python worker: {why}"


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


# What parsing a reply the sandbox forged can raise (user code can write to the event pipe).
MALFORMED = (TypeError, ValueError, KeyError, AttributeError, ArithmeticError, RecursionError)


def malformed_reply(exc: BaseException) -> SandboxError:
    """A forged reply is the sandboxed code's own fault, but it must surface as a clear error
    for that call (the session stays usable), never as a crash in the host."""
    return SandboxError(
        f"The sandbox sent a malformed reply ({type(exc).__name__}: {exc}).", provider=LOCAL
    )


__all__ = [
    "MALFORMED",
    "WORKER_RESTARTED",
    "DumpChunks",
    "Outcome",
    "QueuedDump",
    "checked",
    "execution_result",
    "killed_by_host",
    "malformed_reply",
    "routed",
    "tool_events",
]
