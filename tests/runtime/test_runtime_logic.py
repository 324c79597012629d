"""The runtime's own bookkeeping: single flight, locks, eviction, closing, cancellation, the
rehydrate/persist decisions. Provider-neutral, so these use the in-memory CountingProvider; running
real code is covered in test_runtime_local.py."""

from __future__ import annotations

import asyncio
import resource
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from langchain_sandbox.core.session_pool import _default_max_sessions
from langchain_sandbox.errors import SandboxError, SandboxGoneError, SessionClosedError
from langchain_sandbox.runtime import SandboxRuntime, StepCall
from langchain_sandbox.snapshots import Snapshotter
from langchain_sandbox.state import SandboxState

from .conftest import CountingProvider, CountingSession, wait_until


def _step(call_id: str) -> StepCall:
    return StepCall(call_id, frozenset({"call-a", "call-b"}))


def _session(provider: CountingProvider, runtime: SandboxRuntime, thread: str) -> CountingSession:
    session_id = runtime.live_sessions()[thread]
    return next(s for s in provider.sessions if s.session_id == session_id)


def test_parallel_first_calls_of_one_thread_create_one_session(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: counting_runtime.run_code("t", f"x{i} = {i}"), range(8)))
    assert len(counting_provider.sessions) == 1
    assert all(r.value.ok for r in results)
    session = counting_provider.sessions[0]
    assert session.max_active == 1, "calls of one thread must be serialized"
    assert {f"x{i}" for i in range(8)} <= set(session.namespace)
    assert session.spec.metadata["thread_id"] == "t"


