"""Persist only where something can resume: which sandbox-changing tool calls are captured.

By default (``persist="resumable"``) a call outside any graph, or in a graph compiled without a
checkpointer, stores no snapshot: no checkpoint could ever restore it. In a graph with a
checkpointer every changing call is captured, as before. An explicit policy overrides the rule
both ways. The tests look at what reached the snapshot store and what the records name, on the
real local provider.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from langchain_sandbox.graph import SandboxGraphState, SandboxMiddleware, SandboxToolNode
from langchain_sandbox.runtime import PersistPolicy, SandboxRuntime
from langchain_sandbox.snapshots import Snapshotter
from langchain_sandbox.state import SandboxState
from langchain_sandbox.testing import ScriptedToolModel
from langchain_sandbox.tools import SandboxExecTool, SandboxWriteFileTool

from .conftest import make_local_runtime

Where = Literal[
    "outside a graph",
    "graph without checkpointer",
    "graph with checkpointer",
    "subgraph of a graph with checkpointer",
    "agent without checkpointer",
    "agent with checkpointer",
]


def _stored(runtime: SandboxRuntime) -> list[str]:
    """The keys of every blob in the runtime's snapshot store."""
    store = runtime.snapshotter
    assert isinstance(store, Snapshotter)

    async def _keys() -> list[str]:
        return [info.key async for info in store.store.iter_blobs()]

    return runtime.run_sync(_keys())


def _changing_calls(thread: str) -> list[dict[str, Any]]:
    return [
        {"name": "sandbox_exec", "args": {"code": "kept = 41 + 1"}, "id": f"{thread}-exec"},
        {
            "name": "sandbox_write_file",
            "args": {"path": "notes.txt", "content": "hello"},
            "id": f"{thread}-write",
        },
    ]


def _run(runtime: SandboxRuntime, where: Where) -> SandboxState:
    """Two sandbox-changing calls (code, a file write) made ``where``; the thread's last record."""
    tools = [SandboxExecTool(runtime=runtime), SandboxWriteFileTool(runtime=runtime)]
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}}
    calls = _changing_calls(thread)
    if where == "outside a graph":
        by_name = {tool.name: tool for tool in tools}
        record: SandboxState = {}
        for call in calls:
            message = by_name[call["name"]].invoke({**call, "type": "tool_call"}, config)
            assert isinstance(message, ToolMessage)
            assert message.status == "success", message
            record = message.artifact["sandbox"]
        return record
    checkpointer = InMemorySaver() if where.endswith("with checkpointer") else None
    subgraph = where.startswith("subgraph")
    if where.startswith("agent"):
        # create_agent with the middleware: its own ToolNode, each call a step of its own.
        model = ScriptedToolModel(script=[AIMessage("", tool_calls=calls), "Done."])
        graph: Any = create_agent(
            model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=checkpointer
        )
        state = graph.invoke({"messages": [HumanMessage("go")]}, config)
    else:
        builder = StateGraph(SandboxGraphState)
        builder.add_node("tools", SandboxToolNode(tools))
        builder.add_edge(START, "tools")
        graph = builder.compile(checkpointer=None if subgraph else checkpointer)
        if subgraph:
            # Compiled without a saver of its own: it runs under its parent's.
            parent = StateGraph(SandboxGraphState)
            parent.add_node("inner", graph)
            parent.add_edge(START, "inner")
            graph = parent.compile(checkpointer=checkpointer)
        state = graph.invoke({"messages": [AIMessage("", tool_calls=calls)]}, config)
    replies = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(replies) == 2, state["messages"]
    assert all(m.status == "success" for m in replies), replies
    if checkpointer is not None:
        # What a resume would read: the record the checkpointer stored with the step.
        return graph.get_state(config).values["sandbox"]
    return state["sandbox"]


@pytest.mark.parametrize(
    ("policy", "where", "captured"),
    [
        (None, "outside a graph", False),
        (None, "graph without checkpointer", False),
        (None, "graph with checkpointer", True),
        (None, "subgraph of a graph with checkpointer", True),
        (None, "agent without checkpointer", False),
        (None, "agent with checkpointer", True),
        ("every_call", "outside a graph", True),
        ("never", "graph with checkpointer", False),
    ],
)
def test_a_changing_call_is_captured_only_where_something_can_resume(
    tmp_path: Path, policy: PersistPolicy | None, where: Where, captured: bool
) -> None:
    options = {} if policy is None else {"persist": policy}
    with make_local_runtime(tmp_path, **options) as runtime:
        if policy is None:
            assert runtime.persist == "resumable"
        record = _run(runtime, where)
        assert record["revision"] == 2, record
        if not captured:
            assert record.get("snapshot") is None, record
            assert _stored(runtime) == [], "a snapshot nobody can resume from was stored"
            return
        assert record["snapshot"], record
        assert record["snapshot_revision"] == 2, record
        assert _stored(runtime), "the record names a snapshot the store does not hold"
        # The snapshot is usable: another runtime on the same store (a new process resuming
        # the checkpoint) gets the variable and the file back from it.
        with make_local_runtime(tmp_path, persist="never") as resumed:
            outcome = resumed.run_code(
                "resumed", "print(kept, open('notes.txt').read())", record=record
            )
    assert outcome.value.stdout == "42 hello\n", outcome.value
    assert any("restored" in notice for notice in outcome.notices), outcome.notices
