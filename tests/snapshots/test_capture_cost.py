"""A capture (and a rewind) costs what changed: unchanged files cost no read, no hash and no
store lookup, one change rewrites one manifest part, a rewind writes only what differs; old
one-blob manifests still load. Costs are counted (store calls, blobs written), never timed."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path

import pytest

from langchain_sandbox.errors import SnapshotNotFoundError
from langchain_sandbox.providers.base import Session
from langchain_sandbox.snapshots import (
    BlobInfo,
    BlobStore,
    LocalDirectoryBlobStore,
    Snapshotter,
    local_store,
)
from langchain_sandbox.snapshots import _knowledge as snapshotter
from langchain_sandbox.snapshots.manifest import FileEntry, Manifest
from langchain_sandbox.snapshots.store import digest

SessionFactory = Callable[[], Awaitable[Session]]
FILES = 600
KEPT = b"kept" * 200
CONTENT_A, CONTENT_B = b"content a" * 100, b"content b" * 100


class CountingBlobStore(BlobStore):
    """A real local store that records every key a snapshotter looks up, writes or fetches."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.looked_up: list[str] = []
        self.written: dict[str, bytes] = {}
        self.fetched: list[str] = []

    def reset(self) -> None:
        self.looked_up.clear()
        self.written.clear()
        self.fetched.clear()

    async def get(self, key: str) -> bytes:
        self.fetched.append(key)
        return await self.inner.get(key)

    async def put(self, key: str, data: bytes) -> None:
        self.written[key] = data
        await self.inner.put(key, data)

    async def missing(self, keys: Iterable[str]) -> set[str]:
        keys = list(keys)
        self.looked_up.extend(keys)
        return await self.inner.missing(keys)

    async def delete(self, keys: Iterable[str]) -> None:
        await self.inner.delete(keys)

    def iter_blobs(self) -> AsyncIterator[BlobInfo]:
        return self.inner.iter_blobs()


@pytest.fixture
def counting_store(store: LocalDirectoryBlobStore) -> CountingBlobStore:
    return CountingBlobStore(store)


async def workspace_state(session: Session) -> dict[str, bytes]:
    """Every file of the workspace with its bytes."""
    listing = await session.list_files(".", recursive=True)
    return await session.read_files([info.path for info in listing if info.kind == "file"])


def _workspace() -> dict[str, bytes]:
    return {f"d{i % 7}/f{i:04d}.txt": os.urandom(100) for i in range(FILES)}


def _parts(store: CountingBlobStore) -> list[bytes]:
    """Manifest parts among the blobs written (canonical parts start with their files)."""
    return [data for data in store.written.values() if data.startswith(b'{"files":')]


async def test_unchanged_files_cost_no_read_no_hash_and_no_store_lookup(
    new_session: SessionFactory, counting_store: CountingBlobStore
) -> None:
    snapshotter = Snapshotter(counting_store)
    session = await new_session()
    files = _workspace()
    await session.write_files(files)
    first = await snapshotter.capture(session, revision=1)
    unchanged = {digest(data) for path, data in files.items() if path != "d3/f0003.txt"}

    counting_store.reset()
    changed = os.urandom(100)
    await session.write_files({"d3/f0003.txt": changed})
    second = await snapshotter.capture(session, base=first.ref, revision=2)

    assert second.bytes_read == 100
    assert not unchanged & set(counting_store.looked_up)
    assert not unchanged & set(counting_store.written)
    # The changed file is small: packed into the one part written, with no blob to look up.
    assert [part for part in _parts(counting_store) if base64.b64encode(changed) in part]
    # The base is the snapshot the session already knows: it is not even fetched, nor are the
    # variables, dumped again with the same bytes as the blob this snapshotter stored.
    assert counting_store.fetched == []
    fresh = await new_session()
    await snapshotter.restore(fresh, second.ref)
    assert await workspace_state(fresh) == await workspace_state(session)


