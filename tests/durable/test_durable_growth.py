"""Persistence is incremental at the graph level: in a 100 MB workspace, a step that changes one
file grows the snapshot store by about that file (plus a manifest), not by the workspace."""

from __future__ import annotations

from pathlib import Path

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call

MB = 1024 * 1024
CHANGED = 4096  # bytes the per-step file gets


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_one_file_changed_per_step_stores_about_one_file(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    runtime = SandboxRuntime(
        "local", snapshotter=Snapshotter(LocalDirectoryBlobStore(blobs, durable=False))
    )
    steps = 4
    script = [
        call(
            "sandbox_shell",
            command="mkdir -p big && for i in $(seq 0 9); do head -c 10M /dev/urandom > big/part$i; done",
        ),
        *[
            call(
                "sandbox_exec",
                code=f"import os\nopen('step.bin', 'wb').write(os.urandom({CHANGED}))\n{i}",
            )
            for i in range(steps)
        ],
        "done",
    ]
    agent = create_agent(
        ScriptedToolModel(script=script),
        middleware=[SandboxMiddleware(runtime=runtime)],
        checkpointer=InMemorySaver(),
    )
    sizes: list[int] = []
    try:
        config = {"configurable": {"thread_id": "growth"}}
        stream = agent.stream({"messages": [HumanMessage("go")]}, config, stream_mode="updates")
        for update in stream:
            if "tools" in update:
                sizes.append(store_bytes(blobs))
        state = agent.get_state(config).values
    finally:
        runtime.close()

    assert state["sandbox"]["revision"] == 1 + steps
    first, *rest = sizes
    assert first >= 100 * MB  # the workspace itself, stored once
    growth = [b - a for a, b in zip(sizes, rest, strict=False)]
    assert len(growth) == steps
    for grew in growth:
        # the changed file, a manifest and the variables blob; never the 100 MB again
        assert CHANGED <= grew < CHANGED + 64 * 1024, growth
