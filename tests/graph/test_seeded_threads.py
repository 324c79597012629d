"""An application seeds a thread (``runtime.write_files``) before its first turn; the agent's
first turn on that thread, with a checkpointer, finds the seeded files. A conversation carried
over to a thread with no record of its sandbox says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from langchain_sandbox import SandboxRuntime
from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.testing import ScriptedToolModel, call

pytest.importorskip("langchain")


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as made:
        yield made


def _read_csv_agent(runtime: SandboxRuntime, saver: SqliteSaver) -> Any:
    from langchain.agents import create_agent

    model = ScriptedToolModel(
        script=[call("sandbox_exec", code="print(open('data/in.csv').read())"), "done"]
    )
    return create_agent(model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=saver)


def _tool_texts(result: dict[str, Any]) -> list[str]:
    return [m.text for m in result["messages"] if isinstance(m, ToolMessage)]


def _seeded_first_turn(runtime: SandboxRuntime, saver: SqliteSaver, thread: str) -> Any:
    """Seed ``data/in.csv`` on ``thread``, then run the thread's first turn, which reads it."""
    runtime.write_files(thread, {"data/in.csv": b"a,b\n1,2\n"})
    agent = _read_csv_agent(runtime, saver)
    return agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": thread}})


def test_the_first_turn_of_a_seeded_thread_finds_the_seeded_files(
    tmp_path: Path, saver: SqliteSaver
) -> None:
    with SandboxRuntime("local", provider_options={"base_dir": tmp_path / "s"}) as runtime:
        result = _seeded_first_turn(runtime, saver, "t")
    [shown] = _tool_texts(result)
    assert "a,b\n1,2" in shown, shown


def test_a_conversation_carried_to_a_thread_without_its_record_gets_a_notice(
    tmp_path: Path, saver: SqliteSaver
) -> None:
    with SandboxRuntime("local", provider_options={"base_dir": tmp_path / "s"}) as runtime:
        first = _seeded_first_turn(runtime, saver, "old")
        from langchain.agents import create_agent

        model = ScriptedToolModel(
            script=lambda m: (
                "done" if isinstance(m[-1], ToolMessage) else call("sandbox_exec", code="print(1)")
            )
        )
        agent = create_agent(
            model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=saver
        )
        carried = agent.invoke(
            {"messages": [*first["messages"], HumanMessage("again")]},
            {"configurable": {"thread_id": "new"}},
        )
    shown = _tool_texts(carried)[-1]
    assert "has no record of the sandbox they left" in shown, shown
    assert "sandbox_exec call_0_0" in shown
