"""Runloop's ``list_changes`` is one worker call (``changes``): the worker compares the workspace
with the host's listing, named by a token when it answered that listing itself, and answers the
changed entries, the changed files' contents and the variables dump. Request counts come from the
emulator's log; the guest side's care with files that vanish or change while read is checked on
a real directory."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox.providers.base import ChangeListing, FileInfo
from langchain_sandbox.providers.guest import changes as guest_changes
from langchain_sandbox.providers.guest import command_worker as _worker
from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.providers.worker_session import WORKER_DIR
from langchain_sandbox.snapshots import Snapshotter
from langchain_sandbox.testing.runloop_emulator import RecordedRequest, RunloopEmulator

_SMALL = b"hello\n"
_BINARY = bytes(range(256)) * 8
_LARGE = b"x" * (_worker.INLINE_DUMP_BYTES + 1)  # over the bundling cap: read by the caller
_CHANGES = (
    "printf 'hello\\n' > small.txt"
    " && python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 8)' > blob.bin"
    f" && head -c {len(_LARGE)} /dev/zero | tr '\\0' x > large.bin"
)
_MAX = 1 << 24


def _ends(requests: list[RecordedRequest]) -> list[str]:
    return sorted(request.path.rsplit("/", 1)[1] for request in requests)


def _worker_requests(emulator: RunloopEmulator) -> list[dict[str, Any]]:
    """The requests of the ``changes`` calls logged (inline ones: base64 JSON on the command)."""
    found = []
    for request in emulator.requests:
        if request.path.endswith("/execute_async"):
            words = request.json()["command"].split()
            if words[-2] == "changes" and not words[-1].startswith("@"):
                found.append(json.loads(base64.b64decode(words[-1])))
    return found


def _applied(known: Mapping[str, FileInfo], listing: ChangeListing) -> dict[str, FileInfo]:
    updated = {path: info for path, info in known.items() if path not in listing.gone}
    updated.update((info.path, info) for info in listing.changed)
    return updated


async def test_one_worker_call_answers_changes_contents_and_variables(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        assert (await session.run_code("x = 1")).ok
        assert (await session.run_command(_CHANGES)).ok
        first = await session.list_changes({}, max_bytes=_MAX, variables_max_bytes=_MAX)
        assert {"small.txt", "blob.bin", "large.bin"} <= {info.path for info in first.changed}
        assert dict(first.contents) == {"small.txt": _SMALL, "blob.bin": _BINARY}
        assert first.variables is not None
        assert first.variables.saved == ("x",)
        known = _applied({}, first)

        assert (await session.run_command("printf 'changed\\n' > small.txt")).ok
        emulator.clear_requests()
        second = await session.list_changes(
            known, max_bytes=_MAX, variables_max_bytes=_MAX, since=first.cursor
        )
        assert _ends(emulator.requests) == ["execute_async", "wait_for_status"]
        [request] = _worker_requests(emulator)
        assert "known" not in request
        assert request["since"]
        assert [info.path for info in second.changed] == ["small.txt"]
        assert dict(second.contents) == {"small.txt": b"changed\n"}
        assert second.variables is not None
        assert second.variables.saved == ("x",)


async def test_a_listing_the_worker_lost_is_sent_again(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        assert (await session.run_command("printf a > a.txt")).ok
        first = await session.list_changes({}, max_bytes=_MAX)
        known = _applied({}, first)
        lost = f"rm {WORKER_DIR}/{_worker.LISTING_NAME} && printf b > b.txt"
        assert (await session.run_command(lost)).ok
        emulator.clear_requests()
        listing = await session.list_changes(known, max_bytes=_MAX, since=first.cursor)
        assert [info.path for info in listing.changed] == ["b.txt"]
        assert [sorted(request) for request in _worker_requests(emulator)] == [
            ["max_bytes", "max_file_bytes", "path", "since"],
            ["known", "max_bytes", "max_file_bytes", "path"],
        ]


async def test_a_listing_over_the_inline_limit_costs_one_upload(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        assert (await session.run_command("printf a > a.txt")).ok
        # a listing without the worker's cursor (another process's, say), too large to inline
        known = {f"old/{n:05d}": FileInfo(f"old/{n:05d}", 1, n) for n in range(3000)}
        emulator.clear_requests()
        listing = await session.list_changes(known, max_bytes=_MAX)
        assert _ends(emulator.requests) == ["execute_async", "upload_file", "wait_for_status"]
        assert set(listing.gone) == set(known)
        assert "a.txt" in {info.path for info in listing.changed}


async def test_a_large_variables_dump_is_downloaded(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        big = _worker.INLINE_DUMP_BYTES + 1000
        assert (await session.run_code(f"blob = b'y' * {big}")).ok
        emulator.clear_requests()
        listing = await session.list_changes({}, max_bytes=_MAX, variables_max_bytes=2 * big)
        assert _ends(emulator.requests) == ["download_file", "execute_async", "wait_for_status"]
        assert listing.variables is not None
        assert listing.variables.saved == ("blob",)
        assert len(listing.variables.data) > big


async def test_a_fifo_neither_hangs_the_capture_nor_is_in_the_snapshot(
    provider: RunloopProvider, blob_snapshotter: Snapshotter
) -> None:
    session = await provider.create()
    try:
        await blob_snapshotter.capture(session)
        assert (await session.run_command("mkfifo pipe && echo hi > plain.txt")).ok
        info = await asyncio.wait_for(blob_snapshotter.capture(session), timeout=120)
    finally:
        await session.close()
    assert info.omitted == {}  # never listed: it has no content to keep
    assert info.files == 1


def _guest_changes(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, after_listing: Callable[[], None]
) -> dict[str, Any]:
    """The sandbox-side comparison on a real directory, ``after_listing`` run between its
    listing and its reads."""
    scan = guest_changes.scan

    def scan_then(*args: Any) -> dict[str, list[Any]]:
        listing = scan(*args)
        after_listing()
        return listing

    monkeypatch.setattr(guest_changes, "scan", scan_then)
    answer, _ = guest_changes.changes(str(workspace), {}, max_bytes=1 << 20, max_file_bytes=1 << 20)
    return answer


def test_a_file_that_vanishes_after_the_listing_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gone.txt").write_text("soon gone")
    (tmp_path / "kept.txt").write_text("kept")
    answer = _guest_changes(tmp_path, monkeypatch, (tmp_path / "gone.txt").unlink)
    assert [entry[0] for entry in answer["changed"]] == ["kept.txt"]
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
    [entry] = answer["changed"]
    assert entry[:3] == ["grown.txt", len("much longer now"), 2_000_000_000]
    assert answer["contents"] == {"grown.txt": "bXVjaCBsb25nZXIgbm93"}


def test_a_fifo_swapped_in_after_the_listing_is_not_opened_for_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    swapped = tmp_path / "swapped"
    swapped.write_text("a file while listed")

    def swap() -> None:
        swapped.unlink()
        os.mkfifo(swapped)

    answer = _guest_changes(tmp_path, monkeypatch, swap)
    assert answer == {"changed": [], "gone": [], "contents": {}}