async def test_async_parallel_calls_serialize_and_all_land(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    await counting_runtime.arun_code("t", "n = 0")
    outcomes = await asyncio.gather(*(counting_runtime.arun_code("t", "n += 1") for _ in range(10)))
    assert all(o.value.ok for o in outcomes)
    revisions = sorted(o.record["revision"] for o in outcomes)
    assert revisions == list(range(2, 12)), "each call gets its own revision, totally ordered"
    assert counting_provider.sessions[0].namespace["n"] == 10
    assert counting_provider.sessions[0].max_active == 1


async def test_different_threads_run_in_parallel(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    counting_provider.delay = 0.3
    overlap: list[int] = []

    async def _probe(session: Any) -> None:
        # Wait (bounded) for thread a's call to be running; with one global lock it never would.
        for _ in range(200):
            if sum(s.active for s in counting_provider.sessions):
                break
            await asyncio.sleep(0.01)
        overlap.append(sum(s.active for s in counting_provider.sessions))
        await session.run_code("pass")

    await asyncio.gather(
        counting_runtime.aexecute("a", lambda s: s.run_code("pass")),
        counting_runtime.aexecute("b", _probe),
    )
    assert len(counting_provider.sessions) == 2
    # While thread b started, thread a's call was still in flight: threads do not queue.
    assert overlap == [1]


def test_sync_and_async_callers_share_sessions(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    counting_runtime.run_code("t", "v = 41")

    async def _from_another_loop() -> Any:
        return await counting_runtime.arun_code("t", "v += 1")

    asyncio.run(_from_another_loop())
    assert counting_provider.sessions[0].namespace["v"] == 42
    assert len(counting_provider.sessions) == 1


def test_cap_closes_the_least_recently_used_idle_session(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    with SandboxRuntime(
        counting_provider, snapshotter=snapshotter, max_sessions=2, idle_ttl=None
    ) as runtime:
        runtime.run_code("a", "pass")
        runtime.run_code("b", "pass")
        runtime.run_code("a", "pass")  # b is now the least recently used
        runtime.run_code("c", "pass")
        assert set(runtime.live_sessions()) == {"a", "c"}
        assert len(counting_provider.live) == 2


def test_a_thread_whose_sandbox_the_cap_closed_is_told_why_and_what_is_gone(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    """Under ``persist="never"`` the live session is the only copy, so the cap does not spill it:
    the next call says the state is gone and why the sandbox was closed, not only that it is
    new."""
    with SandboxRuntime(
        counting_provider, snapshotter=snapshotter, max_sessions=1, idle_ttl=None, persist="never"
    ) as runtime:
        runtime.run_code("a", "kept = 1")
        runtime.run_code("b", "pass")
        outcome = runtime.run_code("a", "print('kept' in globals())")
        assert outcome.value.stdout == "False\n"
        notices = outcome.value.notices
        assert (
            "The thread's previous sandbox was closed to stay within the runtime's "
            "max_sessions=1." in notices
        )
        assert any("no snapshot of it was saved" in notice for notice in notices)


def test_more_threads_than_the_cap_each_keep_their_variables_and_files(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    """The cap spills the least recently used idle session (captured, then closed) under the
    default policy, outside any graph where nothing else would snapshot it; the thread's next
    call restores it without a word, since nothing was lost."""
    threads = [f"t{i}" for i in range(5)]
    with SandboxRuntime(
        counting_provider, snapshotter=snapshotter, max_sessions=2, idle_ttl=None
    ) as runtime:
        for thread in threads:
            runtime.run_code(thread, "n = 0")
            runtime.write_files(thread, {"log.txt": b""})
        for round_ in range(1, 4):
            for thread in threads:
                outcome = runtime.run_code(thread, "n += 1\nprint(n)")
                assert outcome.value.stdout == f"{round_}\n", (thread, outcome.value)
                assert outcome.value.notices == [], "nothing was lost, so nothing to say"
                read = runtime.read_files(thread, ["log.txt"])
                assert read.notices == []
                runtime.write_files(thread, {"log.txt": read.value["log.txt"] + b"%d\n" % round_})
                assert len(runtime.live_sessions()) <= 2
        for thread in threads:
            assert runtime.read_files(thread, ["log.txt"]).value["log.txt"] == b"1\n2\n3\n"
        assert len(counting_provider.live) == 2
        assert len(counting_provider.sessions) > len(threads), "sessions were spilled"


def test_a_spilled_thread_comes_back_for_its_graph_record_too(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    """A record from a graph without a checkpointer names no snapshot (nothing can resume from
    it), but it carries the head the thread was spilled at: the spill's snapshot restores it."""
    with SandboxRuntime(
        counting_provider, snapshotter=snapshotter, max_sessions=1, idle_ttl=None
    ) as runtime:
        record = runtime.run_code("a", "kept = 41").record
        assert record.get("snapshot") is None
        runtime.run_code("b", "pass")
        assert "a" not in runtime.live_sessions()
        outcome = runtime.run_code("a", "print(kept + 1)", record=record)
        assert outcome.value.stdout == "42\n"
        assert outcome.value.notices == []


def test_a_spill_that_cannot_be_saved_says_the_state_is_gone(
    counting_provider: CountingProvider, snapshotter: Snapshotter, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def _failing_capture(*args: Any, **kwargs: Any) -> Any:
        raise SandboxError("the snapshot store is down")

    with SandboxRuntime(
        counting_provider, snapshotter=snapshotter, max_sessions=1, idle_ttl=None
    ) as runtime:
        runtime.run_code("a", "kept = 1")
        monkeypatch.setattr(snapshotter, "capture", _failing_capture)
        runtime.run_code("b", "pass")
        outcome = runtime.run_code("a", "print('kept' in globals())")
        assert outcome.value.stdout == "False\n"
        assert (
            "The thread's previous sandbox was closed to stay within the runtime's "
            "max_sessions=1." in outcome.value.notices
        )


def test_cap_never_closes_a_busy_session(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    counting_provider.delay = 0.5
    with SandboxRuntime(
        counting_provider, snapshotter=snapshotter, max_sessions=1, idle_ttl=None
    ) as runtime:
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(runtime.run_code, "a", "import time\nslow = 1")
            assert wait_until(lambda: any(s.active for s in counting_provider.sessions))
            counting_provider.delay = 0.0
            other = pool.submit(runtime.run_code, "b", "fast = 1")
            assert other.result(timeout=30).value.ok
            assert slow.result(timeout=30).value.ok, "the busy session was not closed under it"
        # Once both are idle the cap holds again.
        assert len(runtime.live_sessions()) == 1


def test_idle_ttl_closes_idle_sessions_and_restores_on_next_call(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    with SandboxRuntime(
        counting_provider, snapshotter=snapshotter, idle_ttl=0.2, persist="every_call"
    ) as runtime:
        runtime.run_code("t", "kept = 'yes'")
        first = counting_provider.sessions[0]
        assert wait_until(lambda: first.closed), "idle session was not reaped"
        assert runtime.live_sessions() == {}
        outcome = runtime.run_code("t", "print(kept)")
        assert outcome.value.stdout == "yes\n", "state came back from the snapshot"
        assert any("restored" in n for n in outcome.value.notices)
        assert (
            "The thread's previous sandbox was closed after 0.2 s idle (the runtime's "
            "idle_ttl)." in outcome.value.notices
        )


def test_close_leaves_nothing_running(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    runtime = SandboxRuntime(counting_provider, snapshotter=snapshotter, idle_ttl=1.0)
    for thread in ("a", "b", "c"):
        runtime.run_code(thread, "pass")
    loop_threads = [t for t in threading.enumerate() if t.name == "langchain-sandbox-runtime"]
    assert loop_threads
    runtime.close()
    runtime.close()  # idempotent
    assert counting_provider.live == []
    assert not any(t.is_alive() for t in loop_threads if t not in _other_runtime_threads())
    with pytest.raises(SessionClosedError):
        runtime.run_code("a", "pass")


def _other_runtime_threads() -> list[threading.Thread]:
    # The process-wide default runtime (if a test made one) owns a loop thread of the same name.
    from langchain_sandbox import runtime as runtime_module

    default = runtime_module._default_runtime
    return [default._loop._thread] if default is not None and not default.closed else []


async def test_aclose_from_async_code(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    async with SandboxRuntime(counting_provider, snapshotter=snapshotter) as runtime:
        await runtime.arun_code("a", "pass")
    assert counting_provider.live == []
    assert runtime.closed


def test_close_thread_destroys_only_that_thread(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    counting_runtime.run_code("a", "pass")
    counting_runtime.run_code("b", "pass")
    assert counting_runtime.close_thread("a") is True
    assert counting_runtime.close_thread("a") is False
    assert set(counting_runtime.live_sessions()) == {"b"}
    assert counting_runtime.thread_record("a") is None


async def test_cancelling_an_async_caller_cancels_the_work(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    await counting_runtime.arun_code("t", "pass")
    counting_provider.delay = 30.0
    task = asyncio.create_task(counting_runtime.arun_code("t", "never = 1"))
    session = counting_provider.sessions[0]
    for _ in range(500):
        if session.active:
            break
        await asyncio.sleep(0.01)
    assert session.active == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):
        if not session.active:
            break
        await asyncio.sleep(0.01)
    assert session.active == 0, "the call kept running on the runtime loop"
    assert "never" not in session.namespace
    counting_provider.delay = 0.0
    after = await counting_runtime.arun_code("t", "after = 1")
    assert after.value.ok
    # The half-run session was destroyed; the next call got the state before the cancelled call.
    assert session.closed
    assert any("restored" in n for n in after.value.notices)


# -- rehydrate / persist decisions -------------------------------------------------------------


def test_by_default_only_a_resumable_call_is_captured(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    """``persist="resumable"`` (the default): a changing call is captured only when its caller
    says something can resume from its record; a call that leaves nothing stored still advances
    the record, and the next resumable call captures everything up to it."""

    async def _stored() -> set[str]:
        return {info.key async for info in snapshotter.store.iter_blobs()}

    with SandboxRuntime(counting_provider, snapshotter=snapshotter, idle_ttl=None) as runtime:
        assert runtime.persist == "resumable"
        assert (runtime.persists(False), runtime.persists(True)) == (False, True)
        plain = runtime.run_code("t", "a = 1").record
        runtime.write_files("t", {"notes.txt": b"hello"})
        assert plain.get("snapshot") is None
        assert runtime.run_sync(_stored()) == set(), "nothing can resume, nothing is stored"

        resumable = runtime.run_code("t", "b = 2", resumable=True).record
        assert resumable["revision"] == 3
        assert resumable["snapshot"]
        assert resumable["snapshot_revision"] == 3
        assert runtime.run_sync(_stored())
    with SandboxRuntime(CountingProvider(), snapshotter=snapshotter) as other:
        outcome = other.run_code("t", "print(a + b)", record=resumable)
        assert outcome.value.stdout == "3\n"
        assert other.read_files("t", ["notes.txt"]).value == {"notes.txt": b"hello"}


def test_records_advance_and_carry_a_snapshot(counting_runtime: SandboxRuntime) -> None:
    first = counting_runtime.run_code("t", "a = 1").record
    second = counting_runtime.run_code("t", "b = 2").record
    assert second["revision"] == first["revision"] + 1
    assert second["head"] != first["head"]
    assert second["snapshot"]
    assert second["snapshot_revision"] == second["revision"]
    assert first["exec_count"] == 1, "exec_count is a delta for the channel's reducer"
    read = counting_runtime.read_files("t", [])
    assert read.record["revision"] == second["revision"], "reads do not bump the revision"


def test_fork_rewinds_the_live_session_to_the_older_state(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    at_one = counting_runtime.run_code("t", "x = 1").record
    at_two = counting_runtime.run_code("t", "x = 2").record
    original = counting_provider.sessions[0]

    forked = counting_runtime.run_code("t", "print(x)", record=at_one)
    assert forked.value.stdout == "1\n"
    assert any("restored" in n for n in forked.value.notices)
    assert not original.closed, "rewound in place, not replaced"
    assert len(counting_provider.sessions) == 1

    # The original branch continues with its own state.
    back = counting_runtime.run_code("t", "print(x)", record=at_two)
    assert back.value.stdout == "2\n"


def test_parallel_calls_with_the_same_stale_record_share_the_session(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    step = counting_runtime.run_code("t", "items = []").record
    a = counting_runtime.run_code("t", "items.append('a')", record=step, step_call=_step("call-a"))
    b = counting_runtime.run_code("t", "items.append('b')", record=step, step_call=_step("call-b"))
    assert a.value.ok
    assert b.value.ok
    assert counting_provider.sessions[0].namespace["items"] == ["a", "b"]
    assert len(counting_provider.sessions) == 1
    assert b.record["revision"] > a.record["revision"] > step["revision"]

    # A call of another message carrying the old record (time travel to before the step, the
    # model answering differently) is a divergence too.
    other = counting_runtime.run_code(
        "t", "print(items)", record=step, step_call=StepCall("call-c", frozenset({"call-c"}))
    )
    assert other.value.stdout == "[]\n"
    assert any("restored" in n for n in other.value.notices)

    # Replaying call-a from the same record (a fork re-running the step) is a divergence.
    replay = counting_runtime.run_code("t", "print(items)", record=b.record)
    assert replay.value.stdout == "['a', 'b']\n", "the original branch keeps its own state"
    again = counting_runtime.run_code("t", "print(items)", record=step, step_call=_step("call-a"))
    assert again.value.stdout == "[]\n"
    assert len(counting_provider.sessions) == 1, "each divergence rewound the live session"


def test_previous_process_record_restores_in_a_new_runtime(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    with SandboxRuntime(counting_provider, snapshotter=snapshotter, persist="every_call") as first:
        first.write_files("t", {"notes.txt": b"hello"})
        record = first.run_code("t", "total = 42").record
    with SandboxRuntime(CountingProvider(), snapshotter=snapshotter) as second:
        outcome = second.run_code("t", "print(total)", record=record)
        assert outcome.value.stdout == "42\n"
        assert second.read_files("t", ["notes.txt"]).value == {"notes.txt": b"hello"}


def test_failed_persist_keeps_the_result_and_the_previous_snapshot(
    counting_runtime: SandboxRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = counting_runtime.run_code("t", "a = 1").record
    assert counting_runtime.snapshotter is not None

    async def _broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(counting_runtime.snapshotter, "capture", _broken)
    outcome = counting_runtime.run_code("t", "print('still here')")
    assert outcome.value.stdout == "still here\n"
    assert any("Could not save a snapshot" in n and "disk full" in n for n in outcome.notices)
    assert outcome.record["snapshot"] == good["snapshot"]
    assert outcome.record["snapshot_revision"] == good["revision"]
    assert outcome.record["revision"] == good["revision"] + 1


def test_a_record_without_snapshot_starts_fresh_with_a_notice(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> None:
    with SandboxRuntime(counting_provider, snapshotter=snapshotter, persist="never") as runtime:
        record = runtime.run_code("t", "x = 1").record
        assert record.get("snapshot") is None
    with SandboxRuntime(CountingProvider(), snapshotter=snapshotter) as other:
        outcome = other.run_code("t", "y = 2", record=record)
        assert outcome.value.ok
        assert any("no snapshot" in n for n in outcome.value.notices)


def test_dead_sandbox_is_replaced_and_restored_without_rerunning_code(
    counting_runtime: SandboxRuntime, counting_provider: CountingProvider
) -> None:
    counting_runtime.run_code("t", "counter = 1")
    counting_provider.sessions[0].dead = True
    with pytest.raises(SandboxGoneError, match="Run it again"):
        counting_runtime.run_code("t", "counter += 1")
    replacement = counting_provider.sessions[-1]
    assert replacement is not counting_provider.sessions[0]
    assert replacement.namespace.get("counter") == 1, "restored, and the call was not re-run"
    # Repeatable operations are retried on the replacement, with a notice.
    replacement.dead = True
    read = counting_runtime.list_files("t")
    assert any("had stopped" in n for n in read.notices)
    assert counting_runtime.run_code("t", "print(counter)").value.stdout == "1\n"


def test_stale_record_is_not_confused_with_the_live_head_after_reads(
    counting_runtime: SandboxRuntime,
) -> None:
    record: SandboxState = counting_runtime.run_code("t", "z = 3").record
    listed = counting_runtime.list_files("t", record=record)
    again = counting_runtime.run_code("t", "print(z)", record=listed.record)
    assert again.value.stdout == "3\n"
    assert not again.value.notices


@pytest.mark.parametrize(
    ("open_files", "cap"), [(1024, 128), (20_000, 1024), (resource.RLIM_INFINITY, 1024), (4, 1)]
)
def test_the_default_cap_leaves_the_application_half_its_open_files(
    monkeypatch: pytest.MonkeyPatch, open_files: int, cap: int
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (open_files, resource.RLIM_INFINITY))
    assert _default_max_sessions() == cap
