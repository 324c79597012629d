"""Requests of a warm ``sandbox_exec`` call on Runloop, counted on the emulator: two (execute,
wait) when nobody consumes the streamed output; the two output streams only when someone does
(``stream_mode="custom"``, a callback handler taking custom events)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph

from langchain_sandbox import SandboxExecTool, SandboxRuntime, SandboxToolNode
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

from .keys import FAKE_KEY

CODE = "print('hi')\n6 * 7"


@pytest.fixture
def emulator() -> Iterator[RunloopEmulator]:
    with RunloopEmulator(api_key=FAKE_KEY) as running:
        yield running


@pytest.fixture
def tool(emulator: RunloopEmulator) -> Iterator[SandboxExecTool]:
    runtime = SandboxRuntime(emulator.provider(retry_deadline=10.0), persist="never")
    try:
        yield SandboxExecTool(runtime=runtime)
    finally:
        runtime.close()


def _routes(emulator: RunloopEmulator) -> list[str]:
    return [r.path.rsplit("/", 1)[-1] for r in emulator.requests]


def _graph(tool: SandboxExecTool) -> Any:
    calls = AIMessage("", tool_calls=[{"name": "sandbox_exec", "args": {"code": CODE}, "id": "c1"}])
    graph = StateGraph(MessagesState)
    graph.add_node("tools", SandboxToolNode([tool]))
    graph.add_edge(START, "tools")
    return graph.compile(), {"messages": [calls]}


def test_a_warm_call_without_a_listener_is_two_requests(
    tool: SandboxExecTool, emulator: RunloopEmulator
) -> None:
    tool.invoke({"code": "x = 1"})
    emulator.clear_requests()
    assert "value:\n42" in tool.invoke({"code": CODE})
    assert _routes(emulator) == ["execute_async", "wait_for_status"]
    # In a graph streamed without "custom", nobody listens either.
    graph, state = _graph(tool)
    emulator.clear_requests()
    chunks = list(graph.stream(state, {"configurable": {"thread_id": "t"}}, stream_mode="values"))
    assert "42" in chunks[-1]["messages"][-1].text
    assert "execute_async" in _routes(emulator)
    assert not [r for r in _routes(emulator) if r.startswith("stream_")]


def test_streams_are_opened_when_someone_listens(
    tool: SandboxExecTool, emulator: RunloopEmulator
) -> None:
    graph, state = _graph(tool)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke(state, config)  # warm
    emulator.clear_requests()
    events = [
        c for c in graph.stream(state, config, stream_mode="custom") if c["stream"] == "stdout"
    ]
    assert "".join(e["text"] for e in events) == "hi\n"
    routes = _routes(emulator)
    assert "stream_stdout_updates" in routes
    assert "stream_stderr_updates" in routes

    class Collect(BaseCallbackHandler):
        def __init__(self) -> None:
            self.texts: list[str] = []

        def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
            self.texts.append(data["text"])

    collect = Collect()
    emulator.clear_requests()
    tool.invoke({"code": CODE}, {"callbacks": [collect]})
    assert "hi\n" in "".join(collect.texts)
    assert "stream_stdout_updates" in _routes(emulator)
    # A handler that takes no custom events (a tracer-like one) does not open them.

    class Quiet(BaseCallbackHandler):
        pass

    emulator.clear_requests()
    tool.invoke({"code": CODE}, {"callbacks": [Quiet()]})
    assert _routes(emulator) == ["execute_async", "wait_for_status"]
