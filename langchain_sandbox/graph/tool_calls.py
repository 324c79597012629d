"""How a sandbox tool call becomes a graph update, and why it runs once.

Sandbox tools stay pure: they return a ``ToolMessage`` whose artifact carries the updated sandbox
record (``artifact["sandbox"]``). [`SandboxToolCallWrapper`][langchain_sandbox.SandboxToolCallWrapper] sits around the tool call (as a
``ToolNode`` ``wrap_tool_call`` / ``awrap_tool_call``, or inside [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware]) and
turns that artifact into ``Command(update={"sandbox": record, "messages": [message]})``, so the
record lands in the ``sandbox`` channel and every checkpointer stores it with the step.

It also runs a sandbox tool call as a LangGraph task where the node it runs in could be re-run.
When anything in the same node interrupts (another tool of the same message calling
``interrupt()`` for approval, a wrapper outside this one), LangGraph re-runs the whole node on
resume; the task's result was saved with the checkpoint's pending writes, so the sandbox call is
replayed from there instead of being executed a second time, in this process or in another one.
A task is only started where such a re-run can happen: a message whose calls are all sandbox
tools (which never interrupt) runs without one. That keeps ``stream_mode="updates"`` what a
plain ``ToolNode`` streams (LangGraph streams each task's result as an update of its own, under
the task's name), except for the messages that need the task.

LangGraph identifies a task by the order in which a node starts its tasks. ``ToolNode`` runs the
calls of one message on a thread pool, in no fixed order, so the wrapper reads the message's call
order from the request's state (`CallOrders`) and starts tasks in that order. Under
``create_agent`` every call is its own node run, so there is nothing to order.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, cast

from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.func import task
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from langchain_sandbox.graph.step_record import acontinue_from_step, continue_from_step
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.tools.base import SandboxTool

ToolResult = ToolMessage | Command[Any]
SyncHandler = Callable[[ToolCallRequest], ToolResult]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[ToolResult]]

_ORDER_WAIT_SECONDS = 120.0
"""Hang guard: a call whose predecessors never start its task goes ahead after this long."""


class _CallOrder:
    """Lets parallel calls of one node start their tasks in the order of the AI message."""

    def __init__(self, call_ids: Sequence[str]) -> None:
        self._position = {call_id: i for i, call_id in enumerate(call_ids)}
        self._next = 0
        self._turn = threading.Condition()

    @property
    def done(self) -> bool:
        """Every call has taken its turn."""
        return self._next >= len(self._position)

    @contextmanager
    def turn(self, call_id: str) -> Iterator[None]:
        position = self._position.get(call_id)
        if position is None:
            yield
            return
        with self._turn:
            self._turn.wait_for(lambda: self._next >= position, timeout=_ORDER_WAIT_SECONDS)
            try:
                yield
            finally:
                self._next = max(self._next, position + 1)
                self._turn.notify_all()


class CallOrders:
    """The order of each message whose parallel calls a node is running, found from the request.

    ``ToolNode`` hands every call's ``ToolCallRequest`` the node's state; the AI message in it
    that holds the call lists the message's calls in order. Calls of the tools named in
    ``ordered_tools`` take their turn in that order; one order lives while its calls take their
    turns and is dropped after the last, so a re-run of the node starts from the first again.

    Args:
        ordered_tools: Names of the tools whose calls start tasks (the sandbox tools).
        messages_key: The state key of the conversation.
    """

    def __init__(self, ordered_tools: Collection[str], *, messages_key: str = "messages") -> None:
        self._ordered_tools = frozenset(ordered_tools)
        self._messages_key = messages_key
        self._lock = threading.Lock()
        self._orders: dict[tuple[str, tuple[str, ...]], _CallOrder] = {}

    def _message_calls(self, request: ToolCallRequest) -> tuple[str, ...]:
        calls = message_calls(request, self._messages_key) or []
        return tuple(c["id"] or "" for c in calls if c["name"] in self._ordered_tools)

    @contextmanager
    def turn(self, request: ToolCallRequest) -> Iterator[None]:
        """Wait until the calls before this one in its message have started their tasks."""
        calls = self._message_calls(request)
        if len(calls) < 2:
            yield
            return
        configurable = request.runtime.config.get("configurable") or {}
        key = (str(configurable.get("checkpoint_ns", "")), calls)
        with self._lock:
            order = self._orders.setdefault(key, _CallOrder(calls))
        try:
            with order.turn(request.tool_call["id"] or ""):
                yield
        finally:
            with self._lock:
                if order.done and self._orders.get(key) is order:
                    del self._orders[key]


def is_sandbox_tool(tool: BaseTool | None) -> bool:
    """Whether ``tool`` is one of this package's sandbox tools (the ones that report a record)."""
    return isinstance(tool, SandboxTool)


def bind_runtime(tool: BaseTool, runtime: SandboxRuntime | None) -> BaseTool:
    """``tool`` set to use ``runtime``, if it is a sandbox tool that has none of its own yet.

    A copy, so a tool shared with other graphs keeps resolving its runtime per call.
    """
    if runtime is None or not isinstance(tool, SandboxTool) or tool.runtime is not None:
        return tool
    return tool.model_copy(update={"runtime": runtime})


def to_graph_update(result: ToolResult, *, messages_key: str = "messages") -> ToolResult:
    """``ToolMessage`` with a sandbox record in its artifact -> ``Command`` updating the channel.

    Anything else (an error message, a Command a tool built itself) passes through unchanged.
    """
    if not isinstance(result, ToolMessage) or not isinstance(result.artifact, dict):
        return result
    record = result.artifact.get("sandbox")
    if not isinstance(record, dict):
        return result
    return Command(update={"sandbox": record, messages_key: [result]})


