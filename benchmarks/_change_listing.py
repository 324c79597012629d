"""What the provider side of one capture costs on a remote provider, with ``list_changes`` in one
request (the sandbox compares, bundles the changed files and the variables dump) and the old way
(a full listing compared on the host, one read per changed file, one variables dump): one copy,
so the E2B and Runloop tables have the same rows.

Each row is a workspace of N small files in which one command changed one file since the last
capture; both ways start from the listing the previous capture left.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from langchain_sandbox.providers.base import ChangeListing, FileInfo, Session

WORKSPACE_SIZES = (10, 1_000, 10_000)
Known = tuple[dict[str, FileInfo], object | None]
"""The listing the last capture left, and its cursor (passed back as ``since``)."""
_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Figures:
    """Requests and median milliseconds of one capture's provider side, one way."""

    requests: float
    median_ms: float


def _applied(known: Mapping[str, FileInfo], listing: ChangeListing) -> dict[str, FileInfo]:
    updated = {path: info for path, info in known.items() if path not in listing.gone}
    updated.update((info.path, info) for info in listing.changed)
    return updated


async def _one_request(session: Session, known: Known) -> Known:
    entries, since = known
    listing = await session.list_changes(
        entries, max_bytes=_MAX_BYTES, variables_max_bytes=_MAX_BYTES, since=since
    )
    assert listing.variables is not None
    return _applied(entries, listing), listing.cursor


async def _old_way(session: Session, known: Known) -> Known:
    entries, _ = known
    listing = await Session.list_changes(session, entries, max_bytes=_MAX_BYTES)
    await session.read_files([info.path for info in listing.changed if info.kind == "file"])
    await session.dump_variables()
    return _applied(entries, listing), None


async def change_listing_rows(
    session: Session, calls: int, *, clear_log: Callable[[], None], logged: Callable[[], int]
) -> list[tuple[int, Figures, Figures]]:
    """Per workspace size: (files, figures in one request, figures the old way)."""
    rows = []
    await session.run_code("n = 0")
    for size in WORKSPACE_SIZES:
        made = await session.run_command(
            'rm -rf ws && python3 -c "import os\n'
            f"for i in range({size}):\n"
            "    os.makedirs(f'ws/d{i // 100}', exist_ok=True)\n"
            "    open(f'ws/d{i // 100}/f{i}.txt', 'w').write(str(i))\""
        )
        assert made.ok, made.render()
        known = await _one_request(session, ({}, None))
        figures = []
        for way in (_one_request, _old_way):
            requests, samples = 0, []
            for _ in range(calls):
                await session.run_code("n += 1")
                assert (await session.run_command("date +%s%N > ws/d0/f0.txt")).ok
                clear_log()
                started = time.perf_counter()
                known = await way(session, known)
                samples.append((time.perf_counter() - started) * 1000)
                requests += logged()
            figures.append(Figures(requests / calls, statistics.median(samples)))
        rows.append((size, figures[0], figures[1]))
    return rows


def print_change_listing_rows(rows: list[tuple[int, Figures, Figures]], calls: int) -> None:
    print(
        "\nThe provider side of one capture (listing, changed file, variables), one file "
        f"changed, {calls} captures"
    )
    print(f"{'files':>8}{'1-request req':>15}{'ms':>9}{'old req':>9}{'ms':>9}{'old/new ms':>12}")
    for size, new, old in rows:
        print(
            f"{size:>8}{new.requests:>15.2f}{new.median_ms:>9.1f}{old.requests:>9.2f}"
            f"{old.median_ms:>9.1f}{old.median_ms / new.median_ms:>12.1f}"
        )
