"""A capture in a devbox the snapshotter knows lists the workspace and reads the changed files in
one worker call (``changes``) instead of a listing plus one ``download_file`` per file: request
counts against the emulator, the snapshot equal to the one the old path takes, and the guest
side's care with files that vanish, change or are not regular files."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox.providers.base import Session
from langchain_sandbox.providers.runloop import RunloopProvider, _worker
from langchain_sandbox.providers.runloop.provider import RunloopSession
from langchain_sandbox.snapshots import Snapshotter
from langchain_sandbox.testing.runloop_emulator import RecordedRequest, RunloopEmulator

_SMALL = b"hello\n"
_BINARY = bytes(range(256)) * 8
_LARGE = b"x" * (_worker.INLINE_DUMP_BYTES + 1)  # over the bundling cap: downloaded as before
_CHANGES = (
    "printf 'hello\\n' > small.txt"
    " && python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 8)' > blob.bin"
    f" && head -c {len(_LARGE)} /dev/zero | tr '\\0' x > large.bin"
)


def _ends(requests: list[RecordedRequest]) -> list[str]:
    return sorted(request.path.rsplit("/", 1)[1] for request in requests)


async def _changed_workspace(session: Session, snapshotter: Snapshotter) -> None:
    """Capture once (the snapshotter then knows the session), then change three files: a small
    text file, a binary file, and one over the bundling cap."""
    await snapshotter.capture(session)
    assert (await session.run_command(_CHANGES)).ok


async def test_one_call_lists_and_reads_the_changed_files(
    provider: RunloopProvider,
    emulator: RunloopEmulator,
    blob_snapshotter: Snapshotter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contents: dict[str, dict[str, bytes]] = {}
    counts: dict[str, list[str]] = {}
    refs: dict[str, str] = {}
    for path in ("bundled", "old"):
        if path == "old":  # the provider-neutral default: list, then read file by file
            monkeypatch.setattr(RunloopSession, "list_changes", Session.list_changes)
        session = await provider.create()
        try:
            await _changed_workspace(session, blob_snapshotter)
            emulator.clear_log()
            info = await blob_snapshotter.capture(session)
            counts[path] = _ends(emulator.requests)
            refs[path] = info.ref
        finally:
            await session.close()
        fresh = await provider.create()
        try:
            await blob_snapshotter.restore(fresh, info.ref)
            listing = await fresh.list_files(".", recursive=True)
            names = [entry.path for entry in listing if not entry.is_dir]
            contents[path] = await fresh.read_files(names)
        finally:
            await fresh.close()
    # listing + changed files 2 requests, variables 2, the file over the cap 1 download
    assert counts["bundled"] == [
        "download_file",
        "execute_async",
        "execute_async",
        "wait_for_status",
        "wait_for_status",
    ]
    # before: listing 2, variables 2, and one download per changed file
    assert counts["old"] == [
        "download_file",
        "download_file",
        "download_file",
        "execute_async",
        "execute_async",
        "wait_for_status",
        "wait_for_status",
    ]
    assert contents["bundled"] == contents["old"]
    assert contents["bundled"]["small.txt"] == _SMALL
    assert contents["bundled"]["blob.bin"] == _BINARY
    assert contents["bundled"]["large.bin"] == _LARGE
    old = await blob_snapshotter.load_manifest(refs["old"])
    new = await blob_snapshotter.load_manifest(refs["bundled"])
    assert {p: e.sha256 for p, e in new.files.items()} == {
        p: e.sha256 for p, e in old.files.items()
    }


async def test_a_fifo_does_not_hang_the_capture(
    provider: RunloopProvider, blob_snapshotter: Snapshotter
) -> None:
    session = await provider.create()
    try:
        await blob_snapshotter.capture(session)
        assert (await session.run_command("mkfifo pipe && echo hi > plain.txt")).ok
        info = await asyncio.wait_for(blob_snapshotter.capture(session), timeout=120)
    finally:
        await session.close()
    assert info.omitted == {
        "pipe": "could not be read: not a regular file (a FIFO, socket or device) or not readable"
    }
    assert info.files == 1


def _guest_changes(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, after_listing: Callable[[], None]
) -> dict[str, Any]:
    """The worker's ``changes`` on a real directory, ``after_listing`` run between its listing
    and its reads."""
    monkeypatch.setattr(_worker, "WORKSPACE", str(workspace))
    listing = _worker.list_directory

    def list_then(request: dict[str, Any]) -> dict[str, Any]:
        answer = listing(request)
        after_listing()
        return answer

    monkeypatch.setattr(_worker, "list_directory", list_then)
    return _worker.list_changes(
        {"path": str(workspace), "known": {}, "max_bytes": 1 << 20, "max_file_bytes": 1 << 20}
    )


def test_a_file_that_vanishes_after_the_listing_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gone.txt").write_text("soon gone")
    (tmp_path / "kept.txt").write_text("kept")
    answer = _guest_changes(tmp_path, monkeypatch, (tmp_path / "gone.txt").unlink)
    assert [entry["path"] for entry in answer["entries"]] == ["kept.txt"]
    assert list(answer["contents"]) == ["kept.txt"]


def test_a_file_that_changes_after_the_listing_is_listed_as_it_is_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grown = tmp_path / "grown.txt"
    grown.write_text("short")

    def grow() -> None:
        grown.write_text("much longer now")
        os.utime(grown, ns=(1, 2_000_000_000))

    answer = _guest_changes(tmp_path, monkeypatch, grow)
    [entry] = answer["entries"]
    assert (entry["size"], entry["mtime_ns"]) == (len("much longer now"), 2_000_000_000)
    assert answer["contents"] == {"grown.txt": "bXVjaCBsb25nZXIgbm93"}
