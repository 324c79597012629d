"""Runloop provider: HTTP requests per warm call and overhead over the bare SDK, on the emulator.

Run: ``python benchmarks/bench_runloop.py [--calls N]``. Everything talks to a local Runloop API
emulator (devboxes are local bubblewrap sandboxes), so the figures measure this package and the
SDK, not Runloop's network. Requests are counted from the emulator's request log. No asserts: the
table is for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from runloop_api_client import AsyncRunloopSDK

from langchain_sandbox.testing.runloop_emulator import RunloopEmulator


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
            emulator.clear_log()
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


async def main(calls: int) -> None:
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
        await session.close()
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    asyncio.run(main(parser.parse_args().calls))
