"""Where a tool's output goes while the sandbox produces it.

Two consumers, one event (``{"type": "sandbox_output", "stream", "text", "thread_id",
"tool_call_id"}``):

* **LangGraph's stream writer**: ``graph.stream(..., stream_mode="custom")`` yields the event as
  is. This is how a LangGraph app streams progress from inside a node.
* **LangChain callbacks**, as a custom event named ``sandbox_output`` of the tool's run:
  ``astream_events(version="v2")`` yields it as ``{"event": "on_custom_event", "name":
  "sandbox_output", "data": <the event>, "run_id": <the tool run>, ...}``, and any callback
  handler's ``on_custom_event`` receives it. This is LangChain's own mechanism for progress of a
  tool (``adispatch_custom_event``); LangGraph's custom stream does not reach ``astream_events``.

Following output costs requests on some providers (Runloop opens two event streams per call), so
a forwarder with no consumer is not handed to the provider (`OutputForwarder.listening`):
LangGraph's stream writer of a run without ``stream_mode="custom"`` does nothing, and a callback
handler that does not override ``on_custom_event`` (or ignores custom events) drops them.

Chunks arrive on the runtime's event-loop thread. For an async caller they are queued to its
own loop and dispatched there in order by one task, which `OutputForwarder.aclose` drains
before the tool returns, so every event precedes the tool's end event. For a sync caller they
are dispatched from the runtime's thread as they come (handlers must be quick, as
[`OutputCallback`][langchain_sandbox.OutputCallback] says).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackHandler,
    AsyncCallbackManager,
    AsyncCallbackManagerForToolRun,
    BaseCallbackHandler,
    CallbackManager,
    CallbackManagerForToolRun,
)

OUTPUT_EVENT = "sandbox_output"
"""``type`` of the stream-writer events and ``name`` of the custom callback events carrying
output while code runs."""

logger = logging.getLogger(__name__)

_END = object()


def _does_nothing(_: Any) -> None:
    pass


def _is_no_op(writer: Callable[[Any], None]) -> bool:
    """Whether ``writer`` is one of the writers LangGraph gives a run nobody streams custom
    events from: functions whose body is ``pass`` (LangGraph defines several, one per run)."""
    code = getattr(writer, "__code__", None)
    return code is not None and (code.co_code, code.co_consts) == (
        _does_nothing.__code__.co_code,
        _does_nothing.__code__.co_consts,
    )


def _stream_writer(tool_runtime: Any) -> Callable[[Any], None] | None:
    """LangGraph's stream writer for this call (the ``ToolRuntime``'s, else the graph step's),
    ``None`` when there is none or it drops what it is given."""
    writer = getattr(tool_runtime, "stream_writer", None)
    if writer is None:
        from langgraph.config import get_stream_writer

        try:
            writer = get_stream_writer()
        except (RuntimeError, KeyError, AttributeError):
            return None
    return None if _is_no_op(writer) else writer


def _takes_custom_events(
    manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun,
) -> bool:
    """Whether a handler of this run would do anything with a custom event."""
    for handler in manager.handlers:
        if getattr(handler, "ignore_custom_event", False):
            continue
        method = type(handler).on_custom_event
        if method not in (
            BaseCallbackHandler.on_custom_event,
            AsyncCallbackHandler.on_custom_event,
        ):
            return True
    return False


class OutputForwarder:
    """An [`OutputCallback`][langchain_sandbox.OutputCallback] that hands each chunk to
    LangGraph's stream writer and to the run's callbacks (see the module docstring).

    Args:
        tool_runtime: The ``ToolRuntime`` a ``ToolNode`` injected, if any (its stream writer).
        run_manager: The tool run's callback manager (custom events are events of that run).
        thread_id: The sandbox thread, copied into each event.
        tool_call_id: The tool call, copied into each event.
        loop: The async caller's loop; ``None`` for a sync caller.
    """

    def __init__(
        self,
        *,
        tool_runtime: Any,
        run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None,
        thread_id: str,
        tool_call_id: str | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self._writer = _stream_writer(tool_runtime)
        # The writer reads the step's config from a context variable: write in the caller's.
        self._context = contextvars.copy_context()
        self._fields = {"thread_id": thread_id, "tool_call_id": tool_call_id}
        self._loop = loop
        self._sync_manager: CallbackManager | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._pump: asyncio.Task[None] | None = None
        if isinstance(run_manager, CallbackManagerForToolRun) and _takes_custom_events(run_manager):
            self._sync_manager = run_manager.get_child()
        elif (
            isinstance(run_manager, AsyncCallbackManagerForToolRun)
            and _takes_custom_events(run_manager)
            and loop is not None
        ):
            self._queue = asyncio.Queue()
            self._pump = loop.create_task(_dispatch_queued(run_manager.get_child(), self._queue))

    @property
    def listening(self) -> bool:
        """Whether anyone consumes the output (a live stream writer or a callback handler that
        takes custom events); a forwarder that is not listening is not passed to the provider."""
        return self._writer is not None or self._sync_manager is not None or self._queue is not None

    def __call__(self, stream: Literal["stdout", "stderr"], text: str) -> None:
        event = {"type": OUTPUT_EVENT, "stream": stream, "text": text, **self._fields}
        # A broken consumer must not break the run that feeds it.
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._context.run(self._writer, event)
        if self._sync_manager is not None:
            with contextlib.suppress(Exception):
                self._sync_manager.on_custom_event(
                    OUTPUT_EVENT, event, run_id=self._sync_manager.parent_run_id
                )
        if self._queue is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closing
                self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def aclose(self) -> None:
        """Dispatch what is still queued (async callers); call on the caller's loop."""
        if self._queue is None or self._pump is None:
            return
        self._queue.put_nowait(_END)
        await self._pump


async def _dispatch_queued(manager: AsyncCallbackManager, queue: asyncio.Queue[Any]) -> None:
    """Dispatch queued events in order until the end marker."""
    while (event := await queue.get()) is not _END:
        try:
            await manager.on_custom_event(OUTPUT_EVENT, event, run_id=manager.parent_run_id)
        except Exception as exc:
            logger.debug("a callback handler failed on sandbox output: %s", exc)


def listener(forwarder: OutputForwarder | None) -> OutputForwarder | None:
    """``forwarder`` if it is listening, else ``None`` (what a tool hands the provider)."""
    return forwarder if forwarder is not None and forwarder.listening else None


__all__ = ["OUTPUT_EVENT", "OutputForwarder", "listener"]
