"""Two workers racing one thread, in separate processes, with a real checkpointer: SQLite with a
local blob store (an ``flock`` lease) and Postgres (an advisory lock). ``SandboxMiddleware``
leases the thread on its own: the second worker fails with ``ThreadBusyError`` (or waits, by
option, with ``runtime.hold_thread``) instead of silently losing a turn; turns one after the other hand the thread over; a
holder killed with SIGKILL, a turn interrupted for an approval and a turn whose model failed all
leave the thread free, while their process lives on for the last two."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import forked_python
import pytest
from test_durable_sessions import HANG_GUARD, read_event

from langchain_sandbox import ThreadBusyError

WORKER = Path(__file__).with_name("turn_lock_worker.py")


class _Workers:
    """Starts workers on one fresh thread of one checkpointer."""

    def __init__(self, saver: tuple[str, str], blobs: str) -> None:
        self.kind, self.target = saver
        self.blobs = blobs
        self.thread = f"raced-{uuid.uuid4().hex[:8]}"

    def start(self, label: str, *extra: str) -> subprocess.Popen[str]:
        command = [sys.executable, str(WORKER), "--saver", self.kind, "--target", self.target]
        return forked_python.popen(
            [*command, "--blobs", self.blobs, "--thread", self.thread, "--label", label, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=WORKER.parent,
        )

    def run(self, label: str, *extra: str) -> dict[str, Any]:
        return last(self.start(label, *extra))


def last(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The worker's last event, once it has exited (closing its stdin lets it go on)."""
    stdout, stderr = proc.communicate(timeout=HANG_GUARD)
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, stderr[-4000:]
    return events[-1]


@pytest.fixture
def workers(saver: tuple[str, str], blobs: str) -> _Workers:
    return _Workers(saver, blobs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_second_worker_is_refused_or_waits_and_no_turn_is_lost(
    workers: _Workers, mode: str
) -> None:
    flags = ("--async",) if mode == "async" else ()
    first = workers.start("A", "--pause", *flags)
    try:
        read_event(first, "holding")
        refused = workers.run("B", *flags)
        waiting = workers.start("C", "--wait", "forever", *flags)
        read_event(waiting, "waiting")
        done_first = last(first)  # communicate() closes its stdin: the turn goes on
    finally:
        first.kill()
    done_waiting = last(waiting)
    assert refused["event"] == "busy"
    assert refused["type"] == "ThreadBusyError"
    assert f"Another run holds thread {workers.thread!r}" in refused["message"]
    assert "runtime.hold_thread(thread_id, checkpointer=..., wait=seconds)" in refused["message"]
    assert done_first["event"] == "done"
    # The waiting worker's turn ran after the first one, on top of it: both turns are there.
    assert done_waiting["event"] == "done"
    assert done_waiting["turns"] == "AC"
    assert done_waiting["humans"][-2:] == ["A", "C"]


def test_turns_one_after_the_other_hand_the_thread_over(workers: _Workers) -> None:
    assert workers.run("A")["event"] == "done"
    second = workers.run("B", "--async")
    assert second["event"] == "done"
    assert second["turns"] == "AB"
    assert second["humans"] == ["A", "B"]


def test_a_holder_killed_with_sigkill_frees_the_thread(workers: _Workers) -> None:
    holder = workers.start("killed", "--pause")
    try:
        read_event(holder, "holding")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=HANG_GUARD)
    finally:
        holder.kill()
    # The server notices the closed connection (Postgres) at once, the kernel drops the flock
    # with the process; the wait only covers the server's side of that.
    after = workers.run("after", "--wait", "60")
    assert after["event"] == "done"
    assert after["turns"] == "after"


def test_a_turn_interrupted_for_approval_leaves_the_thread_free(workers: _Workers) -> None:
    asking = workers.start("A", "--hitl", "--linger")
    try:
        read_event(asking, "interrupted")
        # Its process lives on; another one resumes the turn, a third one runs the next turn.
        # The lease goes back on a timer about 0.2 s after the run ended (`release_when_done`),
        # which a new interpreter's start-up used to outlast; a forked worker can start sooner,
        # so the resuming one waits for it (30 s: only a hang guard).
        resumed = workers.run("R", "--resume", "--wait", "30")
        following = workers.run("C")
    finally:
        asking.communicate(timeout=HANG_GUARD)
    assert resumed["event"] == "done"
    assert resumed["turns"] == "A"
    assert following["event"] == "done"
    assert following["turns"] == "AC"
    assert following["humans"] == ["A", "C"]


def test_a_turn_whose_model_failed_leaves_the_thread_free(workers: _Workers) -> None:
    failing = workers.start("A", "--fail", "--linger")
    try:
        assert read_event(failing, "failed")["message"] == "the model failed"
        following = workers.run("B")
    finally:
        failing.communicate(timeout=HANG_GUARD)
    assert following["event"] == "done"
    assert following["turns"] == "B"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_explicit_postgres_thread_lock_refuses_a_second_worker(
    postgres_dsn: str, blobs: str, mode: str
) -> None:
    workers = _Workers(("postgres", postgres_dsn), blobs)
    flags = ("--explicit-lock", *(("--async",) if mode == "async" else ()))
    first = workers.start("A", "--pause", *flags)
    try:
        read_event(first, "holding")
        refused = workers.run("B", *flags)
        done_first = last(first)
    finally:
        first.kill()
    assert refused["event"] == "busy"
    assert f"Another run holds thread {workers.thread!r}" in refused["message"]
    assert done_first["event"] == "done"


def test_savers_on_a_pool_and_on_a_connection_lease_the_same_thread(postgres_dsn: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg_pool import ConnectionPool

    from langchain_sandbox.checkpointing.thread_lease import acquire, lease_backend, release

    class _Owner:
        pass

    thread, first, second = f"pooled-{uuid.uuid4().hex[:8]}", _Owner(), _Owner()
    with (
        ConnectionPool(postgres_dsn, kwargs={"autocommit": True}, open=True) as pool,
        PostgresSaver.from_conn_string(postgres_dsn) as single,
    ):
        pooled_backend = lease_backend(PostgresSaver(pool), None)
        single_backend = lease_backend(single, None)
        assert pooled_backend is not None
        assert single_backend is not None
        acquire(pooled_backend, thread, first)
        try:
            # The pool's connection string is rebuilt from the pool's own (password included):
            # both savers lease in the same database, whichever of them asks.
            with pytest.raises(ThreadBusyError, match=repr(thread)):
                acquire(single_backend, thread, second)
        finally:
            release(pooled_backend, thread, first)
        acquire(single_backend, thread, second)
        release(single_backend, thread, second)
