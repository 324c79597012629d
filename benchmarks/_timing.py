"""How the benchmark scripts time a call and print a row: one copy, so their tables read alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timings_ms(call: Callable[[], object], n: int, warmup: int = 5) -> list[float]:
    """``n`` timings of ``call`` in milliseconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        call()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000)
    return out


def interleaved_ms(
    calls: dict[str, Callable[[], object]], n: int, warmup: int = 5
) -> dict[str, list[float]]:
    """``n`` timings in milliseconds of each call, taken in rounds (one call of each per round)
    so that load on a shared machine drifts onto all of them alike and their ratios hold."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    out: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(n):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            out[name].append((time.perf_counter() - start) * 1000)
    return out


def header(title: str, width: int, unit: str = "ms") -> None:
    """Print a table's title and column names; ``width`` is the name column's."""
    print(f"\n{title}")
    print(f"{'':<{width}} {'median':>9} {'p5':>9} {'p95':>9}   ({unit})")


def row(name: str, samples: list[float], width: int, digits: int = 2) -> str:
    """One table row: median, 5th and 95th percentile of ``samples``."""
    q = statistics.quantiles(samples, n=20)
    cells = (statistics.median(samples), q[0], q[18])
    return f"{name:<{width}} " + " ".join(f"{c:>9.{digits}f}" for c in cells)
