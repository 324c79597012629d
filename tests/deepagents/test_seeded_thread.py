"""A thread seeded through the backend's ``upload_files`` before its first turn: the Deep Agent's
first turn on that thread, with a checkpointer, reads the seeded file (docs/persistence.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call

pytest.importorskip("deepagents")


def test_files_uploaded_before_the_first_turn_are_there(tmp_path: Path) -> None:
    from deepagents import create_deep_agent

    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    options = {"base_dir": tmp_path / "s"}
    with (
        SandboxRuntime("local", provider_options=options, snapshotter=snapshotter) as runtime,
        SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver,
    ):
        [uploaded] = SandboxBackend(runtime=runtime, thread_id="t").upload_files(
            [("/home/user/data/in.csv", b"a,b\n1,2\n")]
        )
        assert uploaded.error is None
        script = [call("execute", command="cat /home/user/data/in.csv"), "done"]
        agent = create_deep_agent(
            ScriptedToolModel(script=script),
            backend=SandboxBackend(runtime=runtime),
            checkpointer=saver,
        )
        config: Any = {"configurable": {"thread_id": "t"}}
        result = agent.invoke({"messages": [HumanMessage("read it")]}, config)
    shown = [m.text for m in result["messages"] if isinstance(m, ToolMessage)][-1]
    assert "a,b\n1,2" in shown, shown
