"""The ``runtime`` a ``ToolNode`` injects into a sandbox tool reaches the tool, and nothing else:
not the callbacks' ``on_tool_start`` (its input string and inputs), which tracing renders, nor the
model's schema. A graph's state (every message of the conversation) was otherwise rendered into
the tool-input string of each call, a cost that grew with the conversation."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode

from langchain_sandbox.graph import SandboxGraphState, SandboxMiddleware, SandboxToolNode
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call
from langchain_sandbox.tools import SandboxExecTool
from langchain_sandbox.tools.base import SandboxCall

_SECRET_TEXT = "a message only the state holds: 7f3a-conversation-text"


class _ToolStarts(BaseCallbackHandler):
    """Records what every ``on_tool_start`` is given."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, Any]] = []

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.starts.append((input_str, inputs))


class _RecordingExecTool(SandboxExecTool):
    """``sandbox_exec`` that keeps the ``runtime`` argument each call received."""

    received: list[Any] = []

    def _prepare(self, config: RunnableConfig, tool_runtime: Any, *args: Any) -> SandboxCall:
        self.received.append(tool_runtime)
        return super()._prepare(config, tool_runtime, *args)


def _assert_hidden_and_filled(handler: _ToolStarts, tool: _RecordingExecTool) -> None:
    assert handler.starts, "the tool was not called"
    for input_str, inputs in handler.starts:
        assert _SECRET_TEXT not in input_str
        assert "runtime" not in (inputs or {})
        assert _SECRET_TEXT not in repr(inputs)
        assert "x = 41" in input_str, "the model's own arguments still reach callbacks"
    assert tool.received, "the tool was not called"
    for injected in tool.received:
        assert isinstance(injected, ToolRuntime), "ToolNode no longer fills runtime"
        assert _SECRET_TEXT in repr(injected.state["messages"])


def _tool_call_input() -> dict[str, Any]:
    tool_call = {
        "name": "sandbox_exec",
        "args": {"code": "x = 41"},
        "id": "c1",
        "type": "tool_call",
    }
    return {"messages": [HumanMessage(_SECRET_TEXT), AIMessage("", tool_calls=[tool_call])]}


def test_runtime_is_not_in_the_models_schema() -> None:
    tool = SandboxExecTool()
    assert "runtime" not in tool.tool_call_schema.model_fields
    assert "runtime" not in tool.tool_call_schema.model_json_schema()["properties"]
    assert "runtime" not in tool.args


@pytest.mark.parametrize("run", ["sync", "async"])
async def test_create_agent_with_the_middleware(
    runtime: SandboxRuntime, thread: str, run: str
) -> None:
    tool = _RecordingExecTool(received=[])
    handler = _ToolStarts()
    agent = create_agent(
        ScriptedToolModel(script=[call("sandbox_exec", code="x = 41"), "done"]),
        middleware=[SandboxMiddleware(runtime=runtime, tools=[tool])],
    )
    config: RunnableConfig = {"configurable": {"thread_id": thread}, "callbacks": [handler]}
    inputs = {"messages": [HumanMessage(_SECRET_TEXT)]}
    state = await agent.ainvoke(inputs, config) if run == "async" else agent.invoke(inputs, config)
    assert state["messages"][-1].text == "done"
    assert state["sandbox"]["revision"] == 1, "the tool's record reached the state"
    _assert_hidden_and_filled(handler, tool)
    assert runtime.run_code(thread, "x + 1").value.value == "42"


@pytest.mark.parametrize("node", [SandboxToolNode, ToolNode])
def test_tool_nodes(runtime: SandboxRuntime, thread: str, node: type[ToolNode]) -> None:
    tool = _RecordingExecTool(received=[], runtime=runtime)
    handler = _ToolStarts()
    builder = StateGraph(SandboxGraphState)
    builder.add_node("tools", node([tool]))
    builder.add_edge(START, "tools")
    config: RunnableConfig = {"configurable": {"thread_id": thread}, "callbacks": [handler]}
    state = builder.compile().invoke(_tool_call_input(), config)
    assert state["messages"][-1].status == "success", state["messages"][-1].text
    _assert_hidden_and_filled(handler, tool)
    assert runtime.run_code(thread, "x + 1").value.value == "42"
