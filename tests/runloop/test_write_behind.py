"""Snapshots written behind on Runloop (the real SDK against the emulator), and the head marker
that rides with the user's call: request counts per call, and attaching from another runtime.

The capture starts only once its call has returned, and it is one worker call, ``changes``:
what changed since the listing the worker answered last (named by its token), the changed files
and the variables dump. The requests logged before it are the call's, the rest the snapshot's.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shlex
from collections.abc import Callable
from typing import Any

from langchain_sandbox.core.restoring import HEAD_VARIABLE
from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import Snapshotter
from langchain_sandbox.testing.runloop_emulator import RecordedRequest, RunloopEmulator

WarmRuntime = Callable[..., contextlib.AbstractAsyncContextManager[SandboxRuntime]]


def _worker_call(request: RecordedRequest) -> tuple[str, dict[str, Any]] | None:
    """``(op, request)`` of a worker call sent with ``execute_async``, else ``None``."""
    if not request.path.endswith("/execute_async"):
        return None
    words = shlex.split(request.json()["command"].rpartition("&& ")[2])
    if len(words) < 5 or words[0] != "python3":
        return None
    op, argument = words[3], words[4]
    return op, json.loads(base64.b64decode(argument))


def _split(requests: list[RecordedRequest]) -> tuple[list[RecordedRequest], list[RecordedRequest]]:
    """(the call's requests, the snapshot's requests)."""
    for index, request in enumerate(requests):
        call = _worker_call(request)
        if call is not None and call[0] == "changes":
            return requests[:index], requests[index:]
    return requests, []


async def test_a_changing_call_costs_two_requests_and_carries_its_head(
    warm_runtime: WarmRuntime, emulator: RunloopEmulator
) -> None:
    async with warm_runtime() as runtime:
        assert runtime.write_behind
        for expected in (1, 2):
            emulator.clear_requests()
            outcome = await runtime.arun_code("t", "n += 1\nn", resumable=True)
            await runtime.aflush()
            call, behind = _split(emulator.requests)
            assert outcome.value.value == str(expected)
            # one execute_async and its long-poll; the head went with the code
            assert [r.path.rsplit("/", 1)[1] for r in call] == ["execute_async", "wait_for_status"]
            sent = _worker_call(call[0])
            assert sent is not None
            assert sent[0] == "code"
            assert sent[1]["head"] == {"name": HEAD_VARIABLE, "value": outcome.record["head"]}
            # behind it: one worker call (its execute_async and long-poll) for the changes,
            # the changed files and the variables; the worker's listing named by its token
            assert [r.path.rsplit("/", 1)[1] for r in behind] == [
                "execute_async",
                "wait_for_status",
            ]
            capture = _worker_call(behind[0])
            assert capture is not None
            assert "variables_max_bytes" in capture[1]
            assert "since" in capture[1]
            assert "known" not in capture[1]
            record = runtime.thread_record("t") or {}
            assert record["snapshot_revision"] == record["revision"] == expected + 1


async def test_inline_snapshots_cost_four_requests_on_the_call(
    warm_runtime: WarmRuntime, emulator: RunloopEmulator
) -> None:
    async with warm_runtime(write_behind=False) as runtime:
        emulator.clear_requests()
        outcome = await runtime.arun_code("t", "n += 1", resumable=True)
        # the call 2, the capture's one worker call 2 (changes, files, variables); no head call
        assert len(emulator.requests) == 4
        assert outcome.record["snapshot_revision"] == outcome.record["revision"] == 2


async def test_a_command_carries_the_head_to_the_interpreter_too(
    warm_runtime: WarmRuntime, provider: RunloopProvider, blob_snapshotter: Snapshotter
) -> None:
    async with warm_runtime() as runtime:
        outcome = await runtime.arun_command("t", "echo hi > hi.txt", resumable=True)
        other = SandboxRuntime(provider, snapshotter=blob_snapshotter)
        try:
            # another process: the devbox's head matches the record, so it attaches (n is there)
            resumed = await other.arun_code(
                "t", "n, open('hi.txt').read()", record=outcome.record, resumable=True
            )
        finally:
            await other.aclose()
    assert resumed.value.value == "(0, 'hi\\n')"
    assert resumed.notices == []


async def test_a_call_nothing_can_resume_from_is_two_requests(
    warm_runtime: WarmRuntime, emulator: RunloopEmulator
) -> None:
    """Outside a graph no snapshot is taken: the call is one ``execute_async`` and its
    long-poll (the head still rides along, for free)."""
    async with warm_runtime() as runtime:
        for expected in (1, 2, 3):
            emulator.clear_requests()
            outcome = await runtime.arun_code("t", "n += 1\nn")
            await runtime.aflush()
            assert outcome.value.value == str(expected)
            assert [r.path.rsplit("/", 1)[1] for r in emulator.requests] == [
                "execute_async",
                "wait_for_status",
            ]
