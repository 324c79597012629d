"""Reattaching to a sandbox that outlives its process (E2B, through the real SDK against the local
E2B emulator): the record's head is checked against the head the sandbox itself carries."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


@pytest.fixture
def e2b_options() -> Iterator[dict[str, Any]]:
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    api_key = "e2b_" + secrets.token_hex(20)
    emulator = E2BEmulator(api_key=api_key)
    emulator.start()
    try:
        yield {"api_key": api_key, "api_url": emulator.url, "sandbox_url": emulator.url}
    finally:
        emulator.close()


def _runtime(options: dict[str, Any], blobs: Path) -> SandboxRuntime:
    return SandboxRuntime(
        "e2b",
        provider_options=options,
        snapshotter=Snapshotter(LocalDirectoryBlobStore(blobs)),
        persist="every_call",
    )


def test_another_process_attaches_to_the_live_sandbox_when_heads_match(
    e2b_options: dict[str, Any], tmp_path: Path
) -> None:
    blobs = tmp_path / "blobs"
    # The first runtime stands for a worker that handled a step and then went away; its
    # sandbox keeps running at the provider.
    first = _runtime(e2b_options, blobs)
    second = _runtime(e2b_options, blobs)
    third = _runtime(e2b_options, blobs)
    try:
        before = first.run_code("t", "value = 7").record
        record = first.run_code("t", "import threading\nguard = threading.Lock()").record
        sandbox_id = record["session"]["sandbox_id"]

        # Same head: the second runtime attaches; memory is intact, unpicklable objects too.
        attached = second.run_code("t", "print(value, type(guard).__name__)", record=record)
        assert attached.value.stdout.split() == ["7", "lock"]
        assert not attached.value.notices, "attached, not restored"
        assert attached.record["session"]["sandbox_id"] == sandbox_id

        # The sandbox has moved on, so an older record must not attach to it: its state comes
        # back from its snapshot into a new sandbox.
        older = third.run_code("t", "print(value, 'guard' in globals())", record=before)
        assert older.value.stdout.split() == ["7", "False"]
        assert any("restored" in n for n in older.value.notices)
        assert older.record["session"]["sandbox_id"] != sandbox_id
    finally:
        for runtime in (first, second, third):
            runtime.close()


def test_attach_keeps_state_without_any_snapshot(
    e2b_options: dict[str, Any], tmp_path: Path
) -> None:
    """persist="never": the live remote sandbox is the only copy of the state, and attaching
    to it (heads match) is how another process continues the thread."""
    first = SandboxRuntime("e2b", provider_options=e2b_options, persist="never")
    second = SandboxRuntime("e2b", provider_options=e2b_options, persist="never")
    try:
        record = first.run_code("t", "total = 40").record
        assert record.get("snapshot") is None
        outcome = second.run_code("t", "total + 2", record=record)
        assert outcome.value.value == "42"
        assert not outcome.value.notices
    finally:
        first.close()
        second.close()


def test_runloop_devbox_is_attached_by_another_runtime(tmp_path: Path) -> None:
    """The same through the real Runloop SDK against the Runloop emulator."""
    from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

    with RunloopEmulator() as emulator:
        first = SandboxRuntime(
            emulator.provider(),
            snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "b")),
            persist="every_call",
        )
        second = SandboxRuntime(
            emulator.provider(),
            snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "b")),
            persist="every_call",
        )
        try:
            record = first.run_code("t", "x = 5").record
            outcome = second.run_code("t", "x + 1", record=record)
            assert outcome.value.value == "6"
            assert not outcome.value.notices
            assert outcome.record["session"]["sandbox_id"] == record["session"]["sandbox_id"]
        finally:
            first.close()
            second.close()
