"""The process tools in a Deep Agents agent (``create_deep_agent(tools=backend.process_tools())``):
a background process started through them is filed in the backend's records like any changing
call, so the backend's own next call keeps it running, and another runtime continuing the thread
(as a new process would) starts it again and says so. Real local sandboxes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from deepagents import create_deep_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call

_FIRST = [
    call("sandbox_shell", command="sleep 300", background=True, name="svc"),
    call("execute", command="echo hi"),
    call("sandbox_process", action="list"),
]


def _script(messages: list[Any]) -> Any:
    if messages[-1].text == "again" and isinstance(messages[-1], HumanMessage):
        return call("sandbox_process", action="list")
    done = sum(isinstance(m, ToolMessage) for m in messages)
    return _FIRST[done] if done < len(_FIRST) else "done"


def test_a_background_process_is_filed_and_started_again_by_a_new_runtime(
    tmp_path: Path,
) -> None:
    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "deep-services"}}

    def turn(base: str, message: str) -> list[str]:
        with SandboxRuntime(
            "local",
            provider_options={"base_dir": tmp_path / base},
            snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
        ) as runtime:
            backend = SandboxBackend(runtime=runtime)
            agent = create_deep_agent(
                ScriptedToolModel(script=_script),
                tools=backend.process_tools(),
                backend=backend,
                checkpointer=saver,
            )
            result = agent.invoke({"messages": [HumanMessage(message)]}, config)
        return [m.text for m in result["messages"] if isinstance(m, ToolMessage)]

    first = turn("first", "go")
    assert first[0].startswith("Started in the background: svc (running)"), first[0]
    assert "hi" in first[1]
    assert "svc (running)" in first[2], first[2]
    assert "not part of this checkpoint" not in first[2]

    again = turn("second", "again")[-1]
    assert "Services of this checkpoint were started again: 'svc'" in again, again
    assert "svc (running)" in again
