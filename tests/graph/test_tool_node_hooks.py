"""What SandboxToolNode relies on in LangGraph's ToolNode: its public hooks, nothing private.

If a langgraph release changes one of these, this file fails first and says which."""

from __future__ import annotations

import dataclasses
import inspect

from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime

from langchain_sandbox.graph import SandboxToolNode


def test_tool_node_takes_the_wrappers_we_pass() -> None:
    parameters = inspect.signature(ToolNode.__init__).parameters
    for name in ("wrap_tool_call", "awrap_tool_call", "messages_key", "handle_tool_errors"):
        assert name in parameters, name


def test_tool_call_request_has_the_fields_and_override_we_use() -> None:
    fields = {f.name for f in dataclasses.fields(ToolCallRequest)}
    assert {"tool_call", "tool", "state", "runtime"} <= fields
    request = ToolCallRequest(
        tool_call={"name": "t", "args": {}, "id": "1", "type": "tool_call"},
        tool=None,
        state={"messages": []},
        runtime=None,  # type: ignore[arg-type]
    )
    replaced = request.override(tool_call={"name": "u", "args": {}, "id": "1"})
    assert replaced.tool_call["name"] == "u"
    assert request.tool_call["name"] == "t", "override returns a new request"


def test_tool_runtime_carries_the_config_and_tools_we_read() -> None:
    fields = {f.name for f in dataclasses.fields(ToolRuntime)}
    assert {"config", "tools", "state"} <= fields


def test_sandbox_tool_node_overrides_nothing_private() -> None:
    private = {
        name
        for name, value in vars(SandboxToolNode).items()
        if name.startswith("_") and not name.startswith("__") and callable(value)
    }
    assert private == set(), f"SandboxToolNode overrides ToolNode internals: {private}"
    assert "_parse_input" not in inspect.getsource(SandboxToolNode)
