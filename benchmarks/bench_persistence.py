"""What it costs to persist a sandbox's workspace at every graph step, and to restore it.

Three ways to keep a workspace as durable as a graph's checkpoints, measured side by side on real
local sandboxes, in one run:

* ``snapshots``: this package's content-addressed, incremental snapshots
  (:class:`langchain_sandbox.snapshots.Snapshotter` over a durable local blob store): a step
  stores the files that changed, plus a small manifest;
* ``full tar``: a tar of the whole workspace written to disk (fsynced) at every step;
* ``state blob``: the whole workspace serialized into the graph state and written by a real
  checkpointer (``InMemorySaver`` and ``SqliteSaver``) at every step, as langchain-sandbox does
  with its session bytes.

Every approach persists and restores the files *and* the Python variables. For each workspace size
(1 MB files) and each amount of changed bytes per step, it prints the median time to persist one
step, the bytes each step adds to storage, and the time to restore the latest state into a fresh
sandbox, with ratios against ``snapshots``. Targets from issue #4: persist after a
one-file change in a 100 MB workspace under 50 ms; restore of that workspace into a fresh local
sandbox under 1 s.

    .venv/bin/python benchmarks/bench_persistence.py            # 10 MB and 100 MB workspaces
    .venv/bin/python benchmarks/bench_persistence.py --sizes 10 --steps 3   # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import pickle
import statistics
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from langchain_sandbox.providers.base import Session
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

MB = 1024 * 1024
FILE_BYTES = MB
_VARIABLES_MEMBER = ".variables.pickle"


@dataclass
class Measure:
    """One approach on one workload."""

    approach: str
    persist_ms: float
    stored_per_step: int
    restore_ms: float


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def _fill(session: Session, total_mb: int) -> list[str]:
    paths = [f"data/part{i:04d}.bin" for i in range(total_mb * MB // FILE_BYTES)]
    for start in range(0, len(paths), 16):
        await session.write_files({p: os.urandom(FILE_BYTES) for p in paths[start : start + 16]})
    # Some variables too: every approach persists and restores them.
    await session.run_code("import json\nrows = [{'i': i, 'sq': i * i} for i in range(20000)]\n")
    return paths


async def _change(session: Session, paths: list[str], step: int, changed: int) -> None:
    """Rewrite ``changed`` bytes: whole 1 MB files, or part of one file for smaller changes."""
    if changed < FILE_BYTES:
        target = paths[step % len(paths)]
        old = (await session.read_files([target]))[target]
        await session.write_files({target: os.urandom(changed) + old[changed:]})
        return
    count = changed // FILE_BYTES
    chosen = [paths[(step * count + i) % len(paths)] for i in range(count)]
    await session.write_files({p: os.urandom(FILE_BYTES) for p in chosen})


async def _read_state(session: Session) -> tuple[dict[str, bytes], bytes]:
    """The whole state, as the baselines keep it: every file, and the variables."""
    files = [i.path for i in await session.list_files(".", recursive=True) if i.kind == "file"]
    return await session.read_files(files), (await session.dump_variables()).data


def _timed_ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


async def _steps(
    session: Session,
    paths: list[str],
    changed: int,
    steps: int,
    persist: Callable[[int], Awaitable[None]],
    stored: Callable[[], int],
) -> tuple[float, int]:
    """Median persist time and mean stored bytes per step over ``steps`` changed steps."""
    await persist(0)
    times: list[float] = []
    before = stored()
    for step in range(1, steps + 1):
        await _change(session, paths, step, changed)
        start = time.perf_counter()
        await persist(step)
        times.append(_timed_ms(start))
    return statistics.median(times), (stored() - before) // steps


async def bench_snapshots(
    provider: LocalProvider, work: Path, size_mb: int, changed: int, steps: int
) -> Measure:
    store = LocalDirectoryBlobStore(work / "blobs")
    snapshotter = Snapshotter(store)
    session = await provider.create()
    paths = await _fill(session, size_mb)
    ref: list[str] = []

    async def persist(step: int) -> None:
        info = await snapshotter.capture(session, base=ref[-1] if ref else None, revision=step)
        ref.append(info.ref)

    persist_ms, per_step = await _steps(
        session, paths, changed, steps, persist, lambda: _dir_bytes(store.root)
    )
    await session.close()
    fresh = await provider.create()
    start = time.perf_counter()
    await snapshotter.restore(fresh, ref[-1])
    restore_ms = _timed_ms(start)
    await fresh.close()
    return Measure("snapshots", persist_ms, per_step, restore_ms)


async def bench_full_tar(
    provider: LocalProvider, work: Path, size_mb: int, changed: int, steps: int
) -> Measure:
    directory = work / "tars"
    directory.mkdir()
    session = await provider.create()
    paths = await _fill(session, size_mb)

    async def persist(step: int) -> None:
        files, variables = await _read_state(session)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for path, data in [*files.items(), (_VARIABLES_MEMBER, variables)]:
                member = tarfile.TarInfo(path)
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
        _write_durably(directory / f"step{step}.tar", buffer.getvalue())

    persist_ms, per_step = await _steps(
        session, paths, changed, steps, persist, lambda: _dir_bytes(directory)
    )
    await session.close()
    fresh = await provider.create()
    start = time.perf_counter()
    with tarfile.open(directory / f"step{steps}.tar") as archive:
        restored: dict[str, bytes] = {}
        for member in archive.getmembers():
            extracted = archive.extractfile(member)
            if extracted is not None:
                restored[member.name] = extracted.read()
    variables = restored.pop(_VARIABLES_MEMBER)
    await fresh.write_files(restored)
    await fresh.load_variables(variables)
    restore_ms = _timed_ms(start)
    await fresh.close()
    return Measure("full tar", persist_ms, per_step, restore_ms)


async def bench_state_blob(
    provider: LocalProvider,
    work: Path,
    size_mb: int,
    changed: int,
    steps: int,
    saver: BaseCheckpointSaver[Any],
    label: str,
    stored: Callable[[], int],
) -> Measure:
    session = await provider.create()
    paths = await _fill(session, size_mb)
    config: dict[str, Any] = {"configurable": {"thread_id": label, "checkpoint_ns": ""}}

    async def persist(step: int) -> None:
        nonlocal config
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"sandbox_session": pickle.dumps(await _read_state(session))}
        checkpoint["channel_versions"] = {"sandbox_session": step + 1}
        config = saver.put(config, checkpoint, {"step": step}, {"sandbox_session": step + 1})  # type: ignore[arg-type]

    persist_ms, per_step = await _steps(session, paths, changed, steps, persist, stored)
    await session.close()
    fresh = await provider.create()
    start = time.perf_counter()
    latest = saver.get_tuple({"configurable": {"thread_id": label, "checkpoint_ns": ""}})
    assert latest is not None
    files, variables = pickle.loads(latest.checkpoint["channel_values"]["sandbox_session"])
    await fresh.write_files(files)
    await fresh.load_variables(variables)
    restore_ms = _timed_ms(start)
    await fresh.close()
    return Measure(label, persist_ms, per_step, restore_ms)


def _memory_saver_bytes(saver: InMemorySaver) -> Callable[[], int]:
    def count() -> int:
        total = 0
        for namespaces in saver.storage.values():
            for checkpoints in namespaces.values():
                for checkpoint, metadata, _parent in checkpoints.values():
                    total += len(checkpoint[1]) + len(metadata[1])
        total += sum(len(blob[1]) for blob in saver.blobs.values())
        return total

    return count


async def run(sizes: list[int], changes: list[int], steps: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-persistence-") as root:
        provider = LocalProvider(base_dir=Path(root) / "sandboxes")
        print(
            f"{'workspace':>9} {'changed':>8}  {'approach':<12} {'persist ms':>10} "
            f"{'stored/step':>12} {'restore ms':>10}   persist x   stored x"
        )
        try:
            for size_mb in sizes:
                for changed in changes:
                    await _workload(provider, Path(root), size_mb, changed, steps)
        finally:
            await provider.aclose()


async def _workload(
    provider: LocalProvider, root: Path, size_mb: int, changed: int, steps: int
) -> None:
    work = Path(tempfile.mkdtemp(dir=root))
    results = [
        await bench_snapshots(provider, work, size_mb, changed, steps),
        await bench_full_tar(provider, work, size_mb, changed, steps),
    ]
    memory = InMemorySaver()
    results.append(
        await bench_state_blob(
            provider,
            work,
            size_mb,
            changed,
            steps,
            memory,
            "blob+memory",
            _memory_saver_bytes(memory),
        )
    )
    database = work / "checkpoints.db"
    with SqliteSaver.from_conn_string(str(database)) as sqlite:
        results.append(
            await bench_state_blob(
                provider,
                work,
                size_mb,
                changed,
                steps,
                sqlite,
                "blob+sqlite",
                lambda: _dir_bytes(work) - _dir_bytes(work / "blobs") - _dir_bytes(work / "tars"),
            )
        )
    base = results[0]
    for measure in results:
        print(
            f"{size_mb:>6} MB {_size(changed):>8}  {measure.approach:<12} "
            f"{measure.persist_ms:>10.1f} {_size(measure.stored_per_step):>12} "
            f"{measure.restore_ms:>10.1f}   "
            f"{measure.persist_ms / base.persist_ms:>8.1f}x "
            f"{measure.stored_per_step / max(base.stored_per_step, 1):>9.1f}x"
        )


def _size(count: int) -> str:
    if count >= MB:
        return f"{count / MB:.1f} MB"
    if count >= 1024:
        return f"{count / 1024:.0f} KB"
    return f"{count} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100", help="workspace sizes in MB (1 MB files)")
    parser.add_argument("--changes", default="4096,1048576,10485760", help="bytes changed per step")
    parser.add_argument("--steps", type=int, default=5, help="measured steps per workload")
    args = parser.parse_args()
    asyncio.run(
        run(
            [int(s) for s in args.sizes.split(",")],
            [int(c) for c in args.changes.split(",")],
            args.steps,
        )
    )


if __name__ == "__main__":
    main()
