"""Snapshots written behind on E2B (the real SDK against the emulator): what a call costs on its
critical path, what follows it, and what a resume finds when the snapshot is late or never came.

Requests are counted from the emulator's log. The capture starts only once its call has returned
(the engine schedules it after the call's own requests), so the requests logged before the
capture's first one are the call's, and the rest are the snapshot's: one code execution that lists
the changes, reads the changed files and dumps the variables (``E2BSession.list_changes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

import pytest

from langchain_sandbox.core import rehydration
from langchain_sandbox.core.restoring import HEAD_VARIABLE
from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import Snapshotter
from langchain_sandbox.testing.e2b_emulator import E2BEmulator, RecordedRequest


def _routes(emulator: E2BEmulator) -> list[str]:
    return [request.route for request in emulator.requests]


def _is_capture(request: RecordedRequest) -> bool:
    """The request of the snapshot: the cell that lists the changes (and dumps the variables)."""
    return request.route == "jupyter execute" and "guest_changes" in str(request.body.get("code"))


def _split(emulator: E2BEmulator) -> tuple[list[str], list[str]]:
    """(the call's requests in order, the snapshot's requests sorted)."""
    requests = list(emulator.requests)
    cut = next((i for i, request in enumerate(requests) if _is_capture(request)), len(requests))
    return [r.route for r in requests[:cut]], sorted(r.route for r in requests[cut:])


WarmRuntime = Callable[..., contextlib.AbstractAsyncContextManager[SandboxRuntime]]


def _hold_the_capture(emulator: E2BEmulator, release: threading.Event) -> None:
    """Hold the next capture's request (its cell) until ``release`` is set."""
    emulator.inject("jupyter execute", body="guest_changes", hold=release)


async def _held_listing(emulator: E2BEmulator) -> RecordedRequest:
    """The capture's request, once it has reached the emulator (which holds it)."""
    for _ in range(600):
        listing = [r for r in emulator.requests if _is_capture(r)]
        if listing:
            return listing[0]
        await asyncio.sleep(0.1)
    raise AssertionError("the capture never listed the workspace")


async def test_e2b_writes_behind_by_default(warm_runtime: WarmRuntime) -> None:
    async with warm_runtime() as runtime:
        assert runtime.write_behind
    local = SandboxRuntime("local")
    try:
        assert not local.write_behind  # a local sandbox dies with its process
    finally:
        await local.aclose()


async def test_a_changing_call_costs_two_requests_and_its_snapshot_follows_it(
    warm_runtime: WarmRuntime, emulator: E2BEmulator
) -> None:
    async with warm_runtime() as runtime:
        for expected in (1, 2, 3):
            emulator.clear_requests()
            outcome = await runtime.arun_code(
                "t", "n += 1\nn", record=runtime.thread_record("t"), resumable=True
            )
            await runtime.aflush()
            call, behind = _split(emulator)
            assert outcome.value.value == str(expected)
            # the user's cell and the head marker; the snapshot: one cell (listing, changed
            # files, variables)
            assert call == ["jupyter execute", "jupyter execute"]
            assert behind == ["jupyter execute"]
            # the returned record names the last complete snapshot (the one before this call)...
            assert outcome.record["revision"] == expected + 1
            assert outcome.record["snapshot_revision"] == expected
            # ...and once the capture is done, the thread's record names this call's
            record = runtime.thread_record("t") or {}
            assert record["snapshot_revision"] == record["revision"] == expected + 1


async def test_inline_snapshots_stay_selectable_and_cost_three_requests_on_the_call(
    warm_runtime: WarmRuntime, emulator: E2BEmulator
) -> None:
    async with warm_runtime(write_behind=False) as runtime:
        emulator.clear_requests()
        outcome = await runtime.arun_code("t", "n += 1", resumable=True)
        # all three before the call returns: cell, head marker, then the capture's one cell
        assert _split(emulator) == (
            ["jupyter execute", "jupyter execute"],
            ["jupyter execute"],
        )
        assert outcome.record["snapshot_revision"] == outcome.record["revision"] == 2
        assert runtime.pending_snapshots() == {}


async def test_the_call_returns_while_its_snapshot_is_still_being_captured(
    warm_runtime: WarmRuntime, emulator: E2BEmulator
) -> None:
    async with warm_runtime() as runtime:
        release = threading.Event()
        _hold_the_capture(emulator, release)
        try:
            emulator.clear_requests()
            outcome = await runtime.arun_code("t", "n = 'answer'\nn", resumable=True)
            assert outcome.value.value == "'answer'"
            assert runtime.pending_snapshots() == {"t": 2}
            listing = await _held_listing(emulator)
            assert listing.status == 0  # the capture is stuck in its listing; the call is back
            executed = [r.body["code"] for r in emulator.requests if r.route == "jupyter execute"]
            # the head marker is in the interpreter already, right after the user's cell: before
            # the call returned and before the capture's own request
            assert executed.index(f"{HEAD_VARIABLE} = {outcome.record['head']!r}") == 1
        finally:
            release.set()
        await runtime.aflush()
        assert runtime.pending_snapshots() == {}
        assert (runtime.thread_record("t") or {})["snapshot_revision"] == 2


