"""Small files packed into manifest parts: what they cost on disk, that a damaged pack is found
and costs only its files, that gc keeps live packs and drops dead ones, that snapshots of the
layout before packing (one blob per file) still restore, and that the limits take a
million-entry snapshot."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore

from langchain_sandbox.errors import InvalidInputError, UnsafeArchiveError
from langchain_sandbox.providers.base import Session
from langchain_sandbox.snapshots import (
    BlobStore,
    LangGraphStoreBlobStore,
    LocalDirectoryBlobStore,
    Snapshotter,
)
from langchain_sandbox.snapshots.manifest import (
    PACKED_MAX_BYTES,
    FileEntry,
    Manifest,
    ManifestPart,
    SnapshotLimits,
    encode_part,
    split_paths,
)
from langchain_sandbox.snapshots.manifest_parsing import parse_root
from langchain_sandbox.snapshots.store import digest

SessionFactory = Callable[[], Awaitable[Session]]


def small_files(count: int, prefix: str = "f") -> dict[str, bytes]:
    """``count`` files of 100 distinct bytes each (no two alike, so nothing deduplicates)."""
    return {
        f"{prefix}/{i % 7}/{i:05}.txt": hashlib.sha256(f"{prefix}{i}".encode())
        .hexdigest()[:50]
        .encode()
        .ljust(100, b".")
        for i in range(count)
    }


@pytest.fixture(params=["local", "langgraph"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "local":
        yield LocalDirectoryBlobStore(tmp_path / "blobs", durable=False)
    else:
        yield LangGraphStoreBlobStore(InMemoryStore())


async def blob_keys(store: BlobStore) -> set[str]:
    return {info.key async for info in store.iter_blobs()}


async def garble_byte(store: BlobStore, key: str) -> None:
    """Flip one byte of a stored blob behind the store's back."""
    data = bytearray(await store.get(key))
    data[len(data) // 2] ^= 0x01
    if isinstance(store, LocalDirectoryBlobStore):
        (store.root / key[:2] / key[2:]).write_bytes(bytes(data))
    else:
        await store.delete([key])
        await store.put(key, bytes(data))


def disk_bytes(root: Path) -> int:
    """What the files under ``root`` take on disk (allocated blocks, as ``du`` counts)."""
    total = 0
    for directory, _, names in os.walk(root):
        total += os.lstat(directory).st_blocks * 512
        total += sum(os.lstat(os.path.join(directory, name)).st_blocks * 512 for name in names)
    return total


async def test_small_files_are_packed_and_cost_at_most_four_times_their_bytes(
    new_session: SessionFactory, tmp_path: Path
) -> None:
    store = LocalDirectoryBlobStore(tmp_path / "blobs", durable=False)
    snapshotter = Snapshotter(store)
    session = await new_session()
    files = small_files(3000)
    await session.write_files(files)
    info = await snapshotter.capture(session, revision=1)
    manifest = await snapshotter.load_manifest(info.ref)

    assert all(entry.data == files[path] for path, entry in manifest.files.items())
    # No blob per file: the root, its parts and the variables, nothing else.
    assert await blob_keys(store) == {info.ref, *manifest.blob_keys()}
    assert len(manifest.blob_keys()) <= len(manifest.parts) + 1
    data = sum(map(len, files.values()))
    assert disk_bytes(store.root) <= 4 * data, (disk_bytes(store.root), data)


async def test_packed_and_blob_files_restore_on_both_stores(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    snapshotter = Snapshotter(any_store)
    session = await new_session()
    big = b"B" * (PACKED_MAX_BYTES + 1)
    files = {**small_files(300), "big.bin": big, "edge.bin": b"E" * PACKED_MAX_BYTES, "empty": b""}
    await session.write_files(files)
    first = await snapshotter.capture(session, revision=1)
    manifest = await snapshotter.load_manifest(first.ref)
    assert manifest.files["big.bin"].data is None
    assert digest(big) in await blob_keys(any_store)
    assert manifest.files["edge.bin"].data == b"E" * PACKED_MAX_BYTES

    fresh = await new_session()
    report = await Snapshotter(any_store).restore(fresh, first.ref)
    assert report.files_lost == ()
    assert await fresh.read_files(sorted(files)) == files

    # A one-file change writes that file's part and the root, and a rewind brings it back.
    changed = next(iter(small_files(1)))
    await session.write_files({changed: b"changed"})
    second = await snapshotter.capture(session, base=first.ref, revision=2)
    assert second.blobs_written == 2  # the part packing it and the root; no file blob
    await snapshotter.restore(session, first.ref)
    assert await session.read_files([changed]) == {changed: files[changed]}
    await snapshotter.restore(fresh, second.ref)
    assert await fresh.read_files([changed]) == {changed: b"changed"}


async def test_a_corrupt_pack_is_found_and_costs_only_its_files(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    snapshotter = Snapshotter(any_store)
    session = await new_session()
    files = small_files(600)
    await session.write_files(files)
    await session.run_code("x = 7")
    info = await snapshotter.capture(session, revision=1)
    parts = (await snapshotter.load_manifest(info.ref)).parts
    await garble_byte(any_store, parts[0].sha256)

    with pytest.raises(UnsafeArchiveError, match=parts[0].sha256):
        await Snapshotter(any_store).load_manifest(info.ref)
    fresh = await new_session()
    report = await Snapshotter(any_store).restore(fresh, info.ref)
    assert report.files_unlisted == parts[0].files
    assert report.variables_restored == ("x",)
    kept = sorted(files)[parts[0].files :]
    assert await fresh.read_files(kept) == {path: files[path] for path in kept}
    assert any("could not be restored" in notice for notice in report.notices)
    # The session stays usable, and its next snapshot is whole again.
    assert (await fresh.run_code("x + 1")).value == "8"
    await fresh.write_files({"new.txt": b"new"})
    again = await snapshotter.capture(fresh, base=info.ref, revision=2)
    other = await new_session()
    assert (await snapshotter.restore(other, again.ref)).files_unlisted == 0


def test_a_packed_file_that_does_not_match_its_hash_is_refused() -> None:
    """The part's own hash only proves it is the part its root named: a part written with
    bytes that are not the entry's content (a bug, or a crafted store) is refused too."""
    entry = FileEntry(digest(b"good"), 4, 0o644, 0, data=b"evil")
    data = encode_part([("a.txt", entry)])
    root = Manifest(revision=1).encode_root([ManifestPart(digest(data), len(data), 1)])
    with pytest.raises(UnsafeArchiveError, match="does not match its sha256"):
        parse_root(root).assemble({digest(data): data})
    oversized = json.loads(data)
    oversized["files"]["a.txt"]["data"] = "QUFB" * PACKED_MAX_BYTES
    bad = json.dumps(oversized).encode()
    root = Manifest(revision=1).encode_root([ManifestPart(digest(bad), len(bad), 1)])
    with pytest.raises(UnsafeArchiveError, match="small file"):
        parse_root(root).assemble({digest(bad): bad})


async def test_gc_keeps_live_packs_and_drops_dead_ones(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    snapshotter = Snapshotter(any_store)
    session = await new_session()
    files = small_files(400)
    await session.write_files(files)
    first = await snapshotter.capture(session, revision=1)
    first_parts = {p.sha256 for p in (await snapshotter.load_manifest(first.ref)).parts}
    changed = sorted(files)[-1]
    await session.write_files({changed: b"two"})
    second = await snapshotter.capture(session, base=first.ref, revision=2)
    second_parts = {p.sha256 for p in (await snapshotter.load_manifest(second.ref)).parts}
    shared = first_parts & second_parts
    assert shared  # the packs the change did not touch are shared
    assert first_parts - second_parts  # the one it did was replaced

    report = await snapshotter.collect_garbage([second.ref], grace_seconds=0)
    left = await blob_keys(any_store)
    assert second_parts <= left  # live packs kept, shared ones included
    assert not (first_parts - second_parts) & left  # the dead pack is gone
    assert first.ref not in left
    assert report.deleted_blobs == len(first_parts - second_parts) + 1
    fresh = await new_session()
    await Snapshotter(any_store).restore(fresh, second.ref)
    assert await fresh.read_files(sorted(files)) == {**files, changed: b"two"}

    await snapshotter.collect_garbage([], grace_seconds=0)
    assert await blob_keys(any_store) == set()  # no live snapshot: every pack dropped


async def write_old_layout(store: BlobStore, files: dict[str, bytes]) -> str:
    """A snapshot as the version before packing wrote it: one blob per file, entries without
    ``data``, a format 2 root over its parts. Returns its ref."""
    entries = {
        path: FileEntry(digest(data), len(data), 0o644, 1_700_000_000_000_000_000)
        for path, data in sorted(files.items())
    }
    await store.put_many({digest(data): data for data in files.values()})
    parts: list[ManifestPart] = []
    for run in split_paths(list(entries)):
        data = encode_part((path, entries[path]) for path in run)
        assert b'"data"' not in data
        await store.put(digest(data), data)
        parts.append(ManifestPart(digest(data), len(data), len(run)))
    root = Manifest(revision=1, created_at=1_700_000_000.0, files=entries).encode_root(parts)
    await store.put(digest(root), root)
    return digest(root)


async def test_a_store_of_the_old_layout_still_restores_and_captures_on(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    files = small_files(200, prefix="old")
    ref = await write_old_layout(any_store, files)
    snapshotter = Snapshotter(any_store)
    session = await new_session()
    report = await snapshotter.restore(session, ref)
    assert report.files_lost == ()
    assert await session.read_files(sorted(files)) == files

    # The next capture packs what it reads and keeps the old blobs of what it does not.
    changed = sorted(files)[0]
    await session.write_files({changed: b"new"})
    info = await snapshotter.capture(session, base=ref, revision=2)
    manifest = await snapshotter.load_manifest(info.ref)
    assert manifest.files[changed].data == b"new"
    unchanged = sorted(files)[-1]
    assert manifest.files[unchanged].data is None
    assert digest(files[unchanged]) in manifest.blob_keys()
    await snapshotter.collect_garbage([info.ref], grace_seconds=0)
    fresh = await new_session()
    assert (await Snapshotter(any_store).restore(fresh, info.ref)).files_lost == ()
    assert await fresh.read_files(sorted(files)) == {**files, changed: b"new"}


def test_a_million_entries_fit_the_default_limits() -> None:
    """A synthetic root (its parts are not built: a real one takes seconds and hundreds of
    MiB): the default limits accept 1,000,000 files and directories and refuse one more,
    before any part is fetched."""

    def root(files: int, dirs: int) -> bytes:
        per_part = 500
        parts = [
            ManifestPart(digest(str(i).encode()), 1, min(per_part, files - i))
            for i in range(0, files, per_part)
        ]
        return Manifest(dirs=tuple(f"d{i}" for i in range(dirs))).encode_root(parts)

    limits = SnapshotLimits()
    assert limits.max_files == 1_000_000
    assert sum(part.files for part in parse_root(root(999_000, 1000), limits).parts) == 999_000
    with pytest.raises(UnsafeArchiveError, match="max_files"):
        parse_root(root(999_001, 1000), limits)


async def test_a_workspace_over_max_files_is_refused_with_what_to_do(
    new_session: SessionFactory, store: LocalDirectoryBlobStore
) -> None:
    session = await new_session()
    await session.write_files(small_files(30))
    with pytest.raises(InvalidInputError, match="max_files"):
        await Snapshotter(store, limits=SnapshotLimits(max_files=20)).capture(session)
    assert (await session.run_code("1 + 1")).value == "2"