def _run_once_sync(execute: Callable[[], ToolResult]) -> ToolResult:
    return execute()


async def _run_once_async(execute: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    return await execute()


_TASK_NAME = "sandbox_tool_call"
# One name for both, so a thread started with ``ainvoke`` and resumed with ``invoke`` replays.
# ``task``'s overloads defeat mypy's inference, hence the casts to what it returns.
_sync_task = cast(
    "Callable[[Callable[[], ToolResult]], Future[ToolResult]]",
    task(name=_TASK_NAME)(_run_once_sync),  # type: ignore[arg-type]
)
_async_task = cast(
    "Callable[[Callable[[], Awaitable[ToolResult]]], Awaitable[ToolResult]]",
    task(name=_TASK_NAME)(_run_once_async),  # type: ignore[arg-type]
)


def message_calls(request: ToolCallRequest, messages_key: str) -> list[ToolCall] | None:
    """The tool calls of the model message that made ``request``'s call, in order (``None`` if
    the message is not in the request's state)."""
    state = request.state
    messages = (
        state
        if isinstance(state, list)
        else state.get(messages_key)
        if isinstance(state, Mapping)
        else getattr(state, messages_key, None)
    )
    call_id = request.tool_call["id"]
    for message in reversed(messages or []):
        calls = getattr(message, "tool_calls", None) or []
        if isinstance(message, AIMessage) and any(c.get("id") == call_id for c in calls):
            return list(calls)
    return None


def _may_be_rerun(request: ToolCallRequest, messages_key: str) -> bool:
    """Whether the node running ``request`` could be re-run after this call finished: another
    call of the same model message goes to a tool that is not a sandbox tool (and may
    ``interrupt()``), or the message cannot be found (assume it could)."""
    calls = message_calls(request, messages_key)
    if calls is None:
        return True
    tools = {tool.name: tool for tool in getattr(request.runtime, "tools", None) or ()}
    return not all(is_sandbox_tool(tools.get(c["name"])) for c in calls)


def _in_graph() -> bool:
    """Whether tasks can be started here (inside a running graph node)."""
    from langgraph.config import get_config

    try:
        get_config()
    except RuntimeError:
        return False
    return True


class SandboxToolCallWrapper:
    """``wrap_tool_call`` / ``awrap_tool_call`` for sandbox tools (see the module docstring).

    Args:
        runtime: Sandbox tools that have no runtime of their own use this one.
        messages_key: The state key of the conversation (``ToolNode``'s ``messages_key``).
        ordered_tools: Names of the sandbox tools whose parallel calls of one message run on
            ``ToolNode``'s thread pool: their tasks start in message order (`CallOrders`).
            Not needed where every call is its own node run (``create_agent``).
        run_once: Run sandbox calls as LangGraph tasks where the node could be re-run (see the
            module docstring), so a resume replays them instead of running them again. Turn off
            only for graphs that never interrupt.
        every_call: Start the task for every sandbox call, not only those whose message also
            calls another tool: for a node that wrappers outside this one may interrupt.
    """

    def __init__(
        self,
        *,
        runtime: SandboxRuntime | None = None,
        messages_key: str = "messages",
        run_once: bool = True,
        ordered_tools: Collection[str] = (),
        every_call: bool = False,
    ) -> None:
        self.runtime = runtime
        self.messages_key = messages_key
        self.run_once = run_once
        self._orders = CallOrders(ordered_tools, messages_key=messages_key)
        self.every_call = every_call
        # id(tool) -> (tool, its bound copy); holding the tool keeps its id from being reused.
        self._bound: dict[int, tuple[BaseTool, BaseTool]] = {}

    def _bind(self, request: ToolCallRequest) -> ToolCallRequest:
        tool = request.tool
        if tool is None or self.runtime is None or not is_sandbox_tool(tool):
            return request
        entry = self._bound.get(id(tool))
        if entry is None:
            entry = self._bound.setdefault(id(tool), (tool, bind_runtime(tool, self.runtime)))
        bound = entry[1]
        return request if bound is tool else request.override(tool=bound)

    def _as_task(self, request: ToolCallRequest) -> bool:
        return (
            self.run_once
            and is_sandbox_tool(request.tool)
            and _in_graph()
            and (self.every_call or _may_be_rerun(request, self.messages_key))
        )

    def wrap(self, request: ToolCallRequest, handler: SyncHandler) -> ToolResult:
        """Sync wrapper: run the call (once) from the record it continues from
        (`step_record`) and return the channel update."""
        request = self._bind(request)

        def execute() -> ToolResult:
            if is_sandbox_tool(request.tool):
                return handler(continue_from_step(request))
            return handler(request)

        if not self._as_task(request):
            return to_graph_update(execute(), messages_key=self.messages_key)
        with self._orders.turn(request):
            future = _sync_task(execute)
        return to_graph_update(future.result(), messages_key=self.messages_key)

    async def awrap(self, request: ToolCallRequest, handler: AsyncHandler) -> ToolResult:
        """Async wrapper. ``ToolNode`` starts the calls of a message in order and the task is
        started before the first ``await``, so the order is already fixed here."""
        request = self._bind(request)

        async def execute() -> ToolResult:
            if is_sandbox_tool(request.tool):
                return await handler(await acontinue_from_step(request))
            return await handler(request)

        if not self._as_task(request):
            return to_graph_update(await execute(), messages_key=self.messages_key)
        result = await _async_task(execute)
        return to_graph_update(result, messages_key=self.messages_key)


__all__ = [
    "CallOrders",
    "SandboxToolCallWrapper",
    "bind_runtime",
    "is_sandbox_tool",
    "to_graph_update",
]
