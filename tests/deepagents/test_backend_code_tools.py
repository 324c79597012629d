"""Tools called from code in a Deep Agents agent: ``SandboxBackend(code_tools=[...])`` and
``create_deep_agent(tools=backend.exec_tools(), backend=backend)``. The code's calls run on the
host with the run's config (child runs of ``sandbox_exec``), and are journaled: the same tool call
replayed finds the recorded result. Real local sandboxes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from deepagents import create_deep_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots.tool_journal import ToolJournal, arguments_digest
from langchain_sandbox.testing import ScriptedToolModel, call

CODE = "[tools.fetch(record_id=i) for i in range(3)]"


async def test_code_in_a_deep_agent_calls_host_tools_as_child_runs(tmp_path: Path) -> None:
    fetched: list[int] = []

    @tool
    def fetch(record_id: int) -> dict[str, int]:
        """Fetch one record by its id."""
        fetched.append(record_id)
        return {"id": record_id, "square": record_id * record_id}

    async with SandboxRuntime(
        "local",
        provider_options={"base_dir": tmp_path / "local"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
    ) as runtime:
        backend = SandboxBackend(runtime=runtime, code_tools=[fetch])
        (exec_tool,) = backend.exec_tools()
        assert exec_tool.name == "sandbox_exec"
        assert "fetch(record_id: integer)" in exec_tool.description
        agent = create_deep_agent(
            ScriptedToolModel(script=[call("sandbox_exec", code=CODE), "done"]),
            tools=backend.exec_tools(),
            backend=backend,
            checkpointer=InMemorySaver(),
        )
        config: Any = {"configurable": {"thread_id": "deep-code-tools"}}
        outer: list[str] = []
        parents: list[list[str]] = []
        async for event in agent.astream_events(
            {"messages": [HumanMessage("go")]}, config, version="v2"
        ):
            if event["event"] == "on_tool_start" and event["name"] == "sandbox_exec":
                outer.append(event["run_id"])
            if event["event"] == "on_tool_start" and event["name"] == "fetch":
                parents.append(list(event["parent_ids"]))
        state = await agent.aget_state(config)
        (reply,) = [m for m in state.values["messages"] if isinstance(m, ToolMessage)]
        assert "{'id': 2, 'square': 4}" in reply.text, reply.text
        assert fetched == [0, 1, 2]
        (exec_run,) = outer
        assert len(parents) == 3
        assert all(exec_run in chain for chain in parents)
        # Journaled under the outer call, as the exec tool's own calls are.
        journal = ToolJournal(runtime.snapshotter.store, "deep-code-tools", reply.tool_call_id)
        digest = arguments_digest("fetch", {"record_id": 1})
        entry = await journal.find(1, digest)  # the second call
        assert entry is not None
        assert entry.value == {"id": 1, "square": 1}
