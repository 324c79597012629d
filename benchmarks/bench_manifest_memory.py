"""What it costs to hold a manifest of a million entries (issue 26), before and after.

A snapshot of N files is stored as a format 2 manifest (a root naming parts of a few hundred
entries each) in a local blob store; then it is loaded twice, each under ``tracemalloc``:

* **before**: as main loaded it until the columns: every part's bytes fetched at once, then
  decoded into a ``dict`` of `FileEntry` objects;
* **after**: `Snapshotter.load_manifest`, which fetches and decodes the parts 16 MiB at a time
  into `CompactFiles` (sorted paths and parallel columns).

For each it prints what the loaded files hold once loaded (``held``) and the most held at once
while loading (``peak``), both above what was allocated before, side by side with the ratio.
Load times are printed for information only (``tracemalloc`` slows both several times).

    .venv/bin/python benchmarks/bench_manifest_memory.py                  # 1,000,000 entries
    .venv/bin/python benchmarks/bench_manifest_memory.py --entries 100000 # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots.manifest import (
    FileEntry,
    Manifest,
    ManifestPart,
    SnapshotLimits,
    encode_part,
    split_paths,
)
from langchain_sandbox.snapshots.manifest_parsing import parse_root
from langchain_sandbox.snapshots.store import BlobStore, digest

_MIB = 1024 * 1024


async def store_snapshot(store: BlobStore, entries: int) -> str:
    """Store a format 2 manifest of ``entries`` files of 4 KiB (a blob each, none packed), a
    hundred per directory; return its ref."""
    paths = [f"d{i // 100:05}/f{i % 100:02}.bin" for i in range(entries)]
    blobs: dict[str, bytes] = {}
    parts: list[ManifestPart] = []
    for run in split_paths(paths):
        data = encode_part(
            (
                path,
                FileEntry(
                    hashlib.sha256(path.encode()).hexdigest(), 4096, 0o644, 1_764_000_000 * 10**9
                ),
            )
            for path in run
        )
        key = digest(data)
        blobs[key] = data
        parts.append(ManifestPart(key, len(data), len(run)))
    root = Manifest(revision=1, created_at=1_764_000_000.0).encode_root(parts)
    blobs[digest(root)] = root
    await store.put_many(blobs)
    return digest(root)


async def load_as_before(store: BlobStore, ref: str) -> dict[str, FileEntry]:
    """The file entries as main held them before the columns: the bytes of every part fetched
    at once, then a ``dict`` of `FileEntry` objects."""
    root = parse_root(await store.get(ref), SnapshotLimits())
    blobs = await store.get_many([part.sha256 for part in root.parts])
    files: dict[str, FileEntry] = {}
    for part in root.parts:
        for path, doc in json.loads(blobs[part.sha256])["files"].items():
            files[path] = FileEntry(**doc)
    return files


async def traced(load: Callable[[], Awaitable[Any]]) -> tuple[Any, int, int, float]:
    """Run ``load`` under tracemalloc: its result, bytes held by the result, peak bytes while
    loading (both above the start) and the seconds it took."""
    gc.collect()
    tracemalloc.start()
    start_bytes = tracemalloc.get_traced_memory()[0]
    began = time.perf_counter()
    result = await load()
    seconds = time.perf_counter() - began
    # The last fetched blobs are released by the thread pool's callbacks a few loop turns later.
    for _ in range(3):
        await asyncio.sleep(0.05)
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, held - start_bytes, peak - start_bytes, seconds


async def measure(entries: int) -> Mapping[str, tuple[int, int, float]]:
    """held, peak and seconds of loading an ``entries``-file manifest, before and after."""
    with tempfile.TemporaryDirectory() as directory:
        store = LocalDirectoryBlobStore(Path(directory), durable=False)
        ref = await store_snapshot(store, entries)
        before, *old = await traced(lambda: load_as_before(store, ref))
        del before
        after, *new = await traced(lambda: Snapshotter(store).load_manifest(ref))
        assert len(after.files) == entries
        return {"before": tuple(old), "after": tuple(new)}  # type: ignore[dict-item]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="files in the manifest")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.entries))
    old, new = figures["before"], figures["after"]
    print(f"a manifest of {args.entries:,} files (tracemalloc, MiB above the start)")
    print(
        f"{'measure':<26}{'before: dict, all parts':>24}{'after: columns':>16}{'after/before':>14}"
    )
    rows = [("held once loaded", 0), ("peak while loading", 1)]
    for name, column in rows:
        was, now = old[column] / _MIB, new[column] / _MIB
        print(f"{name:<26}{was:>20.1f} MiB{now:>12.1f} MiB{now / was:>13.2f}x")
    print(f"{'load time (informative)':<26}{old[2]:>22.1f} s{new[2]:>14.1f} s")


if __name__ == "__main__":
    main()
