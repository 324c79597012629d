"""Runloop provider: HTTP requests per warm call and overhead over the bare SDK, on the emulator.

Run: ``python benchmarks/bench_runloop.py [--calls N]``. Everything talks to a local Runloop API
emulator (devboxes are local bubblewrap sandboxes), so the figures measure this package and the
SDK, not Runloop's network. Requests are counted from the emulator's request log. No asserts: the
table is for reading.

A second table is a changing call (``n += 1``) through the runtime in the configurations of
``_tool_call_cases.py`` (outside a graph; in a checkpointed graph with the snapshot written behind,
the default on Runloop, or inline as before): requests before the call returns, requests after it,
and the call's median time.

A fourth table is the provider side of one capture in workspaces of 10 to 10,000 files with one
file changed: ``list_changes`` in one worker call (the worker compares with the listing it
answered last, named by a token, and answers the changed file and the variables dump) against the
old way (a full ``ls`` compared on the host, one download per changed file, one ``dump`` call),
see ``_change_listing.py``.

A third table is one capture in a devbox the snapshotter already knows, after a command changed
some files: requests and median time with the changed files and the variables bundled into one
worker call (``Session.list_changes``, the default on Runloop) and with the old path (the listing,
then one ``download_file`` per changed file and a ``dump`` call), selected by giving the session
the provider-neutral default of ``list_changes`` back (and ``lists_variables = False``).

The last table (``--restore-files 1000,10000``; ``--only-restore`` prints it alone) is a restore
of that many 100-byte files into a fresh devbox: the requests the restore made and its time. It
uses only the public API, so the same script run with another checkout's package first on
``PYTHONPATH`` measures that version (issue 26: before the files went as one archive, each file
was an upload of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shlex
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _change_listing import change_listing_rows, print_change_listing_rows
from _tool_call_cases import TOOL_CALL_CASES, measure
from runloop_api_client import AsyncRunloopSDK

from langchain_sandbox.providers.base import Session
from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.providers.runloop.provider import RunloopSession
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing.runloop_emulator import RecordedRequest, RunloopEmulator

# (label, shell command changing the workspace between two captures)
_CHANGE_CASES = (
    ("1 small text file", "date +%s%N > small.txt"),
    (
        "1 small + 1 binary + 1 of 2 MB (over the cap)",
        "date +%s%N > small.txt && head -c 4096 /dev/urandom > blob.bin"
        " && head -c 2000000 /dev/urandom > large.bin",
    ),
    ("10 small files", "for i in $(seq 10); do date +%s%N > f$i.txt; done"),
)


async def _measure(
    emulator: RunloopEmulator, calls: int, operations: dict[str, Callable[[], Awaitable[object]]]
) -> dict[str, tuple[float, float, float]]:
    """Per operation: (requests per call, median ms, p90 ms) over ``calls`` warm calls.

    Operations take turns, one call each per round, so a noisy machine slows them alike.
    """
    times: dict[str, list[float]] = {name: [] for name in operations}
    requests: dict[str, int] = dict.fromkeys(operations, 0)
    for call in operations.values():
        await call()
    for _ in range(calls):
        for name, call in operations.items():
            emulator.clear_requests()
            started = time.perf_counter()
            await call()
            times[name].append((time.perf_counter() - started) * 1000)
            requests[name] += len(emulator.requests)
    table = {}
    for name, samples in times.items():
        samples.sort()
        table[name] = (
            requests[name] / calls,
            statistics.median(samples),
            samples[int(0.9 * len(samples))],
        )
    return table


def _worker_op(request: RecordedRequest) -> str | None:
    """The worker operation an ``execute_async`` request runs (``code``, ``ls``...), if any."""
    if not request.path.endswith("/execute_async"):
        return None
    words = shlex.split(request.json()["command"].rpartition("&& ")[2])
    if len(words) < 5 or words[0] != "python3":
        return None
    json.loads(base64.b64decode(words[4]))  # a worker request, not some other command
    return words[3]


async def _capture_rows(
    emulator: RunloopEmulator, provider: RunloopProvider, calls: int
) -> list[tuple[str, float, float, float, float]]:
    """Per change case: (label, requests and median ms bundled, requests and median ms old)."""
    bundled_changes = RunloopSession.list_changes
    rows = []
    with tempfile.TemporaryDirectory() as blobs:
        snapshotter = Snapshotter(LocalDirectoryBlobStore(Path(blobs)))
        session = await provider.create()
        await snapshotter.capture(session)
        for label, command in _CHANGE_CASES:
            figures: list[float] = []
            for changes in (bundled_changes, Session.list_changes):
                RunloopSession.list_changes = changes  # type: ignore[method-assign]
                # the old path dumps the variables in a call of its own
                RunloopSession.lists_variables = changes is bundled_changes
                requests, samples = 0, []
                for _ in range(calls):
                    await session.run_command(command)
                    emulator.clear_requests()
                    started = time.perf_counter()
                    await snapshotter.capture(session)
                    samples.append((time.perf_counter() - started) * 1000)
                    requests += len(emulator.requests)
                figures += [requests / calls, statistics.median(samples)]
            RunloopSession.list_changes = bundled_changes  # type: ignore[method-assign]
            RunloopSession.lists_variables = True
            rows.append((label, *figures))
        await session.close()
    return rows


_MAKE_FILES = (
    "import os\n"
    "for i in range({count}):\n"
    "    d = 'tree/d%d/e%d' % (i % 10, i % 7)\n"
    "    os.makedirs(d, exist_ok=True)\n"
    "    open('%s/f%d.txt' % (d, i), 'w').write('%-99d\\n' % i)\n"
)


async def _restore_rows(counts: list[int]) -> list[tuple[int, int, float]]:
    """Per file count: (files, requests, ms) of one restore into a fresh devbox."""
    rows = []
    async with RunloopEmulator(api_key="bench") as emulator:
        provider = emulator.provider()
        with tempfile.TemporaryDirectory() as blobs:
            snapshotter = Snapshotter(LocalDirectoryBlobStore(Path(blobs), durable=False))
            for count in counts:
                async with await provider.create() as source:
                    made = await source.run_command(
                        f"python3 -c {shlex.quote(_MAKE_FILES.format(count=count))}"
                    )
                    assert made.ok, made.stderr
                    snapshot = await snapshotter.capture(source)
                async with await provider.create() as fresh:
                    emulator.clear_requests()
                    started = time.perf_counter()
                    report = await snapshotter.restore(fresh, snapshot.ref)
                    elapsed = (time.perf_counter() - started) * 1000
                    assert report.files_written == count, report
                    rows.append((count, len(emulator.requests), elapsed))
        await provider.aclose()
    return rows


def _print_restore_rows(rows: list[tuple[int, int, float]]) -> None:
    print("\nRestore of 100-byte files into a fresh devbox (one run each)")
    print(f"{'files':>8}{'requests':>10}{'ms':>10}")
    for count, requests, elapsed in rows:
        print(f"{count:>8,}{requests:>10}{elapsed:>10.0f}")


async def main(calls: int, restore_files: list[int], only_restore: bool) -> None:
    if only_restore:
        _print_restore_rows(await _restore_rows(restore_files))
        return
    async with RunloopEmulator(api_key="bench") as emulator:
        provider = emulator.provider()
        session = await provider.create()
        await session.run_code("counter = 0")
        sdk = AsyncRunloopSDK(bearer_token="bench", base_url=emulator.url, max_retries=0)
        devbox = sdk.devbox.from_id(session.devbox_id)

        async def package_code() -> object:
            return await session.run_code("counter += 1\ncounter")

        async def package_command() -> object:
            return await session.run_command("echo hi")

        async def sdk_command() -> object:
            result = await devbox.cmd.exec("echo hi")
            return await result.stdout()

        async def sdk_python() -> object:
            result = await devbox.cmd.exec("python3 -c 'print(1)'")
            return await result.stdout()

        table = await _measure(
            emulator,
            calls,
            {
                "package run_code (stateful worker)": package_code,
                "package run_command": package_command,
                "SDK cmd.exec('echo hi')": sdk_command,
                "SDK cmd.exec('python3 -c ...')": sdk_python,
            },
        )
        await sdk.aclose()
        listing_rows = await change_listing_rows(
            session, calls, clear_log=emulator.clear_requests, logged=lambda: len(emulator.requests)
        )
        await session.close()
        tool_rows = [
            (
                case.label,
                *await measure(
                    provider,
                    case,
                    calls,
                    clear_log=emulator.clear_requests,
                    snapshot_start=lambda: [
                        _worker_op(r) in ("changes", "ls", "dump") for r in emulator.requests
                    ],
                ),
            )
            for case in TOOL_CALL_CASES
        ]
        capture_rows = await _capture_rows(emulator, provider, calls)
        await provider.aclose()

    print(f"Runloop provider on the local emulator, {calls} warm calls each\n")
    print(f"{'operation':<38} {'requests/call':>13} {'median ms':>10} {'p90 ms':>8}")
    for name, (requests, median, p90) in table.items():
        print(f"{name:<38} {requests:>13.2f} {median:>10.1f} {p90:>8.1f}")
    command = table["package run_command"][1] / table["SDK cmd.exec('echo hi')"][1]
    code = (
        table["package run_code (stateful worker)"][1] / table["SDK cmd.exec('python3 -c ...')"][1]
    )
    print(f"\nrun_command over the bare SDK command (median): x{command:.2f}")
    print(f"run_code over a fresh `python3 -c` through the SDK (median): x{code:.2f}")
    print(f"\nA changing call (n += 1) through the runtime, {calls} calls")
    print(f"{'call':<52}{'req before return':>18}{'req after':>11}{'call ms':>10}")
    for label, critical, behind, call_ms in tool_rows:
        print(f"{label:<52}{critical:>18.2f}{behind:>11.2f}{call_ms:>10.1f}")
    print(f"\nOne capture after a command changed files in a known devbox, {calls} captures")
    print(f"{'files changed':<48}{'bundled req':>12}{'ms':>8}{'old req':>9}{'ms':>8}")
    for label, new_requests, new_ms, old_requests, old_ms in capture_rows:
        print(f"{label:<48}{new_requests:>12.2f}{new_ms:>8.1f}{old_requests:>9.2f}{old_ms:>8.1f}")
    print_change_listing_rows(listing_rows, calls)
    _print_restore_rows(await _restore_rows(restore_files))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--restore-files", default="1000,10000")
    parser.add_argument("--only-restore", action="store_true")
    arguments = parser.parse_args()
    counts = [int(count) for count in arguments.restore_files.split(",")]
    asyncio.run(main(arguments.calls, counts, arguments.only_restore))
