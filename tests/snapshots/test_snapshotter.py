"""Capture and restore on real local sandboxes: round trips, incremental cost, differences only."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Awaitable, Callable

import pytest

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.base import Session
from langchain_sandbox.snapshots import (
    LocalDirectoryBlobStore,
    SnapshotLimits,
    Snapshotter,
)
from langchain_sandbox.snapshots._listing import safe_mode

SessionFactory = Callable[[], Awaitable[Session]]

MB = 1024 * 1024


async def workspace_state(session: Session) -> dict[str, tuple[str, int, str]]:
    """path -> (kind, permission bits, sha256 of content) of every entry of the workspace."""
    listing = await session.list_files(".", recursive=True)
    files = [info.path for info in listing if info.kind == "file"]
    contents = await session.read_files(files) if files else {}
    return {
        info.path: (
            info.kind,
            info.mode & 0o777 if info.kind == "file" else 0,
            hashlib.sha256(contents[info.path]).hexdigest() if info.kind == "file" else "",
        )
        for info in listing
    }


async def check(session: Session, command: str) -> str:
    result = await session.run_command(command)
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def test_round_trip_into_a_fresh_session(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    source = await new_session()
    await source.write_files(
        {
            "notes.txt": "héllo\nworld\n".encode(),
            "data/raw/blob.bin": bytes(range(256)) * 40,
            "data/empty.txt": b"",
            "bin/run.sh": b"#!/bin/sh\necho ran\n",
        }
    )
    await check(
        source,
        "chmod 755 bin/run.sh && chmod 600 notes.txt && mkdir -p empty/nested"
        " && ln -s notes.txt link && ln -s /etc outside",
    )
    result = await source.run_code(
        "import threading\n"
        "answer = 42\n"
        "rows = [{'a': 1}, {'b': 2}]\n"
        "def double(x):\n    return 2 * x\n"
        "lock = threading.Lock()\n"
    )
    assert result.ok, result
    info = await snapshotter.capture(source, revision=5)
    assert info.revision == 5
    assert info.files == 4
    assert (
        info.bytes_total
        == info.bytes_read
        == sum(
            len(d)
            for d in ("héllo\nworld\n".encode(), bytes(range(256)) * 40, b"#!/bin/sh\necho ran\n")
        )
    )
    assert set(info.omitted) == {"link", "outside"}
    assert info.variables_skipped == ("lock",)
    assert {"answer", "rows", "double", "threading"} <= set(info.variables_saved)

    target = await new_session()
    report = await snapshotter.restore(target, info.ref)

    expected = await workspace_state(source)
    del expected["link"], expected["outside"]
    assert await workspace_state(target) == expected
    assert (await check(target, "./bin/run.sh")) == "ran\n"
    assert report.revision == 5
    assert report.files_written == 4
    assert report.paths_removed == 0
    assert report.variables_lost == ("lock",)
    assert report.notices[0] == "Restored the workspace to revision 5 (4 files, 10.0 KB)."
    assert any("Variables lock could not be restored" in n for n in report.notices)
    assert any("link (symlink)" in n and "outside (symlink)" in n for n in report.notices)
    value = await target.run_code("double(answer), rows")
    assert value.value == "(84, [{'a': 1}, {'b': 2}])"


async def test_one_changed_file_in_a_100_mb_workspace_stores_about_that_file(
    new_session: SessionFactory,
    store: LocalDirectoryBlobStore,
    snapshotter: Snapshotter,
    store_bytes: Callable[[], int],
) -> None:
    session = await new_session()
    for start in range(0, 100, 20):
        await session.write_files(
            {f"data/part{i:03d}.bin": os.urandom(MB) for i in range(start, start + 20)}
        )
    first = await snapshotter.capture(session, revision=1)
    assert first.files == 100
    assert first.bytes_read == 100 * MB
    assert 100 * MB <= store_bytes() < 101 * MB

    ref = first.ref
    for step in range(2, 6):
        await session.write_files({f"data/part{step:03d}.bin": os.urandom(MB)})
        before = store_bytes()
        info = await snapshotter.capture(session, base=ref, revision=step)
        grown = store_bytes() - before
        # The changed file, plus a manifest and the variables blob (a few KB).
        assert MB <= grown < MB + 64 * 1024, grown
        assert info.bytes_written == grown
        # The changed file is read; so, at most, is the previous step's file when it changed
        # within the racy-timestamp window of the last listing.
        assert MB <= info.bytes_read <= 2 * MB
        ref = info.ref

    # A new Snapshotter (a new process) with only the base manifest to go by reads nothing more.
    fresh = Snapshotter(store)
    await session.write_files({"data/part099.bin": os.urandom(MB)})
    info = await fresh.capture(session, base=ref, revision=9)
    assert MB <= info.bytes_read <= 2 * MB
    assert info.files == 100


async def test_restore_onto_a_changed_session_writes_only_differences(
    new_session: SessionFactory, snapshotter: Snapshotter, tmp_path: os.PathLike[str]
) -> None:
    session = await new_session()
    await session.write_files({f"keep/{i}.txt": f"file {i}".encode() * 1000 for i in range(20)})
    await session.write_files(
        {"edit.txt": b"original", "gone.txt": b"will be deleted", "x/y.txt": b"y"}
    )
    await check(session, "chmod 700 keep/3.txt && mkdir -p emptydir")
    snap = await snapshotter.capture(session, revision=1)
    wanted = await workspace_state(session)

    await session.write_files({"edit.txt": b"changed", "new.txt": b"new", "new/deep/f": b"f"})
    await check(
        session,
        "rm gone.txt && rm -r x && echo notadir > x && rmdir emptydir && touch emptydir"
        " && ln -s /etc/passwd keep/evil && ln -s keep keep-link && chmod 644 keep/3.txt",
    )
    report = await snapshotter.restore(session, snap.ref)

    # Equal again; removing the link to keep/ removed the link, not keep/'s files.
    assert await workspace_state(session) == wanted
    assert report.files_written == 3  # edit.txt, gone.txt, x/y.txt
    assert report.files_unchanged == 20
    # new.txt, new/, x (file), emptydir (file), keep/evil, keep-link
    assert report.paths_removed == 6


async def test_restore_is_idempotent_and_a_second_restore_writes_nothing(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    source = await new_session()
    await source.write_files({f"f{i}": os.urandom(1000) for i in range(10)})
    snap = await snapshotter.capture(source)
    target = await new_session()
    first = await snapshotter.restore(target, snap.ref)
    second = await snapshotter.restore(target, snap.ref)
    assert first.files_written == 10
    assert second.files_written == 0
    assert second.paths_removed == 0
    # The restored session is then captured incrementally: nothing has to be read again, and
    # the same workspace and variables give the same manifest content (only the time differs).
    again = await snapshotter.capture(target, base=snap.ref)
    assert again.bytes_read == 0
    assert await workspace_state(target) == await workspace_state(source)
    restored = await snapshotter.load_manifest(again.ref)
    original = await snapshotter.load_manifest(snap.ref)
    assert {p: e.sha256 for p, e in restored.files.items()} == {
        p: e.sha256 for p, e in original.files.items()
    }


async def test_capture_leaves_out_files_over_the_limit_and_refuses_a_workspace_too_large(
    new_session: SessionFactory, store: LocalDirectoryBlobStore
) -> None:
    session = await new_session()
    await session.write_files({"small.txt": b"x" * 10, "big.bin": b"y" * 5000})
    snapshotter = Snapshotter(store, limits=SnapshotLimits(max_file_bytes=1000))
    info = await snapshotter.capture(session)
    assert info.files == 1
    assert "big.bin" in info.omitted
    assert any("big.bin (5000 bytes, over the 1000-byte file limit)" in n for n in info.notices)

    crowded = Snapshotter(store, limits=SnapshotLimits(max_files=5))
    await session.write_files({f"many/{i}": b"" for i in range(10)})
    with pytest.raises(InvalidInputError, match="max_files"):
        await crowded.capture(session)
    # The session is untouched and usable.
    assert (await session.run_code("1 + 1")).value == "2"


def test_restored_modes_are_made_safe() -> None:
    assert safe_mode(0o4755) == 0o755
    assert safe_mode(0o777) == 0o755
    assert safe_mode(0o666) == 0o644
    assert safe_mode(0o000) == 0o600
    assert safe_mode(0o611) == 0o600
    assert safe_mode(0o2750) == 0o750


async def test_special_files_and_unportable_names_are_reported_not_fatal(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    session = await new_session()
    await session.write_files({"plain.txt": b"plain"})
    await check(session, "mkfifo pipe && printf x > 'back\\slash'")
    info = await snapshotter.capture(session)
    assert info.files == 1
    # A FIFO is kept as a FIFO (no content to read), never named as left out.
    assert "pipe" not in info.omitted
    assert (await snapshotter.load_manifest(info.ref)).fifos == ("pipe",)
    # The name is shown with the character the manifest refuses escaped, and the reason is said.
    assert info.omitted == {
        "back%5Cslash": "name cannot be restored portably: it contains a backslash "
        "(snapshot paths are POSIX); shown with %XX escapes"
    }
    assert any("back%5Cslash (name cannot be restored portably" in n for n in info.notices)

    # Restoring onto the session leaves the name it cannot address, and says so.
    report = await snapshotter.restore(session, info.ref)
    assert any("back\\slash (could not be removed)" in n for n in report.notices)
    fresh = await new_session()
    await snapshotter.restore(fresh, info.ref)
    assert await fresh.read_files(["plain.txt"]) == {"plain.txt": b"plain"}


async def test_restore_larger_than_the_memory_budget_streams_in_batches(
    new_session: SessionFactory, store: LocalDirectoryBlobStore
) -> None:
    """Two passes (verify, then fetch-verify-write) in small batches give the same workspace."""
    source = await new_session()
    await source.write_files({f"d{i % 3}/f{i}.bin": os.urandom(3000 + i) for i in range(30)})
    small = Snapshotter(store, limits=SnapshotLimits(batch_bytes=10_000, restore_memory_bytes=1))
    info = await small.capture(source)
    target = await new_session()
    report = await small.restore(target, info.ref)
    assert report.files_written == 30
    assert await workspace_state(target) == await workspace_state(source)

    # A blob damaged in the store is caught by the first pass: its file is not written (and
    # named), every other file is.
    victim = (await small.load_manifest(info.ref)).files["d1/f7.bin"].sha256
    blob = store.root / victim[:2] / victim[2:]
    blob.write_bytes(bytes(len(blob.read_bytes())))
    other = await new_session()
    report = await small.restore(other, info.ref)
    assert report.files_lost == ("d1/f7.bin",)
    expected = await workspace_state(source)
    del expected["d1/f7.bin"]
    assert await workspace_state(other) == expected


def test_the_racy_window_widens_to_coarse_provider_timestamps() -> None:
    from langchain_sandbox.snapshots._knowledge import RACY_WINDOW_NS
    from langchain_sandbox.snapshots._knowledge import racy_window as _racy_window

    ns = 1_764_460_000_123_456_789
    assert _racy_window([ns, ns + 7]) == RACY_WINDOW_NS
    assert _racy_window([ns // 1000 * 1000]) == RACY_WINDOW_NS  # microseconds (E2B's datetimes)
    seconds = 1_764_460_000 * 1_000_000_000
    assert _racy_window([seconds, seconds + 2_000_000_000]) == 1_000_000_000
    assert _racy_window([]) == 1_000_000_000


async def test_a_same_size_rewrite_within_one_timestamp_tick_is_not_missed(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    """A rewrite that keeps size and mtime (as one within a filesystem timestamp tick does) is
    still captured when the mtime was too close to the capture to be trusted."""
    session = await new_session()
    await session.write_files({"state.txt": b"AAAA"})
    # Pin the mtime a little in the future of the host clock: as racy as a same-tick write.
    stamp = "$(($(date +%s) + 30))"
    await check(session, f"touch -m -d @{stamp} state.txt && stat -c %Y state.txt > .stamp")
    first = await snapshotter.capture(session)
    pinned = (await session.read_files([".stamp"]))[".stamp"].decode().strip()
    await session.write_files({"state.txt": b"BBBB"})
    await check(session, f"touch -m -d @{pinned} state.txt")
    second = await snapshotter.capture(session, base=first.ref)
    assert second.bytes_read >= 4
    restored = await new_session()
    await snapshotter.restore(restored, second.ref)
    assert (await restored.read_files(["state.txt"]))["state.txt"] == b"BBBB"