async def test_one_change_rewrites_one_manifest_part(
    new_session: SessionFactory, counting_store: CountingBlobStore
) -> None:
    snapshotter = Snapshotter(counting_store)
    session = await new_session()
    await session.write_files(_workspace())
    first = await snapshotter.capture(session, revision=1)
    parts_in_full = len(_parts(counting_store))
    assert parts_in_full >= 3  # 600 files are split (about 128 per part)

    for change in (
        {"d3/f0003.txt": os.urandom(100)},  # an edit
        {"d3/new.txt": b"added"},  # a new file
    ):
        counting_store.reset()
        await session.write_files(change)
        info = await snapshotter.capture(session, base=first.ref, revision=2)
        assert len(_parts(counting_store)) == 1
        assert info.ref in counting_store.written
        first = info
    counting_store.reset()
    await session.remove_files(["d5/f0005.txt"])
    info = await snapshotter.capture(session, base=first.ref, revision=3)
    # Removing a file rewrites its part (and merges it with the next one if it was the last path
    # of its part): never more than two.
    assert 1 <= len(_parts(counting_store)) <= 2

    manifest = await Snapshotter(counting_store.inner).load_manifest(info.ref)
    assert len(manifest.parts) == parts_in_full
    assert "d5/f0005.txt" not in manifest.files
    assert manifest.files["d3/new.txt"].size == 5
    assert len(manifest.files) == FILES


async def test_old_one_blob_manifests_still_load_restore_and_serve_as_base(
    new_session: SessionFactory, store: LocalDirectoryBlobStore, snapshotter: Snapshotter
) -> None:
    """A snapshot written before manifests were split (format 1) restores, and a capture against
    it reads only what changed and writes the new, split format."""
    contents = {"a.txt": b"alpha", "dir/b.txt": b"beta" * 100}
    source = await new_session()
    await source.write_files(contents)
    listing = {info.path: info for info in await source.list_files(".", recursive=True)}
    await asyncio.sleep(0.05)  # the entries must be older than the racy window to be trusted
    old = Manifest(
        revision=4,
        created_at=time.time(),
        files={
            path: FileEntry(digest(data), len(data), 0o644, listing[path].mtime_ns)
            for path, data in contents.items()
        },
    )
    encoded = old.encode()
    assert b'"format":1' in encoded
    for data in [*contents.values(), encoded]:
        await store.put(digest(data), data)
    ref = digest(encoded)

    target = await new_session()
    report = await snapshotter.restore(target, ref)
    assert report.files_written == 2
    assert await target.read_files(list(contents)) == contents

    # Another process (a snapshotter that never saw the session) captures against the old ref.
    await source.write_files({"a.txt": b"ALPHA"})
    info = await Snapshotter(store).capture(source, base=ref, revision=5)
    assert info.bytes_read == 5  # only the changed file; the old manifest gave the others
    again = await Snapshotter(store).load_manifest(info.ref)
    assert again.parts  # written split
    assert {path: entry.sha256 for path, entry in again.files.items()} == {
        "a.txt": digest(b"ALPHA"),
        "dir/b.txt": digest(contents["dir/b.txt"]),
    }


async def test_gc_keeps_every_part_of_a_live_snapshot(
    new_session: SessionFactory, store: LocalDirectoryBlobStore, snapshotter: Snapshotter
) -> None:
    session = await new_session()
    await session.write_files(_workspace())
    first = await snapshotter.capture(session, revision=1)
    await session.write_files({"d1/f0001.txt": b"changed"})
    second = await snapshotter.capture(session, base=first.ref, revision=2)

    needed = await snapshotter.referenced_blobs(second.ref)
    manifest = await snapshotter.load_manifest(second.ref)
    assert {part.sha256 for part in manifest.parts} <= needed
    # The root, the parts (the 100-byte files are packed into them) and the variables.
    assert len(needed) == 1 + len(manifest.parts) + 1

    report = await snapshotter.collect_garbage([second.ref], grace_seconds=0)
    assert report.deleted_blobs >= 2  # the first root and the part the change replaced
    remaining = {info.key async for info in store.iter_blobs()}
    assert remaining == needed
    fresh = await new_session()
    await snapshotter.restore(fresh, second.ref)
    assert await workspace_state(fresh) == await workspace_state(session)


