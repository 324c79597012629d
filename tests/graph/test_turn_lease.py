"""The per-thread turn lease of ``SandboxMiddleware`` within one process (a SQLite checkpointer
and a local blob store: an ``flock`` lease; tests/durable/test_thread_lock.py races separate
processes): a second run of a busy thread fails with ``ThreadBusyError``, other threads never
contend, a thread's own later turns and resumes never block on themselves, and an interrupt leaves
the thread free."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from langchain_sandbox import SandboxRuntime, ThreadBusyError
from langchain_sandbox.checkpointing.thread_lease import acquire, lease_backend, release
from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.snapshots import (
    LangGraphStoreBlobStore,
    LocalDirectoryBlobStore,
    Snapshotter,
)
from langchain_sandbox.testing import ScriptedToolModel, call

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware

HANG_GUARD = 120  # seconds; only so that a broken run fails instead of hanging


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as made:
        yield made


def _async_turn(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str, text: str, hold: bool = False
) -> dict[str, Any]:
    """An ``ainvoke`` turn on ``saver``'s database (through an ``AsyncSqliteSaver``), inside
    ``runtime.ahold_thread`` if ``hold``."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = saver.conn.execute("PRAGMA database_list").fetchall()[0][2]
    config: Any = {"configurable": {"thread_id": thread}}

    async def turn() -> dict[str, Any]:
        async with (
            AsyncSqliteSaver.from_conn_string(path) as async_saver,
            contextlib.AsyncExitStack() as stack,
        ):
            if hold:
                await stack.enter_async_context(
                    runtime.ahold_thread(thread, checkpointer=async_saver)
                )
            agent = _agent(runtime, async_saver)
            out: dict[str, Any] = await agent.ainvoke({"messages": [HumanMessage(text)]}, config)
            return out

    return asyncio.run(turn())