async def test_the_next_call_waits_for_the_snapshot_before_it_changes_the_sandbox(
    warm_runtime: WarmRuntime, blob_snapshotter: Snapshotter
) -> None:
    async with warm_runtime() as runtime:
        first = await runtime.arun_code("t", "n = 1", resumable=True)
        second = await runtime.arun_code("t", "n = 2", record=first.record, resumable=True)
        # the second call's record names the first call's snapshot, which holds n == 1
        assert second.record["snapshot_revision"] == first.record["revision"] == 2
        manifest = await blob_snapshotter.load_manifest(second.record["snapshot"] or "")
        assert manifest.revision == 2


async def test_a_resume_finds_a_snapshot_that_completed_after_its_record(
    warm_runtime: WarmRuntime, provider: E2BProvider, blob_snapshotter: Snapshotter
) -> None:
    """The checkpoint's record could not name the snapshot written behind; a resume elsewhere,
    with the sandbox gone, restores it through the record's head: nothing is lost."""
    async with warm_runtime() as runtime:
        code = "m = 7\nopen('m.txt', 'w').write('seven')"
        checkpointed = (await runtime.arun_code("t", code, resumable=True)).record
        assert checkpointed["snapshot_revision"] < checkpointed["revision"]
    # closing waited for the snapshot, then killed the sandbox: only the snapshot is left
    other = SandboxRuntime(provider, snapshotter=blob_snapshotter)
    try:
        resumed = await other.arun_code(
            "t", "print(m, open('m.txt').read())", record=checkpointed, resumable=True
        )
    finally:
        await other.aclose()
    assert resumed.value.stdout == "7 seven\n"
    assert resumed.notices[0] == "The sandbox was restored from the snapshot of revision 2."
    assert not any("not saved" in notice for notice in resumed.notices)


async def test_a_resume_whose_snapshot_never_completed_attaches_to_the_live_sandbox(
    warm_runtime: WarmRuntime,
    provider: E2BProvider,
    blob_snapshotter: Snapshotter,
    emulator: E2BEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    async with warm_runtime() as runtime:
        _hold_the_capture(emulator, release)
        try:
            code = "import threading\nlock = threading.Lock()"
            outcome = await runtime.arun_code("t", code, resumable=True)
            assert runtime.pending_snapshots() == {"t": 2}  # its capture is held
            # another process, while the first one's capture is stuck: it cannot see the
            # captures in flight here (a resume in this process would wait for them)
            monkeypatch.setattr(rehydration, "_captures_in_flight", rehydration._CapturesInFlight())
            other = SandboxRuntime(provider, snapshotter=blob_snapshotter)
            try:
                resumed = await other.arun_code(
                    "t", "type(lock).__name__", record=outcome.record, resumable=True
                )
            finally:
                await other.aclose()
        finally:
            release.set()
    assert resumed.value.value == "'lock'"
    assert resumed.notices == []


async def test_a_call_nothing_can_resume_from_is_one_request(
    warm_runtime: WarmRuntime, emulator: E2BEmulator
) -> None:
    """Outside a graph (or without a checkpointer) no snapshot is taken and no head marker is
    set (nothing will ever attach by it): the call is the SDK's one request."""
    async with warm_runtime() as runtime:
        for expected in (1, 2, 3):
            emulator.clear_requests()
            outcome = await runtime.arun_code("t", "n += 1\nn")
            await runtime.aflush()
            assert outcome.value.value == str(expected)
            assert _routes(emulator) == ["jupyter execute"]


async def test_tool_calls_outside_and_inside_a_checkpointed_agent(
    warm_runtime: WarmRuntime, emulator: E2BEmulator
) -> None:
    """The issue's rows, through the tools: a warm ``SandboxExecTool`` call outside any graph is
    one request; in a ``create_agent`` run with a checkpointer, the tool call's critical path is
    two requests and its snapshot follows it."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox import SandboxExecTool, SandboxMiddleware
    from langchain_sandbox.testing import ScriptedToolModel, call

    async with warm_runtime() as runtime:
        tool = SandboxExecTool(runtime=runtime, default_thread_id="t")
        await tool.ainvoke({"code": "n = 0"})
        emulator.clear_requests()
        assert "1" in await tool.ainvoke({"code": "n += 1\nn"})
        assert _routes(emulator) == ["jupyter execute"]

        model = ScriptedToolModel(script=[call("sandbox_exec", code="m = 1"), "done"])
        agent = create_agent(
            model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=InMemorySaver()
        )
        config = {"configurable": {"thread_id": "g"}}
        await agent.ainvoke({"messages": [("user", "go")]}, config)  # creates the sandbox
        await runtime.aflush()
        emulator.clear_requests()
        model.script.extend([call("sandbox_exec", code="m += 1"), "done"])
        result = await agent.ainvoke({"messages": [("user", "again")]}, config)
        await runtime.aflush()
        call_requests, behind = _split(emulator)
        assert call_requests == ["jupyter execute", "jupyter execute"]
        assert behind == ["jupyter execute"]
        assert result["sandbox"]["revision"] == 2
