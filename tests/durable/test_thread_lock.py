"""Two workers racing one thread, with a real Postgres checkpointer: ``PostgresThreadLock`` makes
the second one fail with ``ThreadBusyError`` (or wait for the thread, by option) instead of
silently losing a turn; a holder killed with SIGKILL frees the thread."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_durable_sessions import HANG_GUARD, read_event

WORKER = Path(__file__).with_name("turn_lock_worker.py")


def _start(dsn: str, blobs: str, label: str, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, str(WORKER), "--dsn", dsn, "--blobs", blobs, "--label", label]
    return subprocess.Popen(
        [*command, "--thread", "raced", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=WORKER.parent,
    )


def _last(proc: subprocess.Popen[str]) -> dict[str, Any]:
    stdout, stderr = proc.communicate(timeout=HANG_GUARD)
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, stderr[-4000:]
    return events[-1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_second_worker_is_refused_or_waits_and_no_turn_is_lost(
    postgres_dsn: str, blobs: str, mode: str
) -> None:
    flags = ("--async",) if mode == "async" else ()
    first = _start(postgres_dsn, blobs, f"{mode}-A", "--pause", *flags)
    try:
        read_event(first, "holding")
        refused = _last(_start(postgres_dsn, blobs, f"{mode}-B", *flags))
        waiting = _start(postgres_dsn, blobs, f"{mode}-C", "--wait", "forever", *flags)
        read_event(waiting, "acquiring")
        done_first = _last(first)  # communicate() closes its stdin: the turn runs
    finally:
        first.kill()
    done_waiting = _last(waiting)
    assert refused["event"] == "busy"
    assert refused["type"] == "ThreadBusyError"
    assert "Another run holds thread 'raced'" in refused["message"]
    assert done_first["event"] == "done"
    # The waiting worker's turn ran after the first one, on top of it: both turns are there.
    assert done_waiting["turns"].endswith(f"{mode}-A{mode}-C")
    assert done_waiting["humans"][-2:] == [f"{mode}-A", f"{mode}-C"]


def test_a_holder_killed_with_sigkill_frees_the_thread(postgres_dsn: str, blobs: str) -> None:
    holder = _start(postgres_dsn, blobs, "killed", "--pause")
    try:
        read_event(holder, "holding")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=HANG_GUARD)
    finally:
        holder.kill()
    after = _last(_start(postgres_dsn, blobs, "after", "--wait", "60"))
    assert after["event"] == "done"
    assert after["turns"].endswith("after")
