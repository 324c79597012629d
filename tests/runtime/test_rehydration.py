"""The rehydrate/persist engine on its own: no runtime, no loop thread, no pool, no eviction.

The engine runs on the test's own event loop against the in-memory CountingSession, with a host
that only creates and closes sessions, so each rule (fork, replay, parallel calls, recovery,
cancellation, persistence) is checked by itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox.core.rehydration import RehydrationEngine
from langchain_sandbox.core.restoring import HEAD_VARIABLE
from langchain_sandbox.core.thread import Outcome, StepCall, ThreadSandbox
from langchain_sandbox.errors import SandboxGoneError
from langchain_sandbox.providers.base import (
    Capabilities,
    Provider,
    Session,
    SessionRecord,
    SessionSpec,
)
from langchain_sandbox.results import ExecutionResult
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.state import SandboxState

from .conftest import CountingProvider, CountingSession


class _Host:
    """Sessions straight from the provider; closes are recorded, background ones included."""

    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self.created: list[str] = []
        self.closed_soon: list[Session] = []

    async def provider(self) -> Provider:
        return self._provider

    async def create(self, thread_id: str) -> Session:
        self.created.append(thread_id)
        return await self._provider.create()

    async def close(self, session: Session) -> None:
        await session.close()

    def close_soon(self, session: Session) -> None:
        self.closed_soon.append(session)


@pytest.fixture
def provider() -> CountingProvider:
    return CountingProvider(delay=0.0, create_delay=0.0)


@pytest.fixture
def host(provider: CountingProvider) -> _Host:
    return _Host(provider)


@pytest.fixture
def engine(host: _Host, tmp_path: Path) -> RehydrationEngine:
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    return RehydrationEngine(host, snapshotter=snapshotter, persist="every_call")


def _code(source: str) -> Any:
    async def run(session: Session) -> ExecutionResult:
        return await session.run_code(source)

    return run


async def _run(
    engine: RehydrationEngine,
    thread: ThreadSandbox,
    source: str,
    record: SandboxState | None = None,
    step_call: StepCall | None = None,
) -> Outcome[ExecutionResult]:
    return await engine.run(thread, _code(source), record=record, step_call=step_call)


def _step(call_id: str, *siblings: str) -> StepCall:
    return StepCall(call_id, frozenset(siblings))


async def test_a_changing_call_advances_the_record_and_persists(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    first = await _run(engine, thread, "a = 1")
    second = await _run(engine, thread, "b = 2")
    assert (first.record["revision"], second.record["revision"]) == (1, 2)
    assert first.record["head"] != second.record["head"]
    assert second.record["snapshot"]
    assert second.record["snapshot_revision"] == 2
    assert second.record["session"] == provider.sessions[0].record
    read = await engine.run(thread, _code("print(b)"), mutates=False)
    assert read.record["revision"] == 2
    assert read.record["head"] == second.record["head"]
    assert len(provider.sessions) == 1
    assert not first.notices


async def test_fork_rewinds_the_live_session_to_the_record(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    at_one = (await _run(engine, thread, "x = 1")).record
    await _run(engine, thread, "x = 2\ny = 3")
    forked = await _run(engine, thread, "print(x, 'y' in globals())", record=at_one)
    assert forked.value.stdout == "1 False\n"
    assert forked.notices[0] == "The sandbox was restored from the snapshot of revision 1."
    assert len(provider.sessions) == 1, "the live session is rewound, not replaced"
    assert not provider.sessions[0].closed
    assert forked.record["revision"] == 2
    assert forked.record["snapshot_revision"] == 2


async def test_parallel_calls_of_one_message_share_the_session(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    step = (await _run(engine, thread, "items = []")).record
    a = await _run(engine, thread, "items.append('a')", step, _step("a", "b"))
    b = await _run(engine, thread, "items.append('b')", step, _step("b", "a"))
    assert a.value.ok
    assert b.value.ok
    assert provider.sessions[0].namespace["items"] == ["a", "b"]
    assert len(provider.sessions) == 1
    assert (a.record["revision"], b.record["revision"]) == (2, 3)


async def test_a_call_of_another_message_with_the_stale_record_is_a_fork(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    step = (await _run(engine, thread, "items = []")).record
    await _run(engine, thread, "items.append('a')", step, _step("a", "b"))
    other = await _run(engine, thread, "print(items)", step, _step("c"))
    assert other.value.stdout == "[]\n"
    assert any("restored" in notice for notice in other.notices)


async def test_a_replayed_call_is_a_fork_not_a_sibling(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    step = (await _run(engine, thread, "items = []")).record
    await _run(engine, thread, "items.append('a')", step, _step("a", "b"))
    replay = await _run(engine, thread, "print(items)", step, _step("a", "b"))
    assert replay.value.stdout == "[]\n", "call a already ran on the live session"
    assert any("restored" in notice for notice in replay.notices)


async def test_sends_of_one_graph_step_share_the_session_without_a_message_naming_them(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    """``Send`` fan-out: each call's payload names only its own call, the step key ties them."""
    thread = ThreadSandbox("t")
    step = (await _run(engine, thread, "items = []")).record
    a = await _run(engine, thread, "items.append('a')", step, StepCall("a", step="@n1"))
    b = await _run(engine, thread, "items.append('b')", step, StepCall("b", step="@n1"))
    assert provider.sessions[0].namespace["items"] == ["a", "b"]
    assert len(provider.sessions) == 1
    assert (a.record["revision"], b.record["revision"]) == (2, 3)
    other_step = await _run(engine, thread, "print(items)", step, StepCall("c", step="@n2"))
    assert other_step.value.stdout == "[]\n", "a call of another step with the old record forks"


