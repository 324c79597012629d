"""What SandboxToolNode relies on in LangGraph: ToolNode's public hooks, and the few task-config
keys ``graph/step_record.py`` reads (three of them private).

If a langgraph release changes one of these, this file fails first and says which."""

from __future__ import annotations

import dataclasses
import inspect
import operator
from typing import Annotated, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime
from langgraph.types import Send

from langchain_sandbox.checkpointing.checkpointer_names import run_checkpointer
from langchain_sandbox.graph import SandboxToolNode, _pregel_keys


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


class _Log(TypedDict):
    log: Annotated[list[str], operator.add]


def test_a_task_config_carries_the_keys_step_record_reads() -> None:
    """``graph/step_record.py`` reads three private keys of a task's config (the channel reader,
    the checkpointer, the task id) and the public ``checkpoint_ns`` / ``checkpoint_map``; a
    failed step keeps the finished tasks' writes as pending writes of the step's checkpoint."""
    seen: dict[str, object] = {}

    def work(state: _Log) -> _Log:
        configurable = get_config()["configurable"]
        graph_ns = configurable["checkpoint_ns"].rpartition("|")[0]
        assert graph_ns in configurable["checkpoint_map"]
        assert configurable[_pregel_keys.TASK_ID_KEY]
        with pytest.raises(KeyError):
            configurable[_pregel_keys.READ_KEY]("sandbox", False)  # not a channel here
        checkpointer = run_checkpointer(get_config())
        assert checkpointer is not None
        saved = checkpointer.get_tuple(
            {
                "configurable": {
                    "thread_id": configurable["thread_id"],
                    "checkpoint_ns": graph_ns,
                    "checkpoint_id": configurable["checkpoint_map"][graph_ns],
                }
            }
        )
        me = state["log"][0]
        seen[me] = [w[2] for w in saved.pending_writes if w[1] == "log"] if saved else None
        if me == "b" and len(seen) == 2:
            raise RuntimeError("b fails the first time")
        return {"log": [me.upper()]}

    graph = StateGraph(_Log)
    graph.add_node("work", work)
    graph.add_conditional_edges(START, lambda _: [Send("work", {"log": [n]}) for n in "ab"])
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(RuntimeError):
        app.invoke({"log": []}, config, durability="sync")
    seen.clear()
    assert app.invoke(None, config, durability="sync")["log"] == ["A", "B"]
    assert seen == {"b": [["A"]]}, "only b re-ran, and it found a's saved write"
