"""Wiring that cannot keep the sandbox's record is refused, to the developer, at the first call.

A graph with a checkpointer promises that a resume finds the sandbox as the checkpoint left it;
a graph whose state has no ``sandbox`` channel would drop every record, so the promise would be
broken silently. (Subgraphs whose parent drops the record: ``tests/durable``, across processes.)
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_loop import agent_loop
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from langchain_sandbox.errors import ConfigurationError
from langchain_sandbox.graph import SandboxGraphState, SandboxMiddleware
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call
from langchain_sandbox.tools import SandboxExecTool


def _graph_without_the_channel(runtime: SandboxRuntime, checkpointer: Any) -> Any:
    model = ScriptedToolModel(script=[call("sandbox_exec", code="x = 1"), "done"])
    loop = agent_loop(model, [SandboxExecTool()], runtime=runtime, schema=MessagesState)
    return loop.compile(checkpointer=checkpointer)


def test_a_checkpointed_graph_without_the_channel_is_refused(
    runtime: SandboxRuntime, thread: str
) -> None:
    app = _graph_without_the_channel(runtime, InMemorySaver())
    with pytest.raises(ConfigurationError, match=r"sandbox: NotRequired\[SandboxChannel\]"):
        app.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": thread}})
    assert thread not in runtime.live_sessions(), "refused before any sandbox was made"


async def test_the_refusal_reaches_async_runs_too(runtime: SandboxRuntime, thread: str) -> None:
    app = _graph_without_the_channel(runtime, InMemorySaver())
    with pytest.raises(ConfigurationError, match="has no `sandbox` channel"):
        await app.ainvoke(
            {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": thread}}
        )


def test_without_a_checkpointer_nothing_is_promised_and_the_graph_runs(
    runtime: SandboxRuntime, thread: str
) -> None:
    app = _graph_without_the_channel(runtime, None)
    state = app.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": thread}})
    assert state["messages"][-1].text == "done"


def _agent_as_a_subgraph(runtime: SandboxRuntime, saver: InMemorySaver, *states: Any) -> Any:
    """The agent as a subgraph (its state lasts one invocation) of graphs of the ``states``,
    the root's first, which ``saver`` checkpoints."""
    node: Any = create_agent(
        ScriptedToolModel(script=[call("sandbox_exec", code="x = 1"), "done"]),
        middleware=[SandboxMiddleware(runtime=runtime, tools=[SandboxExecTool()])],
    )
    for depth, state in enumerate(reversed(states)):
        graph = StateGraph(state)
        graph.add_node("agent", node)
        graph.add_edge(START, "agent")
        node = graph.compile(checkpointer=saver if depth == len(states) - 1 else None)
    return node


# A late saver only where lateness can change the outcome: under durability="async" the next step
# runs before the last one's checkpoint is saved; under "sync" every save is done before the next
# step starts, so a late one would only add its sleeps.
@pytest.mark.parametrize(
    ("durability", "states", "memory_saver"),
    [
        ("async", [MessagesState], "prompt"),
        ("async", [MessagesState], "late"),
        ("sync", [MessagesState], "prompt"),
        # The middle graph lasts one invocation too.
        ("sync", [MessagesState, SandboxGraphState], "prompt"),
        ("async", [MessagesState, SandboxGraphState], "prompt"),
        ("async", [MessagesState, SandboxGraphState], "late"),
    ],
    indirect=["memory_saver"],
)
def test_an_agent_subgraph_whose_parent_drops_the_record_is_refused_before_the_model(
    runtime: SandboxRuntime,
    thread: str,
    durability: Any,
    states: list[Any],
    memory_saver: InMemorySaver,
) -> None:
    """``create_agent`` + SandboxMiddleware as a node of a parent without ``sandbox`` (or of one
    with it that is itself a subgraph of a root without it): the record would end with the
    invocation. ``before_agent`` refuses, before any sandbox exists."""
    app = _agent_as_a_subgraph(runtime, memory_saver, *states)
    with pytest.raises(ConfigurationError, match="parent graph's state"):
        app.invoke(
            {"messages": [HumanMessage("go")]},
            {"configurable": {"thread_id": thread}},
            durability=durability,
        )
    assert thread not in runtime.live_sessions()


@pytest.mark.parametrize("depth", [1, 2])
def test_an_agent_subgraph_whose_parent_keeps_the_record_runs(
    runtime: SandboxRuntime, thread: str, depth: int, memory_saver: InMemorySaver
) -> None:
    app = _agent_as_a_subgraph(runtime, memory_saver, *[SandboxGraphState] * depth)
    config = {"configurable": {"thread_id": thread}}
    state = app.invoke({"messages": [HumanMessage("go")]}, config)
    assert state["sandbox"]["revision"] == 1, "the record reached the parent's state"