async def test_a_call_rerun_with_a_finished_siblings_record_shares_the_session(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    """A call re-run after its step's other calls finished carries the newest of their records
    (from the step's pending writes), not the step's base: still the same batch."""
    thread = ThreadSandbox("t")
    step = (await _run(engine, thread, "items = []")).record
    a = await _run(engine, thread, "items.append('a')", step, _step("a", "b", "c"))
    await _run(engine, thread, "items.append('c')", step, _step("c", "a", "b"))
    b = await _run(engine, thread, "items.append('b')", a.record, _step("b", "a", "c"))
    assert provider.sessions[0].namespace["items"] == ["a", "c", "b"]
    assert len(provider.sessions) == 1
    assert b.record["revision"] == 4
    replay = await _run(engine, thread, "print(items)", a.record, _step("a", "b", "c"))
    assert replay.value.stdout == "['a']\n", "a replay of a applied call restores its record"


async def test_a_call_outside_any_step_ends_the_batch(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    step = (await _run(engine, thread, "items = []")).record
    await _run(engine, thread, "items.append('a')", step, _step("a", "b"))
    await _run(engine, thread, "items.append('x')")
    late = await _run(engine, thread, "print(items)", step, _step("b", "a"))
    assert late.value.stdout == "[]\n", "a newer head was issued since the step began"
    assert any("restored" in notice for notice in late.notices)


async def test_a_gone_sandbox_is_replaced_and_user_code_is_not_rerun(
    engine: RehydrationEngine, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    await _run(engine, thread, "counter = 1")
    provider.sessions[0].dead = True
    with pytest.raises(SandboxGoneError, match="Run it again"):
        await _run(engine, thread, "counter += 1")
    replacement = provider.sessions[1]
    assert replacement.namespace["counter"] == 1
    replacement.dead = True

    async def listing(session: Session) -> int:
        return len(await session.list_files())

    listed = await engine.run(thread, listing, mutates=False, repeatable=True)
    assert any("had stopped" in notice for notice in listed.notices)
    assert len(provider.sessions) == 3


async def test_a_cancelled_changing_call_retires_its_session(
    engine: RehydrationEngine, host: _Host, provider: CountingProvider
) -> None:
    thread = ThreadSandbox("t")
    before = (await _run(engine, thread, "x = 1")).record
    provider.delay = 10.0
    started = asyncio.Event()

    async def slow(session: Session) -> ExecutionResult:
        started.set()
        return await session.run_code("x = 2")

    task = asyncio.ensure_future(engine.run(thread, slow))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert host.closed_soon == [provider.sessions[0]]
    assert thread.session is None
    assert thread.as_record()["head"] == before["head"], "the cancelled call never happened"


async def test_a_failed_snapshot_keeps_the_result_and_says_so(
    engine: RehydrationEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = ThreadSandbox("t")
    good = (await _run(engine, thread, "a = 1")).record

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(engine.snapshotter, "capture", broken)
    outcome = await _run(engine, thread, "print('done')")
    assert outcome.value.stdout == "done\n"
    assert outcome.record["snapshot"] == good["snapshot"]
    assert any("disk full" in notice for notice in outcome.notices)


async def test_persist_never_keeps_no_snapshot_and_a_new_session_says_so(
    host: _Host, tmp_path: Path
) -> None:
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    engine = RehydrationEngine(host, snapshotter=snapshotter, persist="never")
    record = (await _run(engine, ThreadSandbox("t"), "x = 1")).record
    assert record.get("snapshot") is None
    fresh = await _run(engine, ThreadSandbox("t"), "y = 2", record=record)
    assert any("no snapshot of it was saved" in notice for notice in fresh.notices)


class _LastingSession(CountingSession):
    """A sandbox that outlives its "process" and answers the head query with a value."""

    async def run_code(self, code: str, **kwargs: Any) -> ExecutionResult:
        if code == HEAD_VARIABLE and HEAD_VARIABLE in self.namespace:
            return ExecutionResult(value=repr(self.namespace[HEAD_VARIABLE]))
        return await super().run_code(code, **kwargs)


class _AttachingProvider(CountingProvider):
    capabilities = Capabilities(attach_across_processes=True)

    async def create(self, spec: SessionSpec | None = None) -> Session:
        session = _LastingSession(self, spec or SessionSpec())
        session.capabilities = self.capabilities
        self.sessions.append(session)
        return session

    async def _attach(self, record: SessionRecord) -> Session | None:
        return next((s for s in self.live if s.session_id == record.get("session_id")), None)


async def test_attach_is_used_only_while_the_sandbox_holds_the_records_head(
    tmp_path: Path,
) -> None:
    provider = _AttachingProvider(delay=0.0, create_delay=0.0)
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    engine = RehydrationEngine(_Host(provider), snapshotter=snapshotter, persist="every_call")
    first = (await _run(engine, ThreadSandbox("t"), "x = 1")).record

    # Another process (a thread object of its own) with the latest record attaches: no restore.
    attached = await _run(engine, ThreadSandbox("t"), "x = 5", record=first)
    assert attached.value.ok
    assert not attached.notices
    assert len(provider.sessions) == 1

    # The sandbox moved on, so the older record no longer matches it: restore into a new one.
    stale = await _run(engine, ThreadSandbox("t"), "print(x)", record=first)
    assert stale.value.stdout == "1\n"
    assert any("restored" in notice for notice in stale.notices)
    assert len(provider.sessions) == 2
    assert not provider.sessions[0].closed


async def test_a_rewound_sandbox_no_longer_matches_the_branch_it_left(tmp_path: Path) -> None:
    """A rewind in place clears the sandbox's head first: a process resuming the later branch
    must not attach to a sandbox that now holds the earlier state."""
    provider = _AttachingProvider(delay=0.0, create_delay=0.0)
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    engine = RehydrationEngine(_Host(provider), snapshotter=snapshotter, persist="every_call")
    thread = ThreadSandbox("t")
    first = (await _run(engine, thread, "x = 1")).record
    second = (await _run(engine, thread, "x = 2")).record

    rewound = await _run(engine, thread, "print(x)", record=first)
    assert rewound.value.stdout == "1\n"
    assert len(provider.sessions) == 1, "rewound in place"

    resumed = await _run(engine, ThreadSandbox("t"), "print(x)", record=second)
    assert resumed.value.stdout == "2\n"
    assert len(provider.sessions) == 2, "restored into a new sandbox, not attached"


class _HeldSnapshotter(Snapshotter):
    """Captures wait for ``gate``: a snapshot written behind that is still in flight."""

    def __init__(self, store: LocalDirectoryBlobStore, gate: asyncio.Event) -> None:
        super().__init__(store)
        self.gate = gate

    async def capture(self, *args: Any, **kwargs: Any) -> Any:
        await self.gate.wait()
        return await super().capture(*args, **kwargs)


async def test_a_resume_in_another_engine_waits_for_a_snapshot_still_written_behind(
    tmp_path: Path,
) -> None:
    """A thread moving to another runtime of the same process (another provider) while its last
    snapshot is in flight gets that snapshot, not the older one with a notice of loss."""
    gate = asyncio.Event()
    writer = RehydrationEngine(
        _Host(_AttachingProvider(delay=0.0, create_delay=0.0)),
        snapshotter=_HeldSnapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"), gate),
        persist="every_call",
        write_behind=True,
    )
    reader = RehydrationEngine(
        _Host(CountingProvider(delay=0.0, create_delay=0.0)),
        snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
        persist="every_call",
    )
    written = (await _run(writer, ThreadSandbox("t"), "x = 1")).record
    assert written["snapshot"] is None  # the call returned before its snapshot
    asyncio.get_running_loop().call_later(0.05, gate.set)

    moved = await _run(reader, ThreadSandbox("t"), "print(x)", record=written)
    assert moved.value.stdout == "1\n"
    assert not any("lost" in notice for notice in moved.notices)
