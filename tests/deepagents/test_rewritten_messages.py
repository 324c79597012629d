"""A middleware that rewrites the whole message list (Deep Agents' ``PatchToolCallsMiddleware``
at a dangling tool call, LangChain's ``SummarizationMiddleware``, one of our own) must not make a
Deep Agent lose its sandbox: the step that ran an earlier turn's calls is found by the calls the
step sent, not by where their tool messages were last written.

Each test runs a real Deep Agent on the local provider with a SQLite checkpointer, and continues
the thread with a runtime whose store is its own object (as a new process: nothing remembered).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call

pytest.importorskip("deepagents")

FILES = [f"/home/user/part{i}.txt" for i in range(4)]
SHOW = "cat " + " ".join(FILES)


def script(messages: list[Any]) -> Any:
    """Turn 0: four parallel ``execute`` calls, each writing a file; turn 1: a call whose tools
    the tests never let run (the dangling call); after a human ``show``: print the files."""
    last_human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
    if last_human.text == "show":
        return "shown" if isinstance(messages[-1], ToolMessage) else call("execute", command=SHOW)
    turn = sum(isinstance(m, AIMessage) for m in messages)
    if turn == 0:
        return [call("execute", command=f"echo {i} > {f}") for i, f in enumerate(FILES)]
    return call("execute", command="echo never")


class RewriteEveryMessage(AgentMiddleware[AgentState[Any], Any]):
    """Rewrites the whole conversation before each model call, as a redacting or compacting
    middleware might: every message again, same ids, after removing them all."""

    def before_model(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *state["messages"]]}


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as made:
        yield made


def _agent(tmp_path: Path, base: str, saver: SqliteSaver, middleware: list[Any]) -> Any:
    from deepagents import create_deep_agent

    runtime = SandboxRuntime(
        "local",
        provider_options={"base_dir": tmp_path / base},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
    )
    agent = create_deep_agent(
        ScriptedToolModel(script=script),
        backend=SandboxBackend(runtime=runtime),
        checkpointer=saver,
        middleware=middleware,
    )
    return agent, runtime


def _dangling(agent: Any, config: Any) -> Any:
    """Run turn 0's four calls, then stop where turn 1's call has no answer; its checkpoint."""
    agent.invoke({"messages": [HumanMessage("go")]}, config, interrupt_before=["tools"])
    agent.invoke(None, config, interrupt_before=["tools"])
    state = agent.get_state(config)
    assert state.next == ("tools",)
    assert len([m for m in state.values["messages"] if isinstance(m, ToolMessage)]) == 4
    return state.config


def _shown(result: dict[str, Any]) -> str:
    return [m.text for m in result["messages"] if isinstance(m, ToolMessage)][-1]


@pytest.mark.parametrize("own_rewrite", [False, True])
def test_a_new_message_at_a_dangling_call_continues_from_the_parallel_calls(
    tmp_path: Path, saver: SqliteSaver, own_rewrite: bool
) -> None:
    """Deep Agents patches the dangling call (rewriting the list) when a human message comes
    instead of a resume; the new turn still sees the four files, in a new process."""
    middleware = [RewriteEveryMessage()] if own_rewrite else []
    config: Any = {"configurable": {"thread_id": "dangling"}}
    agent, runtime = _agent(tmp_path, "first", saver, middleware)
    with runtime:
        at = _dangling(agent, config)
    agent, runtime = _agent(tmp_path, "second", saver, middleware)
    with runtime:
        result = agent.invoke({"messages": [HumanMessage("show")]}, at)
    assert any("did not complete" in m.text for m in result["messages"] if m.type == "tool")
    assert "\n0\n1\n2\n3\n" in _shown(result)


def test_a_summarizing_middleware_keeps_the_sandbox(tmp_path: Path, saver: SqliteSaver) -> None:
    """LangChain's ``SummarizationMiddleware`` replaces the conversation with a summary and the
    kept messages; the next turn, in a new process, still sees the four files."""
    from langchain.agents.middleware import SummarizationMiddleware

    summarizer = ScriptedToolModel(script=lambda messages: "summary: four files written")
    middleware = [
        SummarizationMiddleware(summarizer, trigger=("messages", 8), keep=("messages", 7))
    ]
    config: Any = {"configurable": {"thread_id": "summarized"}}
    agent, runtime = _agent(tmp_path, "first", saver, middleware)
    with runtime:
        _dangling(agent, config)
    agent, runtime = _agent(tmp_path, "second", saver, middleware)
    with runtime:
        result = agent.invoke({"messages": [HumanMessage("show")]}, config)
    assert "\n0\n1\n2\n3\n" in _shown(result)


def test_calls_that_ran_without_a_record_found_get_a_notice(
    tmp_path: Path, saver: SqliteSaver, caplog: pytest.LogCaptureFixture
) -> None:
    """The conversation shows four ``execute`` calls that changed the sandbox, but their
    records are gone from the store: the next call, in a new process, says which calls' work is
    missing (to the model, and as a warning) instead of silently running in an empty sandbox."""
    config: Any = {"configurable": {"thread_id": "lost"}}
    agent, runtime = _agent(tmp_path, "first", saver, [])
    with runtime:
        at = _dangling(agent, config)
    store = LocalDirectoryBlobStore(tmp_path / "blobs")

    async def _forget() -> None:
        await store.delete([info.key async for info in store.iter_blobs()])

    agent, runtime = _agent(tmp_path, "second", saver, [])
    with runtime, caplog.at_level("WARNING"):
        runtime.run_sync(_forget())
        result = agent.invoke({"messages": [HumanMessage("show")]}, at)
    shown = _shown(result)
    assert "No saved record of the sandbox was found" in shown
    assert "execute call_0_3" in shown
    assert "No saved record of the sandbox was found" in caplog.text
