"""Benchmark of the E2B provider against the local E2B emulator (no network, no key).

Run it with ``python benchmarks/bench_e2b.py`` (``--quick`` for fewer repetitions). It prints one
table, measured in this run:

* HTTP requests per warm call, counted from the emulator's request log (the target for
  ``run_code`` is 1: the lease is tracked locally, not refreshed before every call);
* the median time of the same call made through ``E2BSession`` and through the SDK directly
  (``AsyncSandbox`` of ``e2b-code-interpreter``) against the same emulator and sandbox; the
  difference is the package's overhead (result shaping, output capping, lease bookkeeping).

A third table is the provider side of one capture in workspaces of 10 to 10,000 files with one
file changed: ``list_changes`` in one code execution (listing compared in the kernel, the changed
file and the variables dump in its answer) against the old way (envd's full listing compared on the
host, one read per changed file, one dump), see ``_change_listing.py``.

A second table is a changing call (``n += 1``) through the runtime in the configurations of
``_tool_call_cases.py`` (outside a graph; in a checkpointed graph with the snapshot written behind,
the default on E2B, or inline as before): requests before the call returns (its critical path),
requests after it (the snapshot, while the model would think), and the call's median time.

The emulator executes for real, so absolute times are mostly the emulated sandbox's; the
overhead column is what this package adds. No assertions: the numbers are for people.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _change_listing import change_listing_rows, print_change_listing_rows
from _tool_call_cases import TOOL_CALL_CASES, measure

from langchain_sandbox.providers.e2b import E2BProvider, E2BSession
from langchain_sandbox.testing.e2b_emulator import E2BEmulator, RecordedRequest


def _is_capture(request: RecordedRequest) -> bool:
    """The first request of a snapshot: its listing (one cell since issue 12, envd's before)."""
    code = str(request.body.get("code", "")) if isinstance(request.body, dict) else ""
    return request.route == "envd ListDir" or "guest_changes" in code


async def _median_ms(operation: Callable[[], Awaitable[object]], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await operation()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def _requests_per_call(
    emulator: E2BEmulator, operation: Callable[[], Awaitable[object]], repeat: int
) -> float:
    emulator.clear_requests()
    for _ in range(repeat):
        await operation()
    return len(emulator.requests) / repeat


async def main(repeat: int) -> None:
    key = "e2b_benchmark_key"
    with E2BEmulator(api_key=key) as emulator:
        provider = E2BProvider(api_key=key, api_url=emulator.url, sandbox_url=emulator.url)
        session = await provider.create()
        assert isinstance(session, E2BSession)
        sdk: Any = session._sandbox  # the same connected AsyncSandbox, used directly
        await session.run_code("x = 0")
        await session.write_files({"data.txt": b"x" * 1024})

        cases: list[
            tuple[str, Callable[[], Awaitable[object]], Callable[[], Awaitable[object]]]
        ] = [
            (
                "run_code  x += 1",
                lambda: session.run_code("x += 1\nx"),
                lambda: sdk.run_code("x += 1\nx"),
            ),
            (
                "run_command  echo",
                lambda: session.run_command("echo hi"),
                lambda: sdk.commands.run("echo hi", cwd="/home/user"),
            ),
            (
                "read_files  1 KiB",
                lambda: session.read_files(["data.txt"]),
                lambda: sdk.files.read("/home/user/data.txt", format="bytes"),
            ),
            (
                "write_files  1 KiB",
                lambda: session.write_files({"out.txt": b"y" * 1024}),
                lambda: sdk.files.write("/home/user/out.txt", b"y" * 1024),
            ),
        ]
        rows = []
        for name, ours, direct in cases:
            for warm in (ours, direct):
                await warm()
            requests = await _requests_per_call(emulator, ours, repeat)
            ours_ms = await _median_ms(ours, repeat)
            direct_ms = await _median_ms(direct, repeat)
            rows.append((name, requests, ours_ms, direct_ms))
        listing_rows = await change_listing_rows(
            session,
            repeat,
            clear_log=emulator.clear_requests,
            logged=lambda: len(emulator.requests),
        )
        await session.close()
        tool_rows = [
            (
                case.label,
                *await measure(
                    provider,
                    case,
                    repeat,
                    clear_log=emulator.clear_requests,
                    snapshot_start=lambda: [_is_capture(r) for r in emulator.requests],
                ),
            )
            for case in TOOL_CALL_CASES
        ]

    print(f"E2B provider vs the SDK directly, same emulator, median of {repeat} calls")
    print(f"{'call':<22}{'HTTP req/call':>14}{'package ms':>12}{'SDK ms':>10}{'overhead ms':>13}")
    for name, requests, ours_ms, direct_ms in rows:
        print(
            f"{name:<22}{requests:>14.2f}{ours_ms:>12.2f}{direct_ms:>10.2f}"
            f"{ours_ms - direct_ms:>13.2f}"
        )
    print(f"\nA changing call (n += 1) through the runtime, {repeat} calls")
    print(f"{'call':<52}{'req before return':>18}{'req after':>11}{'call ms':>10}")
    for label, critical, behind, call_ms in tool_rows:
        print(f"{label:<52}{critical:>18.2f}{behind:>11.2f}{call_ms:>10.2f}")
    print_change_listing_rows(listing_rows, repeat)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    asyncio.run(main(10 if args.quick else 50))