def _script(pause: Callable[[], None] = lambda: None) -> Callable[[list[BaseMessage]], Any]:
    def script(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        pause()
        return call("sandbox_exec", code=f"open('turns.txt', 'a').write({messages[-1].text!r})")

    return script


def _agent(runtime: SandboxRuntime, saver: Any, *extra: Any, **options: Any) -> Any:
    model = ScriptedToolModel(script=options.pop("script", _script()))
    middleware = [SandboxMiddleware(runtime=runtime, **options), *extra]
    return create_agent(model, middleware=middleware, checkpointer=saver)


def _turn(agent: Any, thread: str, text: str) -> dict[str, Any]:
    config: Any = {"configurable": {"thread_id": thread}}
    result: dict[str, Any] = agent.invoke({"messages": [HumanMessage(text)]}, config)
    return result


def _turns_file(runtime: SandboxRuntime, thread: str, result: dict[str, Any]) -> str:
    files = runtime.read_files(thread, ["turns.txt"], record=result["sandbox"]).value
    return files["turns.txt"].decode()


class _Held:
    """A first turn paused in its model call (holding the thread) on a Python thread."""

    def __init__(self, runtime: SandboxRuntime, saver: Any, thread: str) -> None:
        self.holding, self.go = threading.Event(), threading.Event()
        self.result: dict[str, Any] = {}

        def pause() -> None:
            self.holding.set()
            assert self.go.wait(HANG_GUARD)

        agent = _agent(runtime, saver, script=_script(pause))
        self._worker = threading.Thread(
            target=lambda: self.result.update(_turn(agent, thread, "first"))
        )
        self._worker.start()
        assert self.holding.wait(HANG_GUARD)

    def finish(self) -> dict[str, Any]:
        self.go.set()
        self._worker.join(HANG_GUARD)
        return self.result


def test_a_second_run_of_a_busy_thread_fails_and_the_first_turn_is_kept(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str
) -> None:
    held = _Held(runtime, saver, thread)
    try:
        with pytest.raises(ThreadBusyError, match=f"Another run holds thread '{thread}'") as busy:
            _turn(_agent(runtime, saver), thread, "second")
    finally:
        first = held.finish()
    assert busy.value.thread_id == thread
    assert busy.value.retryable
    assert _turns_file(runtime, thread, first) == "first"
    after = _turn(_agent(runtime, saver), thread, "third")  # the thread is free again
    assert _turns_file(runtime, thread, after) == "firstthird"


def test_another_thread_does_not_contend(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str
) -> None:
    held = _Held(runtime, saver, thread)
    try:
        other = _turn(_agent(runtime, saver), f"{thread}-other", "other")
    finally:
        held.finish()
    assert _turns_file(runtime, f"{thread}-other", other) == "other"


def test_busy_off_takes_no_lease(runtime: SandboxRuntime, saver: SqliteSaver, thread: str) -> None:
    with runtime.hold_thread(thread, checkpointer=saver):
        result = _turn(_agent(runtime, saver, busy="off"), thread, "unleased")
    assert _turns_file(runtime, thread, result) == "unleased"


def test_turns_and_async_turns_of_one_process_never_block_on_themselves(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str
) -> None:
    agent = _agent(runtime, saver)
    _turn(agent, thread, "a")
    _turn(agent, thread, "b")
    result = _async_turn(runtime, saver, thread, "c")
    assert _turns_file(runtime, thread, result) == "abc"


def test_hold_thread_around_a_call_covers_the_run(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str
) -> None:
    # The middleware takes no lease of its own inside the hold (it would be busy: held by it).
    with runtime.hold_thread(thread, checkpointer=saver, wait=5):
        result = _turn(_agent(runtime, saver), thread, "held")
    result = _async_turn(runtime, saver, thread, "aheld", hold=True)
    assert _turns_file(runtime, thread, result) == "heldaheld"


def test_a_run_stopped_for_approval_leaves_the_thread_free_and_resumes(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str
) -> None:
    agent = _agent(runtime, saver, HumanInTheLoopMiddleware({"sandbox_exec": True}))
    config: Any = {"configurable": {"thread_id": thread}}
    stopped = agent.invoke({"messages": [HumanMessage("asked")]}, config)
    assert stopped["__interrupt__"]
    # Nobody runs the thread while it waits for a human: another holder takes it. The lease goes
    # back on a timer about 0.2 s after the interrupt (docs/persistence.md), later on a loaded
    # machine, so the holder waits for it (30 s: only a hang guard; a lease kept for the human
    # would still fail here).
    with runtime.hold_thread(thread, checkpointer=saver, wait=30):
        pass
    resumed = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert _turns_file(runtime, thread, resumed) == "asked"


class _Owner:
    """The other run's lease owner."""


class _TriesToTakeTheThread(AgentMiddleware[Any, Any]):
    """Another run tries to take the thread between the model call that asked for tools and the
    tool calls (a waiting ``hold_thread`` in another process polls in that span too)."""

    def __init__(self, runtime: SandboxRuntime, saver: Any, thread: str) -> None:
        super().__init__()
        backend = lease_backend(saver, getattr(runtime.snapshotter, "store", None))
        assert backend is not None
        self.backend, self.thread, self.owner = backend, thread, _Owner()
        self.tries = 0
        self.refused: list[ThreadBusyError] = []

    def after_model(self, state: Any, runtime: Any) -> None:
        self.tries += 1
        try:
            acquire(self.backend, self.thread, self.owner)
        except ThreadBusyError as exc:
            self.refused.append(exc)
        else:
            release(self.backend, self.thread, self.owner)
        # Across processes too: the lease's own file lock is still held.
        assert self.backend.try_acquire is not None
        assert self.backend.try_acquire(self.thread) is None


def test_no_other_run_takes_the_thread_between_a_model_call_and_its_tool_calls(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str
) -> None:
    taker = _TriesToTakeTheThread(runtime, saver, thread)
    result = _turn(_agent(runtime, saver, taker), thread, "kept")
    # Tried after the model call that asked for tools and after the final one: both refused.
    assert taker.tries == 2
    assert len(taker.refused) == 2
    assert _turns_file(runtime, thread, result) == "kept"  # and the tool call ran


def test_a_run_that_stopped_for_approval_frees_the_thread_for_other_processes(
    runtime: SandboxRuntime, saver: SqliteSaver, thread: str
) -> None:
    """Nobody in this process asks for the thread again: the lease's file lock is let go on its
    own once the stopped run is over, so a worker elsewhere can resume it."""
    agent = _agent(runtime, saver, HumanInTheLoopMiddleware({"sandbox_exec": True}))
    config: Any = {"configurable": {"thread_id": thread}}
    assert agent.invoke({"messages": [HumanMessage("asked")]}, config)["__interrupt__"]
    backend = lease_backend(saver, getattr(runtime.snapshotter, "store", None))
    assert backend is not None
    assert backend.try_acquire is not None
    deadline = time.monotonic() + HANG_GUARD
    while (let_go := backend.try_acquire(thread)) is None:
        assert time.monotonic() < deadline, "the stopped run's lease was never let go"
        time.sleep(0.05)
    let_go()


def test_a_store_no_other_process_sees_leases_within_the_process() -> None:
    store = LangGraphStoreBlobStore(InMemoryStore())
    backend = lease_backend(InMemorySaver(), store)
    assert backend is not None
    assert backend.try_acquire is None  # no cross-process lease: no other process sees it
    assert lease_backend(None, store) is None  # no checkpointer, no turn to lose


def test_a_lease_out_of_reach_lets_the_turn_run_and_says_so(
    tmp_path: Path, saver: SqliteSaver, caplog: pytest.LogCaptureFixture
) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / ".thread-leases").write_text("not a directory")  # the lease file cannot be made
    store = LocalDirectoryBlobStore(blobs, durable=False)
    with SandboxRuntime("local", snapshotter=Snapshotter(store)) as runtime:
        result = _turn(_agent(runtime, saver), "unreachable", "ran")
        assert _turns_file(runtime, "unreachable", result) == "ran"
    assert "could not lease thread 'unreachable' across processes" in caplog.text
