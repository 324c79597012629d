"""What the backend adds to the standard suite: per-thread sandboxes, output capped at the source,
errors as results (paths outside the workspace: ``test_outside_workspace``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.runtime import SandboxRuntime


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[SandboxRuntime]:
    spec = SessionSpec(limits=Limits(timeout=30, max_output_bytes=64 * 1024))
    made = SandboxRuntime("local", spec=spec, provider_options={"base_dir": tmp_path})
    try:
        yield made
    finally:
        made.close()


def test_each_thread_of_a_graph_gets_its_own_sandbox(runtime: SandboxRuntime) -> None:
    backend = SandboxBackend(runtime=runtime)

    class State(TypedDict):
        text: str
        seen: str

    def node(state: State) -> dict[str, Any]:
        backend.write("/home/user/note.txt", state["text"])
        return {"seen": backend.execute("cat /home/user/note.txt").output}

    graph = StateGraph(State).add_node("n", node).add_edge(START, "n").add_edge("n", END).compile()
    first = graph.invoke({"text": "one", "seen": ""}, {"configurable": {"thread_id": "a"}})
    second = graph.invoke({"text": "two", "seen": ""}, {"configurable": {"thread_id": "b"}})
    assert (first["seen"], second["seen"]) == ("one", "two")
    live = runtime.live_sessions()
    assert set(live) == {"a", "b"}
    assert live["a"] != live["b"]


def test_output_is_capped_in_the_sandbox_and_reported_truncated(runtime: SandboxRuntime) -> None:
    backend = SandboxBackend(runtime=runtime)
    result = backend.execute("yes 0123456789 | head -c 5000000; echo done >&2")
    assert result.exit_code == 0
    assert result.truncated is True
    assert len(result.output) < 200_000
    assert result.output.rstrip().endswith("done")


def test_stderr_comes_back_in_order_with_stdout(runtime: SandboxRuntime) -> None:
    result = SandboxBackend(runtime=runtime).execute("echo a; echo b >&2; echo c; exit 3")
    assert result.output.split() == ["a", "b", "c"]
    assert (result.exit_code, result.truncated) == (3, False)


def test_a_command_past_its_timeout_reports_124_and_the_sandbox_stays_usable(
    runtime: SandboxRuntime,
) -> None:
    backend = SandboxBackend(runtime=runtime)
    stopped = backend.execute("sleep 30", timeout=1)
    assert stopped.exit_code == 124
    assert "time limit" in stopped.output
    assert backend.execute("echo alive").output.strip() == "alive"


def test_bad_items_get_their_own_error_and_keep_their_place(runtime: SandboxRuntime) -> None:
    backend = SandboxBackend(runtime=runtime)
    backend.execute("mkdir -p /home/user/adir")
    uploads = backend.upload_files(
        [
            ("/home/user/ok.bin", b"\x00\x01"),
            ("/etc/passwd", b"no"),  # the sandbox's own /etc, read-only to its user
            ("relative.txt", b"no"),
            ("/home/user/../../etc/x", b"no"),  # is /etc/x, in the sandbox
            ("/home/user/adir", b"a directory is there"),
            ("/tmp", b"a directory is there too"),
            ("/home/user/" + "d/" * 300 + "deep.txt", b"deeper than a workspace path may be"),
            ("/home/user/ok2.bin", b"\xff"),
        ]
    )
    assert [r.error for r in uploads] == [
        None,
        "permission_denied",
        "invalid_path",
        "permission_denied",
        "is_directory",
        "is_directory",
        "invalid_path",
        None,
    ]
    assert backend.execute("test -e /home/user/d; echo $?").output.strip() == "1"
    downloads = backend.download_files(
        ["/home/user/ok2.bin", "/home/user/missing", "/home/user/ok.bin"]
    )
    assert [(d.content, d.error) for d in downloads] == [
        (b"\xff", None),
        (None, "file_not_found"),
        (b"\x00\x01", None),
    ]


def test_a_large_binary_is_refused_from_its_size_without_being_read(
    runtime: SandboxRuntime,
) -> None:
    backend = SandboxBackend(runtime=runtime)
    backend.execute("head -c 3000000 /dev/zero > /home/user/big.png")
    result = backend.read("/home/user/big.png")
    assert result.file_data is None
    assert result.error is not None
    assert "maximum preview size" in result.error


async def test_async_twins_use_the_same_sandbox(runtime: SandboxRuntime) -> None:
    backend = SandboxBackend(runtime=runtime)
    assert (await backend.awrite("/home/user/a.txt", "alpha\nbeta\n")).error is None
    edited = await backend.aedit("/home/user/a.txt", "beta", "gamma")
    assert edited.occurrences == 1
    page = await backend.aread("/home/user/a.txt", offset=1, limit=1)
    assert page.file_data is not None
    assert page.file_data["content"] == "gamma"
    assert backend.execute("cat /home/user/a.txt").output == "alpha\ngamma\n"


def test_cd_and_export_carry_over_to_the_next_command(runtime: SandboxRuntime) -> None:
    backend = SandboxBackend(runtime=runtime)
    backend.execute("mkdir -p /home/user/project && cd /home/user/project && export STAGE=two")
    assert backend.execute('pwd; echo "$STAGE"').output.split() == ["/home/user/project", "two"]


def test_backends_outside_a_graph_do_not_share_a_sandbox(runtime: SandboxRuntime) -> None:
    first, second = SandboxBackend(runtime=runtime), SandboxBackend(runtime=runtime)
    first.write("/home/user/mine.txt", "first's")
    assert second.read("/home/user/mine.txt").error is not None
    assert first.read("/home/user/mine.txt").error is None


def test_without_the_persistent_shell_each_command_starts_fresh(runtime: SandboxRuntime) -> None:
    backend = SandboxBackend(runtime=runtime, persistent_shell=False)
    backend.execute("mkdir -p /home/user/project && cd /home/user/project && export STAGE=two")
    assert backend.execute('pwd; echo "[$STAGE]"').output.split() == ["/home/user", "[]"]


@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_deep_agent_stores_snapshots_and_records_only_with_a_checkpointer(
    tmp_path: Path, checkpointed: bool
) -> None:
    """Under the default policy a Deep Agent without a checkpointer (nothing can resume it)
    leaves nothing in the snapshot store; with one, each changing call stores its snapshot and
    files its record."""
    from deepagents import create_deep_agent
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
    from langchain_sandbox.testing import ScriptedToolModel, call

    store = LocalDirectoryBlobStore(tmp_path / "blobs")
    with SandboxRuntime(
        "local", provider_options={"base_dir": tmp_path / "s"}, snapshotter=Snapshotter(store)
    ) as runtime:
        script = [
            call("execute", command="echo kept > /home/user/notes.txt"),
            call("write_file", file_path="/home/user/data.csv", content="a,b\n"),
            "done",
        ]
        agent = create_deep_agent(
            ScriptedToolModel(script=script),
            backend=SandboxBackend(runtime=runtime),
            checkpointer=InMemorySaver() if checkpointed else None,
        )
        config: Any = {"configurable": {"thread_id": "deep"}}
        result = agent.invoke({"messages": [HumanMessage("go")]}, config)
        assert result["messages"][-1].text == "done"
        assert runtime.read_files("deep", ["notes.txt"]).value == {"notes.txt": b"kept\n"}

        async def _stored() -> list[str]:
            return [info.key async for info in store.iter_blobs()]

        stored = runtime.run_sync(_stored())
    if checkpointed:
        assert stored, "a checkpointed agent's changes were not captured"
    else:
        assert stored == [], "nothing can resume this agent, yet snapshots were stored"


def test_a_call_that_changes_nothing_is_not_filed_and_a_new_process_still_resumes(
    tmp_path: Path,
) -> None:
    """``echo hi`` leaves the sandbox as its snapshot was: its record is remembered, not filed.
    A runtime with a store of its own (as in a new process) walks back to the record before it
    and restores the same files and shell state; calls that changed something were filed."""
    from deepagents import create_deep_agent
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox.checkpointing.filed_records import conversation_turns, record_key
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
    from langchain_sandbox.testing import ScriptedToolModel, call

    steps = [
        call("execute", command="echo kept > /home/user/notes.txt"),
        call("execute", command="export STAGE=two"),  # changes the shell's saved state
        call("execute", command="echo hi"),
        call("execute", command="echo hi"),
        "done",
    ]

    def script(messages: list[Any]) -> Any:
        if isinstance(messages[-1], HumanMessage) and messages[-1].text == "again":
            return call("execute", command='echo "$STAGE"; cat /home/user/notes.txt')
        if isinstance(messages[-1], ToolMessage) and len(steps) == 0:
            return "done"
        return steps.pop(0)

    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "quiet"}}

    def agent_on(base: str) -> tuple[Any, SandboxRuntime, LocalDirectoryBlobStore]:
        store = LocalDirectoryBlobStore(tmp_path / "blobs")
        runtime = SandboxRuntime(
            "local",
            provider_options={"base_dir": tmp_path / base},
            snapshotter=Snapshotter(store),
        )
        model = ScriptedToolModel(script=script)
        agent = create_deep_agent(
            model, backend=SandboxBackend(runtime=runtime), checkpointer=saver
        )
        return agent, runtime, store

    agent, runtime, store = agent_on("first")
    with runtime:
        result = agent.invoke({"messages": [HumanMessage("go")]}, config)
        assert result["messages"][-1].text == "done"
        turns = conversation_turns(result["messages"])
        ran_in = {  # the checkpoint whose step ran each call (its tool message is written there)
            m.tool_call_id: t.config["configurable"]["checkpoint_id"]
            for t in saver.list(config)
            for _, _, value in t.pending_writes or ()
            for m in (value if isinstance(value, list) else [value])
            if isinstance(m, ToolMessage)
        }
        calls = [(turn, str(m.tool_calls[0]["id"])) for turn, m in turns]
        keys = [record_key("quiet", turn, c, ran_in[c]) for turn, c in calls]
        missing = runtime.run_sync(store.missing(set(keys)))
    assert [key in missing for key in keys] == [False, False, True, True]

    agent, runtime, _ = agent_on("second")
    with runtime:
        result = agent.invoke({"messages": [HumanMessage("again")]}, config)
    shown = [m.text for m in result["messages"] if isinstance(m, ToolMessage)][-1]
    assert "two\nkept\n" in shown
    assert "restored from the snapshot" in shown
    assert isinstance(result["messages"][-1], AIMessage)


async def test_records_filed_without_their_step_are_still_read(tmp_path: Path) -> None:
    """A thread filed before records were keyed by their step (an earlier version filed the
    same record under ``(thread, human, AI message, tool call)``) resumes with its files: the
    store's records are moved to those keys, then a runtime with a store of its own (as a new
    process) continues the thread, through ``ainvoke`` (the checkpointer read async)."""
    from deepagents import create_deep_agent
    from langchain_core.messages import HumanMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox.checkpointing.filed_records import conversation_turns, record_key
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
    from langchain_sandbox.testing import ScriptedToolModel, call

    def script(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        if messages[-1].text == "again":
            return call("execute", command="cat /home/user/notes.txt")
        return call("execute", command="echo kept > /home/user/notes.txt")

    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "old"}}

    async def turn(base: str, message: str) -> list[Any]:
        store = LocalDirectoryBlobStore(tmp_path / "blobs")
        options = {"base_dir": tmp_path / base}
        async with SandboxRuntime(
            "local", provider_options=options, snapshotter=Snapshotter(store)
        ) as runtime:
            backend = SandboxBackend(runtime=runtime)
            agent = create_deep_agent(
                ScriptedToolModel(script=script), backend=backend, checkpointer=saver
            )
            result = await agent.ainvoke({"messages": [HumanMessage(message)]}, config)
        messages: list[Any] = result["messages"]
        return messages

    messages = await turn("first", "go")
    [(first_turn, ai)] = conversation_turns(messages)
    call_id = str(ai.tool_calls[0]["id"])
    [step] = [
        t.config["configurable"]["checkpoint_id"]
        for t in saver.list(config)
        for _, _, value in t.pending_writes or ()
        if any(isinstance(m, ToolMessage) for m in (value if isinstance(value, list) else [value]))
    ]
    store = LocalDirectoryBlobStore(tmp_path / "blobs")
    new_key = record_key("old", first_turn, call_id, step)
    await store.put(record_key("old", first_turn, call_id), await store.get(new_key))
    await store.delete([new_key])

    shown = [m.text for m in await turn("second", "again") if isinstance(m, ToolMessage)][-1]
    assert "kept" in shown
    assert "restored from the snapshot" in shown
