"""A loaded manifest holds its files in columns and is assembled a batch of parts at a time
(issue 26): it reads back the same entries, refuses what it refused, and holds a fraction of
the memory of a ``dict`` of entries, with a peak bounded by the batch, not the manifest."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import tracemalloc
from pathlib import Path

import pytest

from langchain_sandbox.errors import UnsafeArchiveError
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter, _knowledge
from langchain_sandbox.snapshots._compact_files import CompactFiles
from langchain_sandbox.snapshots.manifest import (
    FileEntry,
    Manifest,
    ManifestPart,
    encode_part,
    split_paths,
)
from langchain_sandbox.snapshots.store import digest


def entries_of(count: int) -> dict[str, FileEntry]:
    """Blob files, with a packed one, a hard link and a sparse file among them."""
    files = {
        f"d{i // 50:04}/f{i % 50:02}.bin": FileEntry(
            hashlib.sha256(str(i).encode()).hexdigest(), 4096 + i, 0o644, 10**18 + i
        )
        for i in range(count)
    }
    files["a/packed.txt"] = FileEntry(digest(b"tiny"), 4, 0o600, 5, data=b"tiny")
    files["a/sparse.bin"] = FileEntry(digest(b""), 0, 0o755, 6, sparse=True)
    files["a/zlink.bin"] = FileEntry(digest(b""), 0, 0o755, 6, link="a/sparse.bin")
    return dict(sorted(files.items()))


async def stored(store: LocalDirectoryBlobStore, files: dict[str, FileEntry]) -> str:
    blobs: dict[str, bytes] = {}
    parts: list[ManifestPart] = []
    for run in split_paths(list(files)):
        data = encode_part((path, files[path]) for path in run)
        blobs[digest(data)] = data
        parts.append(ManifestPart(digest(data), len(data), len(run)))
    root = Manifest(revision=3, created_at=1.0, dirs=("empty",)).encode_root(parts)
    blobs[digest(root)] = root
    await store.put_many(blobs)
    return digest(root)


async def test_a_loaded_manifest_reads_back_every_entry_from_its_columns(tmp_path: Path) -> None:
    files = entries_of(2000)
    store = LocalDirectoryBlobStore(tmp_path, durable=False)
    manifest = await Snapshotter(store).load_manifest(await stored(store, files))
    loaded = manifest.files
    assert isinstance(loaded, CompactFiles)
    assert loaded == files
    assert list(loaded) == list(files)
    assert list(loaded.items()) == [*files.items()]
    assert list(loaded.values()) == list(files.values())
    assert loaded["a/packed.txt"].data == b"tiny"
    assert loaded["a/zlink.bin"].link == "a/sparse.bin"
    assert loaded["a/sparse.bin"].sparse
    assert "a/nope" not in loaded
    assert 5 not in loaded
    assert loaded.get("a/nope") is None
    with pytest.raises(KeyError):
        loaded["zzz"]
    assert manifest.total_bytes == sum(e.size for e in files.values())
    assert manifest.blob_keys() >= {e.sha256 for e in files.values() if e.data is None}
    assert digest(b"tiny") not in manifest.blob_keys()


async def test_parts_fetched_in_small_batches_give_the_same_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = entries_of(3000)
    store = LocalDirectoryBlobStore(tmp_path, durable=False)
    ref = await stored(store, files)
    whole = await Snapshotter(store).load_manifest(ref)
    requests: list[int] = []
    get_many = store.get_many

    async def counted(keys):  # type: ignore[no-untyped-def]
        keys = list(keys)
        requests.append(len(keys))
        return await get_many(keys)

    monkeypatch.setattr(store, "get_many", counted)
    monkeypatch.setattr(_knowledge, "_ASSEMBLY_BATCH_BYTES", 8 * 1024)
    batched = await Snapshotter(store).load_manifest(ref)
    assert batched == whole
    assert batched.files == files
    assert len(requests) > 10
    assert max(requests) < len(whole.parts) / 5


async def test_a_file_below_a_file_and_an_unstorable_mtime_are_still_refused(
    tmp_path: Path,
) -> None:
    store = LocalDirectoryBlobStore(tmp_path, durable=False)
    entry = FileEntry(digest(b""), 0, 0o644, 1)
    below = await stored(store, {"a": entry, "a/b": entry})
    with pytest.raises(UnsafeArchiveError, match="lies below the file"):
        await Snapshotter(store).load_manifest(below)
    huge = await stored(store, {"x": FileEntry(digest(b""), 0, 0o644, 2**64)})
    with pytest.raises(UnsafeArchiveError, match="mtime_ns"):
        await Snapshotter(store).load_manifest(huge)


def _traced(load):  # type: ignore[no-untyped-def]
    """(result, bytes held by it, peak bytes while loading), above the start."""

    async def run():  # type: ignore[no-untyped-def]
        gc.collect()
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        result = await load()
        # The thread pool's callbacks release the last fetched blobs a few loop turns later.
        for _ in range(3):
            await asyncio.sleep(0.05)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return result, held - start, peak - start

    return run()


async def test_columns_hold_a_fraction_of_a_dict_and_the_peak_is_bounded_by_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = entries_of(20_000)
    store = LocalDirectoryBlobStore(tmp_path, durable=False)
    ref = await stored(store, files)
    part_bytes = sum(part.size for part in (await Snapshotter(store).load_manifest(ref)).parts)
    del files
    monkeypatch.setattr(_knowledge, "_ASSEMBLY_BATCH_BYTES", 64 * 1024)
    manifest, held, peak = await _traced(lambda: Snapshotter(store).load_manifest(ref))

    async def as_dict():  # type: ignore[no-untyped-def]
        return dict(manifest.files.items())

    _, dict_held, _ = await _traced(as_dict)
    # Columns: about a third of a dict of entries (measured 0.3x at 20,000 entries).
    assert held < 0.5 * dict_held
    # The transient cost of loading is a batch of parts, not every part at once.
    assert peak - held < 0.35 * part_bytes
