"""Tool-layer costs on the real local provider. Prints tables; asserts nothing.

    .venv/bin/python benchmarks/bench_tools.py [--calls 300] [--threads 50]

1. What ``SandboxExecTool.invoke`` adds on top of the provider call it wraps (``session.run_code``
   awaited directly on one loop), next to a bare ``BaseTool.invoke`` of a no-op tool.
2. A warm ``SandboxExecTool.invoke`` of ``n += 1`` under both persist policies
   (``every_call`` also captures an incremental snapshot per call).
3. Many threads at once on one runtime: every answer right, memory per idle session, nothing
   left running after ``close``.

Everything runs under a temporary directory; nothing touches the real home.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from _timing import header, row
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import BaseModel

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.tools import SandboxExecTool
from langchain_sandbox.tools.exec import SandboxExecArgs


class _NoOpTool(BaseTool):
    name: str = "noop"
    description: str = "Does nothing."

    def _run(self, code: str) -> str:
        return code


_WIDTH = 56


def _runtime(root: Path, name: str, **kwargs: object) -> SandboxRuntime:
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / name},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / f"{name}-blobs")),
        **kwargs,  # type: ignore[arg-type]
    )


class _ProviderClock:
    """Times the provider call inside each runtime call, on the runtime's loop, so the layers'
    overhead is measured per call as (wall time - provider time). Paired differences cancel
    the scheduling noise of a shared machine that separate runs would pick up."""

    def __init__(self, runtime: SandboxRuntime, thread_id: str) -> None:
        thread = runtime._pool.thread(thread_id)  # benchmark-only peek at the live session
        session = thread.session if thread is not None else None
        assert session is not None
        inner = session.run_code
        self.last_ms = 0.0

        async def _timed(code: str, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await inner(code, **kwargs)
            finally:
                self.last_ms = (time.perf_counter() - start) * 1000

        session.run_code = _timed  # type: ignore[method-assign]


class _SchemaNoOpTool(BaseTool):
    """What LangChain itself costs for a tool shaped like ours: an args schema with the injected
    ``runtime`` field and a ``config: RunnableConfig`` parameter, doing nothing."""

    name: str = "schema_noop"
    description: str = "Does nothing."
    args_schema: type[BaseModel] = SandboxExecArgs

    def _run(
        self, *, config: RunnableConfig, runtime: Any = None, **args: Any
    ) -> tuple[str, dict[str, Any]]:
        return "", {}


def _round_robin(
    calls: dict[str, Callable[[], object]], n: int, clock: _ProviderClock
) -> dict[str, list[float]]:
    """Wall ms per call, the calls interleaved so that machine load drifts onto all of them
    alike; ``<name> provider`` series hold the provider's time inside the same call."""
    for call in calls.values():
        for _ in range(10):
            call()
    out: dict[str, list[float]] = {}
    for _ in range(n):
        for name, call in calls.items():
            clock.last_ms = 0.0
            start = time.perf_counter()
            call()
            out.setdefault(name, []).append((time.perf_counter() - start) * 1000)
            out.setdefault(f"{name} provider", []).append(clock.last_ms)
    return out


def _caller_cpu_ms(call: Callable[[], object], n: int) -> list[float]:
    """CPU time of the calling thread per call: what the layers cost the caller, immune to
    waiting for a busy CPU (the sandbox's own work runs in other threads and processes)."""
    out = []
    for _ in range(n):
        start = time.thread_time()
        call()
        out.append((time.thread_time() - start) * 1000)
    return out


