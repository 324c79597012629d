"""The changing tool calls the remote-provider benchmarks count requests of, and how: one copy, so
the E2B and Runloop tables have the same rows (outside a graph; in a checkpointed graph written
behind; inline; and every call captured inline, the default before issue 12)."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from langchain_sandbox.core.rehydration import PersistPolicy
from langchain_sandbox.providers.base import Provider
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


@dataclass(frozen=True)
class ToolCallCase:
    """One row: how the runtime is configured and whether the call can be resumed from."""

    label: str
    persist: PersistPolicy
    write_behind: bool
    resumable: bool

    @property
    def behind(self) -> bool:
        """Whether requests can follow the call (a snapshot written behind it)."""
        return self.write_behind and (self.persist == "every_call" or self.resumable)


TOOL_CALL_CASES = (
    ToolCallCase("outside a graph (nothing can resume)", "resumable", True, False),
    ToolCallCase("checkpointed graph, written behind", "resumable", True, True),
    ToolCallCase("checkpointed graph, inline (write_behind=False)", "resumable", False, True),
    ToolCallCase("outside a graph, persist='every_call', inline", "every_call", False, False),
)


async def measure(
    provider: Provider,
    case: ToolCallCase,
    calls: int,
    *,
    clear_log: Callable[[], None],
    snapshot_start: Callable[[], Sequence[bool]],
) -> tuple[float, float, float]:
    """(requests before the call returns, requests after it, median ms of the call) over ``calls``
    warm ``n += 1`` calls. ``snapshot_start()`` marks, per logged request, whether it is the first
    request of a snapshot (written behind, the snapshot starts once the call has returned)."""
    with tempfile.TemporaryDirectory() as blobs:
        runtime = SandboxRuntime(
            provider,
            snapshotter=Snapshotter(LocalDirectoryBlobStore(blobs)),
            persist=case.persist,
            write_behind=case.write_behind,
        )
        try:
            outcome = await runtime.arun_code("bench", "n = 0", resumable=case.resumable)
            critical, behind, samples = 0, 0, []
            for _ in range(calls):
                await runtime.aflush()
                clear_log()
                started = time.perf_counter()
                outcome = await runtime.arun_code(
                    "bench", "n += 1", record=outcome.record, resumable=case.resumable
                )
                samples.append((time.perf_counter() - started) * 1000)
                await runtime.aflush()
                starts = list(snapshot_start())
                cut = starts.index(True) if case.behind else len(starts)
                critical, behind = critical + cut, behind + len(starts) - cut
        finally:
            await runtime.aclose()
    return critical / calls, behind / calls, statistics.median(samples)
