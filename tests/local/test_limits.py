"""Limits of a local session: wall time, memory, processes and output; the session survives them.

Timeouts here are hang guards only (generous, never assertions about speed): the machine is shared.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import (
    INTERRUPT_GRACE,
    WORKER_RESTARTED,
    LocalProvider,
    LocalSession,
)

_HANG_GUARD = 60.0


async def _guarded(awaitable: object, limit: float = _HANG_GUARD) -> object:
    return await asyncio.wait_for(awaitable, limit)  # type: ignore[arg-type]


async def test_infinite_loop_is_interrupted_and_variables_survive(session: LocalSession) -> None:
    await session.run_code("kept = 41")
    result = await asyncio.wait_for(
        session.run_code("while True:\n    pass", timeout=1.0), 1.0 + INTERRUPT_GRACE + 30
    )
    assert result.timed_out
    assert not result.ok
    assert result.notices == []
    assert result.error is not None
    assert result.error.name == "KeyboardInterrupt"
    sleeping = await session.run_code("import time\ntime.sleep(600)", timeout=1.0)
    assert sleeping.timed_out
    after = await session.run_code("kept + 1")
    assert after.value == "42"


async def test_code_that_ignores_the_interrupt_is_killed_and_reported(
    session: LocalSession,
) -> None:
    await session.run_code("kept = 1")
    stubborn = "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass"
    result = await asyncio.wait_for(
        session.run_code(stubborn, timeout=1.0), 1.0 + INTERRUPT_GRACE + 30
    )
    assert result.timed_out
    assert any(WORKER_RESTARTED in notice for notice in result.notices)
    after = await session.run_code("'kept' in globals()")
    assert after.value == "False"
    assert after.notices == []


async def test_memory_bomb_is_stopped_and_reported(provider: LocalProvider) -> None:
    spec = SessionSpec(limits=Limits(memory_mb=200, timeout=60.0))
    async with await provider.create(spec) as session:
        bomb = "hog = []\nwhile True:\n    hog.append(bytearray(16 * 1024 * 1024))"
        result = await asyncio.wait_for(session.run_code(bomb), _HANG_GUARD)
        assert not result.ok
        assert result.error is not None
        assert result.error.name == "MemoryError"
        assert "memory" in result.error.value
        assert any(WORKER_RESTARTED in notice for notice in result.notices)
        after = await session.run_code("6 * 7")
        assert after.value == "42"


async def test_fork_bomb_is_contained(provider: LocalProvider) -> None:
    spec = SessionSpec(limits=Limits(max_processes=40, timeout=30.0))
    async with await provider.create(spec) as session:
        counted = await session.run_code(
            "import os, signal, time\n"
            "children = []\n"
            "try:\n"
            "    while len(children) < 1000:\n"
            "        pid = os.fork()\n"
            "        if pid == 0:\n"
            "            time.sleep(60)\n"
            "            os._exit(0)\n"
            "        children.append(pid)\n"
            "except OSError as exc:\n"
            "    stopped_by = type(exc).__name__\n"
            "for pid in children:\n"
            "    os.kill(pid, signal.SIGKILL)\n"
            "    os.waitpid(pid, 0)\n"
            "(len(children), stopped_by)"
        )
        assert counted.ok, counted.render()
        forked, stopped_by = eval(counted.value or "")
        assert forked < 40
        assert stopped_by == "BlockingIOError"
        # The classic bomb returns at once and leaves its children running; the sleep keeps the call
        # open until they meet the limit, which bash reports ("fork: retry: ..."), so the assertion
        # does not depend on how far the bomb got before the call ended.
        bomb = await session.run_command(":(){ :|:& };:; sleep 3", timeout=10.0)
        assert "fork" in bomb.stderr or bomb.timed_out
        # What the bomb left in its process group was killed with it: the session forks again.
        alive = await session.run_command("echo alive")
        assert alive.stdout == "alive\n"
        assert (await session.run_code("6 * 7")).value == "42"


@contextmanager
def _peak_rss_growth() -> Iterator[list[int]]:
    """Samples this process's resident memory while the block runs; yields [growth in bytes]."""

    def rss() -> int:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    baseline = rss()
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    growth = [0]
    try:
        yield growth
    finally:
        done.set()
        sampler.join()
        growth[0] = max(peak[0], rss()) - baseline


async def test_huge_output_is_truncated_and_host_memory_stays_bounded(
    provider: LocalProvider,
) -> None:
    spec = SessionSpec(limits=Limits(max_output_bytes=200_000, timeout=120.0))
    printed = 300 * 1_000_001
    async with await provider.create(spec) as session:
        streamed = [0]

        def count(stream: str, text: str) -> None:
            streamed[0] += len(text)

        with _peak_rss_growth() as growth:
            result = await asyncio.wait_for(
                session.run_code(
                    "import sys\nchunk = 'x' * 1_000_000 + '\\n'\n"
                    "for _ in range(300):\n    sys.stdout.write(chunk)\nprint('END')",
                    on_output=count,
                ),
                _HANG_GUARD * 2,
            )
        # Capped inside the sandbox: only head and tail ever crossed into the host.
        assert streamed[0] <= 200_000
        assert result.ok, result.render()[:500]
        assert result.truncated
        assert result.omitted_bytes >= printed - 200_000
        assert len(result.stdout) < 300_000
        assert result.stdout.endswith("END\n")
        assert growth[0] < printed // 10, f"host RSS grew by {growth[0]} bytes"
        shell = await session.run_command("head -c 50000000 /dev/zero | tr '\\0' y; echo; echo END")
        assert shell.truncated
        assert shell.stdout.endswith("END\n")
        assert len(shell.stdout) < 300_000


async def test_command_timeout_kills_the_whole_process_group(session: LocalSession) -> None:
    result = await session.run_command("sleep 300 & sleep 301 & sleep 302", timeout=1.0)
    assert result.timed_out
    assert not result.ok
    left = await session.run_code(
        "import os\n"
        "names = []\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        names.append(open(f'/proc/{pid}/cmdline', 'rb').read())\n"
        "    except OSError:\n"
        "        pass\n"
        "sum(name.startswith(b'sleep') for name in names)"
    )
    assert left.value == "0"
