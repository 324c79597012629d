"""Benchmark of the local provider: what a session costs to start and what one call costs.

Run it with ``python benchmarks/bench_local.py`` (``--quick`` for fewer repetitions). It prints one
table of medians, measured in this run, and the ratios the design cares about:

* cold start: ``LocalProvider.create()`` until the sandboxed worker answers, next to the floor
  any cold start has here: a bare ``python -I -S -c pass`` in the same bubblewrap sandbox;
* warm round trip: ``x += 1`` through ``LocalSession.run_code`` (the agent's per-call cost);
* both again without the seccomp filter (``syscall_filter="none"``), measured interleaved with
  the filtered ones, so the filter's cost shows in the same run;
* the same work as one ``python -c`` subprocess per call (what a stateless tool pays);
* the same work as ``exec()`` in this process (the floor: no isolation, no IPC);
* the two isolation levels side by side (``isolation="bubblewrap"`` and ``"gvisor"``), interleaved
  with a fresh ``python -c`` per call: cold start as an agent pays it (``create()`` and the first
  ``run_code``) and the warm round trip;
* a recursive ``list_files`` of a workspace of 100 files / 100 MB (what an incremental snapshot
  pays to find changes).

No assertions: numbers on a shared machine vary; the table is for people.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

from langchain_sandbox.providers.local import LocalProvider, LocalSession


async def _time_async(operation: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await operation()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _time_sync(operation: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        operation()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _warm_round_trips(
    sessions: dict[str, LocalSession], rounds: int
) -> dict[str, list[float]]:
    """``run_code("x += 1")`` in each session, interleaved round by round, after a warm-up."""
    warm: dict[str, list[float]] = {name: [] for name in sessions}
    for each in sessions.values():
        await each.run_code("x = 0")
        for _ in range(200):
            await each.run_code("x += 1")
    for _ in range(rounds):
        for name, each in sessions.items():
            started = time.perf_counter()
            await each.run_code("x += 1")
            warm[name].append((time.perf_counter() - started) * 1000)
    return warm


async def _levels_side_by_side(base_dir: str, scale: float) -> dict[str, list[float]]:
    """Cold start (create + first call) and warm round trip under each isolation level, and a
    fresh ``python -c`` per call, measured interleaved so the ratios compare the same moments."""
    levels = {
        level: LocalProvider(base_dir=f"{base_dir}/{level}", isolation=level)
        for level in ("bubblewrap", "gvisor")
    }
    for made in levels.values():
        await (await made.create()).close()  # interpreter facts are cached per provider

    def python_c() -> None:
        subprocess.run([sys.executable, "-c", "x = 0; x += 1"], check=True)

    cold: dict[str, list[float]] = {level: [] for level in levels}
    per_call: list[float] = []
    for _ in range(int(20 * scale) or 3):
        for level, made in levels.items():
            started = time.perf_counter()
            fresh = await made.create()
            await fresh.run_code("x = 0")
            cold[level].append((time.perf_counter() - started) * 1000)
            await fresh.close()  # not timed: the measurement is create to first answer
        per_call.extend(_time_sync(python_c, 1))
    sessions = {level: await made.create() for level, made in levels.items()}
    warm = await _warm_round_trips(sessions, int(2000 * scale))
    for each in sessions.values():
        await each.close()
    rows = {}
    for level in levels:
        rows[f"{level}: cold start, create() + first run_code"] = cold[level]
        rows[f"{level}: warm round trip run_code('x += 1')"] = warm[level]
    rows["python -c 'x = 0; x += 1', interleaved with the cold starts"] = per_call
    return rows


async def main(quick: bool) -> None:
    scale = 0.2 if quick else 1.0
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as base_dir:
        provider = LocalProvider(base_dir=base_dir)
        unfiltered = LocalProvider(base_dir=base_dir, syscall_filter="none")
        for made in (provider, unfiltered):
            await (await made.create()).close()  # interpreter facts are cached per provider

        cold: dict[LocalProvider, list[float]] = {provider: [], unfiltered: []}
        for _ in range(int(30 * scale) or 3):
            for made, samples in cold.items():
                started = time.perf_counter()
                fresh = await made.create()
                samples.append((time.perf_counter() - started) * 1000)
                await fresh.close()  # not timed: the measurement is create-to-ready
        rows["cold start to a ready worker"] = cold[provider]
        rows["cold start, no seccomp filter"] = cold[unfiltered]

        session = await provider.create()
        launcher = session.launcher
        bare = launcher.wrap([launcher.python_executable, "-I", "-S", "-c", "pass"], network=False)

        def bare_sandbox() -> None:
            with launcher.spawnable(bare) as (argv, fds):
                subprocess.run(argv, check=True, pass_fds=fds)

        rows["bubblewrap'd python -I -S -c pass (cold start floor)"] = _time_sync(
            bare_sandbox, int(30 * scale) or 3
        )
        plain = await unfiltered.create()
        round_trips = await _warm_round_trips(
            {"filtered": session, "plain": plain}, int(3000 * scale)
        )
        await plain.close()
        rows["warm round trip: run_code('x += 1')"] = round_trips["filtered"]
        rows["warm round trip, no seccomp filter"] = round_trips["plain"]

        rows.update(await _levels_side_by_side(base_dir, scale))

        files = {f"data/{i // 10}/file-{i}.bin": b"\0" * 1_000_000 for i in range(100)}
        await session.write_files(files)
        rows["list_files(recursive) of 100 files, 100 MB"] = await _time_async(
            lambda: session.list_files(".", recursive=True), int(200 * scale)
        )
        await session.close()

    rows["python -c 'x = 0; x += 1' per call"] = _time_sync(
        lambda: subprocess.run([sys.executable, "-c", "x = 0; x += 1"], check=True),
        int(40 * scale) or 5,
    )
    namespace: dict[str, object] = {"x": 0}
    rows["exec('x += 1') in-process (floor)"] = _time_sync(
        lambda: exec("x += 1", namespace), int(20000 * scale)
    )

    medians = {name: statistics.median(samples) for name, samples in rows.items()}
    width = max(len(name) for name in rows)
    print(f"{'measurement':<{width}}  {'median ms':>10}  {'p90 ms':>9}  {'n':>6}")
    for name, samples in rows.items():
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else samples[0]
        print(f"{name:<{width}}  {medians[name]:>10.4f}  {p90:>9.4f}  {len(samples):>6}")
    warm = medians["warm round trip: run_code('x += 1')"]
    subprocess_call = medians["python -c 'x = 0; x += 1' per call"]
    floor = medians["exec('x += 1') in-process (floor)"]
    print()
    print(f"python -c per call / warm round trip: {subprocess_call / warm:8.1f}x  (target >= 50x)")
    print(f"warm round trip / in-process exec:    {warm / floor:8.1f}x")
    print(f"warm round trip median:               {warm:8.4f} ms (target < 0.5 ms)")
    cold_ms = medians["cold start to a ready worker"]
    print(f"cold start median:                    {cold_ms:8.2f} ms (target < 60 ms)")
    unfiltered_warm = medians["warm round trip, no seccomp filter"]
    unfiltered_cold = medians["cold start, no seccomp filter"]
    print(
        f"seccomp filter's cost:                {100 * (warm / unfiltered_warm - 1):+8.1f} % warm, "
        f"{100 * (cold_ms / unfiltered_cold - 1):+.1f} % cold"
    )
    print()
    fresh_call = medians["python -c 'x = 0; x += 1', interleaved with the cold starts"]
    print(f"{'isolation level':<16}{'cold ms':>10}{'warm ms':>10}{'python -c / warm':>18}")
    for level in ("bubblewrap", "gvisor"):
        level_cold = medians[f"{level}: cold start, create() + first run_code"]
        level_warm = medians[f"{level}: warm round trip run_code('x += 1')"]
        print(f"{level:<16}{level_cold:>10.2f}{level_warm:>10.4f}{fresh_call / level_warm:>17.1f}x")
    for label, kind in (
        ("cold start", "cold start, create() + first run_code"),
        ("warm round trip", "warm round trip run_code('x += 1')"),
    ):
        ratio = medians[f"gvisor: {kind}"] / medians[f"bubblewrap: {kind}"]
        print(f"gvisor / bubblewrap, {label}: {ratio:.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    asyncio.run(main(parser.parse_args().quick))