async def test_a_blob_gc_removed_under_a_live_session_is_written_again(
    new_session: SessionFactory,
    store: LocalDirectoryBlobStore,
    counting_store: CountingBlobStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session's knowledge of the store is not trusted forever: a gc in another process
    (another Snapshotter) that removed its blobs is noticed once the trust period is over, and
    a gc through the same snapshotter is noticed at once."""
    live = Snapshotter(counting_store)
    session = await new_session()
    # Files too big to be packed: their blobs are what gc removes.
    await session.write_files({"keep.txt": KEPT, "other.txt": b"other" * 200})
    first = await live.capture(session, revision=1)

    # gc through the same snapshotter, with nothing live: the next capture stores everything again.
    await live.collect_garbage([], grace_seconds=0)
    second = await live.capture(session, base=first.ref, revision=2)
    await live.restore(await new_session(), second.ref)

    # gc from elsewhere: trusted until STORE_RECHECK_SECONDS have passed, then checked again.
    await Snapshotter(store).collect_garbage([], grace_seconds=0)
    monkeypatch.setattr(snapshotter, "STORE_RECHECK_SECONDS", 0.0)
    counting_store.reset()
    third = await live.capture(session, base=second.ref, revision=3)
    assert digest(KEPT) in counting_store.looked_up
    report = await live.restore(await new_session(), third.ref)
    assert report.files_written == 2


async def test_a_session_whose_blob_went_bad_is_checked_again(
    new_session: SessionFactory, store: LocalDirectoryBlobStore, counting_store: CountingBlobStore
) -> None:
    """A blob found corrupt by a restore makes every live session's next capture ask the store
    again instead of reusing what it believed stored, and read the damaged file again."""
    live = Snapshotter(counting_store)
    session = await new_session()
    await session.write_files({"a.txt": CONTENT_A, "b.txt": CONTENT_B})  # blobs, not packed
    first = await live.capture(session, revision=1)
    blob = store.root / digest(CONTENT_A)[:2] / digest(CONTENT_A)[2:]
    blob.write_bytes(b"tampered!")
    report = await live.restore(await new_session(), first.ref)
    assert report.files_lost == ("a.txt",)

    counting_store.reset()
    second = await live.capture(session, base=first.ref, revision=2)
    assert digest(CONTENT_B) in counting_store.looked_up
    assert second.bytes_read == len(CONTENT_A)
    assert blob.read_bytes() == CONTENT_A
    with pytest.raises(SnapshotNotFoundError):
        await live.load_manifest(digest(b"no such snapshot"))


async def test_a_first_capture_of_many_small_files_streams_in_batches(
    new_session: SessionFactory, store: LocalDirectoryBlobStore
) -> None:
    """Thousands of small files are read and stored a batch at a time (memory holds about two
    batches), not in one read of the whole workspace."""
    session = await new_session()
    files = {f"many/f{i:05d}.txt": f"small file {i}".encode() for i in range(2500)}
    await session.write_files(files)
    read_sizes: list[int] = []
    read = session.read_files

    async def counted(paths: list[str]) -> dict[str, bytes]:
        read_sizes.append(len(paths))
        return await read(paths)

    session.read_files = counted  # type: ignore[method-assign]
    info = await Snapshotter(store).capture(session)
    assert info.files == 2500
    assert sum(read_sizes) == 2500
    assert len(read_sizes) >= 3
    assert max(read_sizes) <= 1000


async def test_the_local_store_makes_a_batch_durable_with_two_syncs_not_two_per_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[Path] = []
    monkeypatch.setattr(local_store, "_syncfs", lambda: syncs.append)
    store = LocalDirectoryBlobStore(tmp_path / "blobs")  # durable
    blobs = {digest(str(i).encode()): str(i).encode() for i in range(500)}
    await store.put_many(blobs)
    assert len(syncs) == 2  # the temporary files, then the renames
    assert await store.missing(blobs) == set()
    assert await store.get_many(list(blobs)[:3]) == dict(list(blobs.items())[:3])
    assert not [p for p in (tmp_path / "blobs").rglob(".tmp-*")]
    await store.put_many(blobs)  # all there already: nothing written, nothing synced
    assert len(syncs) == 2


async def test_a_capture_that_finds_nothing_changed_writes_nothing_and_returns_its_base(
    new_session: SessionFactory, counting_store: CountingBlobStore
) -> None:
    snapshotter = Snapshotter(counting_store)
    session = await new_session()
    await session.write_files({"a.txt": b"one", "empty/.keep": b""})
    await session.remove_files(["empty/.keep"])
    first = await snapshotter.capture(session, revision=1)

    counting_store.reset()
    again = await snapshotter.capture(session, base=first.ref, revision=2)
    assert counting_store.written == {}
    assert (again.ref, again.parent, again.revision) == (first.ref, first.ref, 1)
    assert (again.blobs_written, again.bytes_written) == (0, 0)

    # A change after it is captured as usual, against the reused ref.
    await session.write_files({"a.txt": b"two"})
    changed = await snapshotter.capture(session, base=again.ref, revision=3)
    assert changed.ref != first.ref
    assert changed.ref in counting_store.written
    # An empty directory removed is a change too, though no file moved.
    await session.remove_files(["empty"])
    no_dir = await snapshotter.capture(session, base=changed.ref, revision=4)
    assert no_dir.ref != changed.ref

    fresh = await new_session()
    await snapshotter.restore(fresh, no_dir.ref)
    assert await workspace_state(fresh) == {"a.txt": b"two"}


async def test_an_unchanged_workspace_against_another_base_is_still_captured(
    new_session: SessionFactory, counting_store: CountingBlobStore
) -> None:
    snapshotter = Snapshotter(counting_store)
    session = await new_session()
    await session.write_files({"a.txt": b"one"})
    first = await snapshotter.capture(session, revision=1)
    await session.write_files({"a.txt": b"two"})
    second = await snapshotter.capture(session, base=first.ref, revision=2)
    # Captured against the older base (a record from before the last capture), the same files
    # still need a snapshot of their own: the base holds other contents.
    counting_store.reset()
    third = await snapshotter.capture(session, base=first.ref, revision=3)
    assert third.ref not in (first.ref, second.ref)
    assert third.ref in counting_store.written


async def test_a_capture_whose_session_knowledge_does_not_add_up_captures_everything(
    new_session: SessionFactory, counting_store: CountingBlobStore
) -> None:
    """The entries kept per session are patched, not rebuilt; if they ever lost a file (a bug),
    the capture notices and takes a full one instead of writing a snapshot without it."""
    snapshotter_ = Snapshotter(counting_store)
    session = await new_session()
    files = _workspace()
    await session.write_files(files)
    first = await snapshotter_.capture(session, revision=1)
    known = snapshotter_._known[session]
    lost = dict(known.entries)
    del lost["d3/f0003.txt"]
    snapshotter_._known[session] = dataclasses.replace(known, entries=lost)

    await session.write_files({"d0/f0000.txt": b"changed"})
    second = await snapshotter_.capture(session, base=first.ref, revision=2)

    assert second.files == FILES
    fresh = await new_session()
    await snapshotter_.restore(fresh, second.ref)
    assert await workspace_state(fresh) == await workspace_state(session)


# ----------------------------------------------------------------- rewind
# A rewind of a live session costs what differs: it writes only the files whose content differs
# from the target, fetches only their blobs and asks the store only about blobs not already
# confirmed for that session; what a restore guarantees still holds.
async def _mtimes(session: Session) -> dict[str, int]:
    return {
        info.path: info.mtime_ns
        for info in await session.list_files(".", recursive=True)
        if info.kind == "file"
    }


async def test_a_rewind_writes_only_the_changed_file_and_removes_extra_ones(
    new_session: SessionFactory, counting_store: CountingBlobStore
) -> None:
    snapshotter = Snapshotter(counting_store)
    session = await new_session()
    files = {f"d{i % 7}/f{i:04d}.txt": os.urandom(100) for i in range(FILES)}
    await session.write_files(files)
    first = await snapshotter.capture(session, revision=1)
    await session.write_files({"d3/f0003.txt": os.urandom(100), "d9/extra.txt": b"extra"})
    await snapshotter.capture(session, base=first.ref, revision=2)
    before = await _mtimes(session)

    counting_store.reset()
    report = await snapshotter.restore(session, first.ref)

    assert report.complete
    assert (report.files_written, report.paths_removed) == (1, 1)
    assert await workspace_state(session) == files
    after = await _mtimes(session)
    # Unchanged files were not touched: their mtimes are as before the rewind.
    assert {p: m for p, m in after.items() if p != "d3/f0003.txt"} == {
        p: m for p, m in before.items() if p in files and p != "d3/f0003.txt"
    }
    unchanged = {digest(data) for path, data in files.items() if path != "d3/f0003.txt"}
    # No file blob is fetched or looked up: the written file is packed into a part this
    # session already holds, and the blobs it confirmed are not looked up again.
    assert not unchanged & set(counting_store.fetched)
    assert not unchanged & set(counting_store.looked_up)
    assert digest(files["d3/f0003.txt"]) not in counting_store.fetched


async def test_a_rewind_undoes_changes_the_snapshotter_never_saw(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    session = await new_session()
    files = {f"d{i % 5}/f{i:03d}.txt": os.urandom(50) for i in range(200)}
    await session.write_files(files)
    first = await snapshotter.capture(session, revision=1)
    # Changed by the sandbox itself after the capture: edited, removed, added, a dir replaced.
    result = await session.run_command(
        "echo edited > d1/f001.txt && rm d2/f002.txt && mkdir -p new && echo x > new/y "
        "&& rm -r d4 && echo file > d4"
    )
    assert result.exit_code == 0

    report = await snapshotter.restore(session, first.ref)

    assert report.complete
    assert await workspace_state(session) == files
    # And the session's knowledge is right afterwards: the next capture reads nothing and holds
    # the snapshot's contents.
    again = await snapshotter.capture(session, base=first.ref, revision=2)
    assert again.bytes_read == 0
    captured = await Snapshotter(snapshotter.store).load_manifest(again.ref)
    assert {path: entry.sha256 for path, entry in captured.files.items()} == {
        path: digest(data) for path, data in files.items()
    }


async def test_a_rewind_still_names_a_damaged_blob(
    new_session: SessionFactory, store: LocalDirectoryBlobStore, snapshotter: Snapshotter
) -> None:
    session = await new_session()
    # Files too big to be packed: each has a blob that can be damaged.
    files = {f"d{i % 3}/f{i:03d}.txt": os.urandom(600) for i in range(100)}
    await session.write_files(files)
    first = await snapshotter.capture(session, revision=1)
    await session.write_files({"d1/f001.txt": os.urandom(600)})
    await snapshotter.capture(session, base=first.ref, revision=2)
    key = digest(files["d1/f001.txt"])
    (store.root / key[:2] / key[2:]).write_bytes(b"damaged")

    report = await snapshotter.restore(session, first.ref)

    assert report.files_lost == ("d1/f001.txt",)
    assert any("d1/f001.txt" in notice for notice in report.notices)
    assert not report.complete
    state = await workspace_state(session)
    assert "d1/f001.txt" not in state
    assert state == {path: data for path, data in files.items() if path != "d1/f001.txt"}