def bench_overhead(root: Path, n: int) -> None:
    noop, schema_noop = _NoOpTool(), _SchemaNoOpTool()
    med = statistics.median
    rows: list[tuple[str, list[float]]] = []
    summary: dict[str, float] = {}
    for policy in ("never", "every_call"):
        with _runtime(root, f"tool-{policy}", persist=policy) as runtime:
            tool = SandboxExecTool(runtime=runtime, default_thread_id="bench")
            tool.invoke({"code": "n = 0"})
            clock = _ProviderClock(runtime, "bench")
            calls: dict[str, Callable[[], object]] = {
                "bare BaseTool.invoke (no-op)": lambda: noop.invoke({"code": "n += 1"}),
                "BaseTool.invoke, our schema (no-op)": lambda: schema_noop.invoke(
                    {"code": "n += 1"}
                ),
                "runtime.run_code": lambda rt=runtime: rt.run_code("bench", "n += 1"),
                "SandboxExecTool.invoke": lambda t=tool: t.invoke({"code": "n += 1"}),
            }
            t = _round_robin(calls, n, clock)
            tool_over = [
                w - p
                for w, p in zip(
                    t["SandboxExecTool.invoke"], t["SandboxExecTool.invoke provider"], strict=True
                )
            ]
            rt_over = [
                w - p
                for w, p in zip(t["runtime.run_code"], t["runtime.run_code provider"], strict=True)
            ]
            if policy == "never":
                rows += [
                    ("bare BaseTool.invoke (no-op tool)", t["bare BaseTool.invoke (no-op)"]),
                    (
                        "BaseTool.invoke, same schema + config (no-op)",
                        t["BaseTool.invoke, our schema (no-op)"],
                    ),
                ]
            rows += [
                (
                    f"[{policy}] provider session.run_code (inside the call)",
                    t["SandboxExecTool.invoke provider"],
                ),
                (f"[{policy}] runtime.run_code, wall", t["runtime.run_code"]),
                (f"[{policy}] SandboxExecTool.invoke, wall", t["SandboxExecTool.invoke"]),
                (f"[{policy}] runtime overhead (wall - provider)", rt_over),
                (f"[{policy}] tool overhead (wall - provider)", tool_over),
                (
                    f"[{policy}] tool.invoke, caller-thread CPU",
                    _caller_cpu_ms(calls["SandboxExecTool.invoke"], n),
                ),
            ]
            summary[f"{policy} wall"] = med(t["SandboxExecTool.invoke"])
            summary[f"{policy} tool over"] = med(tool_over)
            summary[f"{policy} runtime over"] = med(rt_over)
            summary["langchain"] = med(t["BaseTool.invoke, our schema (no-op)"])
            summary[f"{policy} tool - runtime"] = med(
                [
                    a - b
                    for a, b in zip(t["SandboxExecTool.invoke"], t["runtime.run_code"], strict=True)
                ]
            )
            final = tool.invoke({"code": "n"})
            assert "value:" in final, final

    header(f"1-2. Per-call cost of `n += 1` ({n} rounds, calls interleaved, after warm-up)", _WIDTH)
    for name, samples in rows:
        print(row(name, samples, _WIDTH, 3))
    print(
        f"\n  tool overhead over the provider call, median of per-call differences: "
        f"{summary['never tool over']:.3f} ms"
        f"\n    of which the runtime (loop hop, lock, record):   {summary['never runtime over']:.3f} ms"
        f"\n    SandboxExecTool.invoke - runtime.run_code, same round: {summary['never tool - runtime']:.3f} ms"
        f"\n    (LangChain's own BaseTool.invoke for a tool with this schema: {summary['langchain']:.3f} ms)"
    )
    print(
        f"  warm SandboxExecTool.invoke of n += 1, median: {summary['never wall']:.3f} ms with "
        f"persist='never', {summary['every_call wall']:.3f} ms with 'every_call' "
        "(an incremental snapshot per call)"
    )


def _descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def bench_threads(root: Path, threads: int) -> None:
    runtime = _runtime(root, "many", max_sessions=threads)
    tool = SandboxExecTool(runtime=runtime)
    before = {p.pid for p in _descendants()}

    def _one(i: int) -> bool:
        config = {"configurable": {"thread_id": f"thread-{i}"}}
        tool.invoke({"code": f"mine = {i}"}, config)
        out = tool.invoke({"code": "print(mine * 3)"}, config)
        return f"{i * 3}\n" in out

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        correct = sum(pool.map(_one, range(threads)))
    elapsed = time.perf_counter() - start

    procs = [p for p in _descendants() if p.pid not in before]
    uss = rss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        uss += info.uss
        rss += info.rss
    live = len(runtime.live_sessions())
    runtime.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        p.is_running() and p.status() != "zombie" for p in procs
    ):
        time.sleep(0.1)
    left = [p.pid for p in procs if p.is_running() and p.status() != "zombie"]

    print(f"\n3. {threads} threads at once on one runtime (2 calls each, persist=every_call)")
    print(f"  correct answers:                 {correct}/{threads}")
    print(f"  wall time, creation included:    {elapsed:.2f} s")
    print(f"  live sessions before close:      {live}")
    print(f"  processes per session:           {len(procs) / max(live, 1):.1f}")
    print(f"  memory per idle session (USS):   {uss / max(live, 1) / 2**20:.1f} MiB")
    print(f"  memory per idle session (RSS):   {rss / max(live, 1) / 2**20:.1f} MiB")
    print(f"  processes left after close:      {len(left)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--threads", type=int, default=50)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, local provider (bubblewrap)")
    with tempfile.TemporaryDirectory(prefix="bench-tools-") as tmp:
        os.environ["LANGCHAIN_SANDBOX_HOME"] = str(Path(tmp) / "home")
        bench_overhead(Path(tmp), args.calls)
        bench_threads(Path(tmp), args.threads)


if __name__ == "__main__":
    main()
