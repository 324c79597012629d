"""Blocking callers on the real local provider: what the warm path must keep however it reaches
the worker (issue 21's warm-call work): a timeout interrupts the code, calls of one thread from
many threads run one at a time, and a blocking call waits for an async call in flight."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

from .conftest import wait_until


def _runtime(root: Path) -> SandboxRuntime:
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / "sessions"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        persist="never",  # the warm default outside a graph: nothing captured per call
    )


def test_a_blocking_call_past_its_timeout_interrupts_the_code_and_keeps_the_variables(
    tmp_path: Path,
) -> None:
    with _runtime(tmp_path) as runtime:
        runtime.run_code("t", "kept = 'before'")
        code = (
            "import time\n"
            "try:\n"
            "    time.sleep(60)\n"
            "except KeyboardInterrupt:\n"
            "    interrupted = True\n"
            "    raise\n"
        )
        timed_out = runtime.run_code("t", code, timeout=0.5).value
        assert timed_out.timed_out
        after = runtime.run_code("t", "(kept, interrupted)").value
        # Interrupted, not killed: the worker and its variables are the same ones.
        assert after.value == "('before', True)", after.render()
        assert not after.notices


def test_blocking_calls_of_one_thread_from_many_threads_run_one_at_a_time(
    tmp_path: Path,
) -> None:
    with _runtime(tmp_path) as runtime:
        runtime.run_code("t", "import time\nbusy = False\norder = []")
        code = (
            "assert not busy, 'two calls overlapped'\n"
            "busy = True\n"
            "time.sleep(0.02)\n"
            "order.append({i})\n"
            "busy = False\n"
        )
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(lambda i: runtime.run_code("t", code.format(i=i)), range(16)))
        assert all(o.value.ok for o in outcomes), [o.value.render() for o in outcomes]
        # Each call advanced the record once, under the thread's lock: no revision twice.
        revisions = sorted(o.record["revision"] for o in outcomes)
        assert revisions == list(range(revisions[0], revisions[0] + 16))
        landed = runtime.run_code("t", "sorted(order)").value.value
        assert landed == str(list(range(16)))
        assert len(runtime.live_sessions()) == 1


def test_a_blocking_call_waits_for_an_async_call_in_flight_on_the_same_thread(
    tmp_path: Path,
) -> None:
    with _runtime(tmp_path) as runtime:
        runtime.run_code("t", "import time")
        workspace = Path(runtime._pool.thread("t").session.workspace_dir)  # type: ignore[union-attr]
        results: list[object] = []

        def _async_caller() -> None:
            code = "open('started', 'w').close()\ntime.sleep(0.5)\nanswer = 41"
            results.append(asyncio.run(runtime.arun_code("t", code)).value.ok)

        caller = threading.Thread(target=_async_caller)
        caller.start()
        assert wait_until((workspace / "started").exists)
        # The async call is running in the worker now; this one must wait for it, then see
        # what it left behind.
        after = runtime.run_code("t", "answer + 1").value
        caller.join(30)
        assert results == [True]
        assert after.value == "42", after.render()
