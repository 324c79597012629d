"""More threads than live sandboxes: the cap spills the least recently used idle session and its
thread's next call restores it. Prints a table; asserts nothing.

    .venv/bin/python benchmarks/bench_spill.py [--threads 8,64,256,1000] [--calls 5] [--small-cap 64]

For each N, N threads on one runtime with the default ``max_sessions`` and on one without a cap,
one after the other. Each thread makes two turns of ``--calls`` calls (a server's agent turn makes
several tool calls in a row), the first turn of every thread before any second turn, 32 threads at
a time, outside any graph (under the default policy no call snapshots). Every call checks the
thread's variables (a counter, a function) and its file; a wrong answer or a notice counts as
lost. For N up to 256 above ``--small-cap``, also with that cap, where each turn's
first call finds its session spilled. Also: memory per live session (USS), and what a spill and the
restore after it cost.

Goal: no thread loses state; throughput within 2x of the uncapped run.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

_CONCURRENCY = 32
_DEFAULT_CAP = inspect.signature(SandboxRuntime).parameters["max_sessions"].default


def _runtime(root: Path, name: str, max_sessions: int | None) -> SandboxRuntime:
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / name},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / f"{name}-blobs", durable=False)),
        max_sessions=max_sessions,
        idle_ttl=None,
    )


def _uss_per_session(runtime: SandboxRuntime) -> float:
    total = 0
    for proc in psutil.Process().children(recursive=True):
        try:
            total += proc.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / max(len(runtime.live_sessions()), 1) / 2**20


async def _threads(runtime: SandboxRuntime, n: int, calls: int) -> tuple[int, int, float, float]:
    """Runs the workload; returns (calls, calls that lost state, seconds, MiB per session)."""
    gate = asyncio.Semaphore(_CONCURRENCY)
    lost = 0
    done = 0
    counts = dict.fromkeys(range(n), 0)

    async def _turn(i: int, first: bool) -> None:
        nonlocal lost, done
        thread = f"thread-{i}"
        async with gate:
            if first:
                await runtime.awrite_files(thread, {"owner.txt": str(i).encode()})
                setup = f"count = 0\ndef owner():\n    return {i}"
                lost += not (await runtime.arun_code(thread, setup)).value.ok
                done += 2
            for _ in range(calls):
                counts[i] += 1
                code = "count += 1\nprint(owner(), count, open('owner.txt').read())"
                result = (await runtime.arun_code(thread, code)).value
                lost += result.stdout != f"{i} {counts[i]} {i}\n" or bool(result.notices)
                done += 1

    start = time.perf_counter()
    await asyncio.gather(*(_turn(i, True) for i in range(n)))
    uss = await asyncio.to_thread(_uss_per_session, runtime)
    await asyncio.gather(*(_turn(i, False) for i in range(n)))
    return done, lost, time.perf_counter() - start, uss


async def _spill_cost(root: Path) -> tuple[float, float, float]:
    """Median ms of: a call that finds its session live, one whose session was spilled (create
    and restore included), and the spill itself (the capture before the close)."""
    runtime = _runtime(root, "cost", 1)
    live: list[float] = []
    restored: list[float] = []
    spills: list[float] = []
    engine = runtime._engine  # benchmark-only: time the spill the pool calls
    spill = engine.spill

    async def _timed_spill(thread: object) -> bool:
        start = time.perf_counter()
        try:
            return await spill(thread)  # type: ignore[arg-type]
        finally:
            spills.append((time.perf_counter() - start) * 1000)

    runtime._pool.spill = _timed_spill
    for thread in ("a", "b"):
        await runtime.arun_code(thread, "count = 0")
        await runtime.awrite_files(thread, {f"f{i}.txt": b"x" * 100 for i in range(20)})
    for _ in range(10):
        for thread in ("a", "b"):
            start = time.perf_counter()
            await runtime.arun_code(thread, "count += 1")
            restored.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            await runtime.arun_code(thread, "count += 1")
            live.append((time.perf_counter() - start) * 1000)
    await runtime.aclose()
    return statistics.median(live), statistics.median(restored), statistics.median(spills)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="8,64,256,1000")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--small-cap", type=int, default=64)
    args = parser.parse_args()
    sizes = [int(s) for s in args.threads.split(",")]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, local provider (bubblewrap)")
    print(f"default max_sessions={_DEFAULT_CAP}; {_CONCURRENCY} threads at a time")
    with tempfile.TemporaryDirectory(prefix="bench-spill-") as tmp:
        root = Path(tmp)
        os.environ["LANGCHAIN_SANDBOX_HOME"] = str(root / "home")
        warm = _runtime(root, "warm-up", None)  # builds the sandbox environment, once
        await warm.arun_code("warm-up", "pass")
        await warm.aclose()
        print(
            f"\n{'threads':>7} {'cap':>9} {'calls':>7} {'lost':>5} {'seconds':>8} "
            f"{'calls/s':>8} {'MiB/session':>12} {'uncapped/this':>14}"
        )
        for n in sizes:
            rates: dict[str, float] = {}
            caps: list[int | None] = [None, _DEFAULT_CAP]
            if args.small_cap < n <= 256:
                caps.append(args.small_cap)  # what spilling costs when it happens
            for cap in caps:
                runtime = _runtime(root, f"n{n}-{cap}", cap)
                done, lost, seconds, uss = await _threads(runtime, n, args.calls)
                await runtime.aclose()
                label = "none" if cap is None else str(cap)
                rates[label] = done / seconds
                ratio = "" if cap is None else f"{rates['none'] / rates[label]:.2f}x"
                print(
                    f"{n:>7} {label:>9} {done:>7} {lost:>5} {seconds:>8.2f} "
                    f"{done / seconds:>8.0f} {uss:>12.1f} {ratio:>14}"
                )
        live, restored, spill = await _spill_cost(root)
    print(
        f"\nA thread's call, 20 files of 100 B and a counter (median ms): session live "
        f"{live:.2f}; session spilled (new sandbox + restore) {restored:.2f}; "
        f"the spill itself (capture before close) {spill:.2f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
