"""The scale-out story on Kubernetes: three worker processes share one Postgres checkpointer and one
snapshot store (a LangGraph ``PostgresStore``), with the emulated agent-sandbox cluster as the
sandbox host. Thirty threads take turns spread across the workers; one worker is SIGKILLed while
it holds live sessions and one of its threads waits at an ``interrupt()``, and some pods are lost;
the other workers answer the interrupt and continue every thread with its files and variables at
the right checkpoint, each side effect once, and no claim is left behind after gc.

Each turn of the ``count`` story (``agent_worker.py``) adds one to the sandbox's variable ``n`` and
appends ``n:pid`` to ``log.txt``, so a turn that ran twice, or state that went back, shows.
Throughput and p50/p95 turn latency are printed (a figure, never asserted: the machine is shared).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from test_durable_restores import _send
from test_durable_sessions import HANG_GUARD, Story, read_event

from langchain_sandbox.gc import collect_garbage
from langchain_sandbox.snapshots import LangGraphStoreBlobStore, Snapshotter
from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator

pytestmark = pytest.mark.slow

THREADS = 30
WORKERS = 3
LOST_PODS = 5


@pytest.fixture
def cluster() -> Iterator[KubernetesEmulator]:
    with KubernetesEmulator() as running:
        yield running


def _counted(tool_text: str) -> tuple[int, list[str]]:
    """``n`` and the log's entries, from the turn's tool output ``n ['1:pid', ...]``."""
    stdout = tool_text.split("stdout:\n", 1)[1].split("\n[", 1)[0].strip()
    count, _, entries = stdout.partition(" ")
    return int(count), [e.strip(" '") for e in entries.strip("[]").split(",") if e.strip()]


async def _collect(cluster: KubernetesEmulator, dsn: str) -> dict[str, Any]:
    """``collect_garbage`` over the cluster, with the workers' checkpointer and snapshot store."""
    from langgraph.store.postgres import PostgresStore

    provider = cluster.provider()
    try:
        with PostgresStore.from_conn_string(dsn) as store:
            return await collect_garbage(
                providers=[provider],
                checkpointer_url=dsn,
                snapshotter=Snapshotter(LangGraphStoreBlobStore(store)),
                dry_run=False,
                grace_seconds=0,
            )
    finally:
        await provider.aclose()


def _turns(
    workers: list[subprocess.Popen[str]], plan: list[tuple[int, str]], latencies: list[float]
) -> dict[str, dict[str, Any]]:
    """Run each ``(worker, thread)`` turn; the workers work at once, each through its queue."""

    def run_queue(index: int) -> dict[str, dict[str, Any]]:
        answers = {}
        for worker_index, thread in plan:
            if worker_index != index:
                continue
            started = time.monotonic()
            answers[thread] = _send(workers[index], {"message": "count", "thread": thread}, "turn")
            latencies.append(time.monotonic() - started)
        return answers

    busy = sorted({index for index, _ in plan})
    with ThreadPoolExecutor(len(busy)) as pool:
        results = list(pool.map(run_queue, busy))
    return {thread: answer for result in results for thread, answer in result.items()}


def test_three_workers_share_thirty_threads_and_survive_a_sigkill(
    cluster: KubernetesEmulator, postgres_dsn: str
) -> None:
    env = {**os.environ, **cluster.env()}
    story = Story(
        "count", "postgres", postgres_dsn, postgres_dsn, "--provider", "kubernetes", env=env
    )
    # The first worker sets the store and the checkpointer's tables up alone (the setups of three
    # processes at once race on a fresh database); the others start once it is ready.
    workers = [story.start("--serve")]
    latencies: list[float] = []
    threads = [f"scale-{uuid.uuid4().hex[:6]}-{i}" for i in range(THREADS)]
    started = time.monotonic()
    try:
        read_event(workers[0], "ready")
        workers += [story.start("--serve") for _ in range(WORKERS - 1)]
        for worker in workers[1:]:
            read_event(worker, "ready")
        # Turn 1: thread i on worker i % 3.
        first = _turns(workers, [(i % WORKERS, t) for i, t in enumerate(threads)], latencies)
        for thread in threads:
            count, entries = _counted(first[thread]["tools"][-1])
            assert (count, len(entries)) == (1, 1), first[thread]["tools"][-1]
        # One of worker 0's threads (not one whose pod is lost below) waits for a human.
        paused = threads[5 * WORKERS]
        asked = _send(workers[0], {"message": "ask", "thread": paused}, "turn")
        assert asked["interrupted"], asked
        for worker in workers:
            _send(worker, {"flush": True}, "flushed")

        # Worker 0 dies holding its threads' live sessions, and five of those threads' pods are
        # lost besides (a pod lost under a live session of a surviving worker is
        # tests/kubernetes/test_kubernetes_resume.py's story).
        doomed = workers[0]
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.communicate(timeout=HANG_GUARD)
        assert doomed.returncode == -signal.SIGKILL
        lost = threads[::WORKERS][:LOST_PODS]
        for thread in lost:
            (claim,) = [
                name
                for name, obj in cluster.claims().items()
                if f'"thread_id": "{thread}"'
                in obj["spec"]["additionalPodMetadata"]["annotations"][
                    "langchain-sandbox.dev/metadata"
                ]
            ]
            cluster.restart_pod(cluster.sandbox_of(claim))

        # Another worker answers the interrupt the dead one was waiting on.
        answered = _send(workers[1], {"resume": "yes", "thread": paused}, "turn")
        assert not answered["interrupted"], answered

        # Turn 2 on the survivors: every thread goes on from its own checkpoint.
        plan = [(1 + i % (WORKERS - 1), t) for i, t in enumerate(threads)]
        second = _turns(workers, plan, latencies)
        for thread in threads:
            tool = second[thread]["tools"][-1]
            count, entries = _counted(tool)
            assert count == 2, tool
            assert [e.split(":")[0] for e in entries] == ["1", "2"], "each turn ran once"
            if thread in lost:
                assert "restored" in tool, tool
            assert second[thread]["sandbox"]["revision"] == 2, "the pause changed nothing"
    finally:
        for worker in workers[1:]:
            if worker.poll() is None:
                worker.communicate(timeout=HANG_GUARD)  # end of input: the worker exits
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=HANG_GUARD)
    elapsed = time.monotonic() - started

    # The survivors closed the sessions they held when they exited. What is left are the claims
    # whose pod was lost: attached, found at another head, and left alone (a record's sandbox
    # may be another worker's); no checkpoint names them, so gc deletes them.
    assert len(cluster.claims()) == LOST_PODS
    report = asyncio.run(_collect(cluster, postgres_dsn))
    destroyed = [box for box in report["sandboxes"] if box["destroyed"]]
    assert sorted(box["thread_id"] for box in destroyed) == sorted(lost)
    assert cluster.claims() == {}, "no claim, and so no pod, is left"

    ordered = sorted(latencies)
    p50 = statistics.median(ordered)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    print(
        f"\nscale-out on the emulated cluster: {len(latencies)} turns of {THREADS} threads on "
        f"{WORKERS} workers in {elapsed:.1f} s ({len(latencies) / elapsed:.2f} turns/s); "
        f"turn latency p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms"
    )
