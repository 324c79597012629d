"""Durable sandbox sessions (issue #4), told as stories across real processes.

Every story runs ``agent_worker.py`` in Python processes of their own (forked from the test
kit's pre-imported zygote, ``tests/forked_python.py``): the sandbox of one process dies with it,
so whatever the next process finds came through the checkpointer (SQLite file or a real Postgres
server) and the snapshot store (a shared directory, or blobs in a Postgres store).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import forked_python
import pytest

WORKER = Path(__file__).with_name("agent_worker.py")
HANG_GUARD = 240  # seconds; only so that a broken run fails instead of hanging


def _command(*args: str) -> list[str]:
    return [sys.executable, str(WORKER), *args]


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_worker(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one worker to the end; return its ``done`` event."""
    proc = forked_python.run(
        _command(*args), capture_output=True, text=True, timeout=HANG_GUARD, check=False, env=env
    )
    done = [e for e in _events(proc.stdout) if e["event"] == "done"]
    if proc.returncode != 0 or not done:
        raise AssertionError(
            f"worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}\n"
            f"its last output:\n{proc.stdout[-1500:]}"
        )
    return done[-1]


class Story:
    """Arguments shared by every process of one story: saver, blob store, thread."""

    def __init__(
        self,
        story: str,
        saver: str,
        target: str,
        blobs: str,
        *extra: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.env = env
        self.base = [
            "--story", story, "--saver", saver, "--target", target,
            "--blobs", blobs, "--thread", f"t-{uuid.uuid4().hex[:8]}", *extra,
        ]  # fmt: skip

    def run(self, *args: str) -> dict[str, Any]:
        return run_worker(*self.base, *args, env=self.env)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return forked_python.popen(
            _command(*self.base, *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )


def read_event(proc: subprocess.Popen[str], wanted: str) -> dict[str, Any]:
    """Read the worker's stdout until the event ``wanted`` (the test's hang guard applies)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            event: dict[str, Any] = json.loads(line)
            if event["event"] == wanted:
                return event
    stderr = proc.stderr.read() if proc.stderr else ""
    raise AssertionError(f"worker ended before {wanted!r}:\n{stderr[-4000:]}")


# -- crash and resume ----------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_sigkill_mid_run_then_resume_in_a_new_process(
    saver: tuple[str, str], blobs: str, flavour: str
) -> None:
    """Kill the process (SIGKILL) while the model is thinking; a new process resumes the thread
    and finds the files and variables of the last checkpoint."""
    extra = ["--async"] if flavour == "async" else []
    story = Story("crash", *saver, blobs, *extra)
    doomed = story.start("--message", "go", "--block-at-turn", "3")
    try:
        assert read_event(doomed, "blocked")["turn"] == 3
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.communicate(timeout=HANG_GUARD)
    assert doomed.returncode == -signal.SIGKILL

    resumed = story.run()  # invoke(None): continue from the last checkpoint
    *_, last_tool = resumed["tools"]
    assert "42 [41, 'kept'] first second ['a,b', '1,2']" in last_tool
    # the model is told the sandbox came back from a snapshot
    assert "[notice] The sandbox was restored from the snapshot of revision 4." in last_tool
    assert resumed["last"] == "done"
    # one record merged from the two parallel calls of step 2, then counted on
    assert resumed["sandbox"]["revision"] == 5
    assert resumed["sandbox"]["exec_count"] == 4


def _kill_while_blocked(story: Story, *args: str, until: Callable[[], bool] = lambda: True) -> None:
    """SIGKILL the story's process once its model blocks and ``until()`` holds (what else the
    process started before blocking, a snapshot written behind, may still be on its way)."""
    doomed = story.start(*args)
    try:
        read_event(doomed, "blocked")
        deadline = time.monotonic() + HANG_GUARD
        while not until() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.communicate(timeout=HANG_GUARD)
    assert doomed.returncode == -signal.SIGKILL


def test_after_sigkill_a_local_sandbox_is_restored_and_says_what_was_lost(
    tmp_path: Path, blobs: str
) -> None:
    """A local sandbox dies with its process: the next process restores the snapshot, and the
    model is told which variable could not be kept."""
    story = Story("attach", "sqlite", str(tmp_path / "cp.sqlite"), blobs)
    _kill_while_blocked(story, "--message", "go", "--block-at-turn", "1")
    text = story.run()["tools"][-1]
    assert "restored from the snapshot of revision 1" in text
    assert "lock" in text.split("[error]")[0]  # the notice names the variable that is gone
    assert "NameError: name 'lock' is not defined" in text


# -- fork and time travel ------------------------------------------------------------------------


def _checkpoint(history: list[dict[str, Any]], *, tools: int, next_node: str) -> str:
    matches = [h["id"] for h in history if h["tools"] == tools and h["next"] == [next_node]]
    assert matches, history
    return str(matches[0])


def test_fork_time_travel_and_update_state_see_the_workspace_of_their_checkpoint(
    tmp_path: Path, blobs: str
) -> None:
    story = Story("fork", "sqlite", str(tmp_path / "cp.sqlite"), blobs)
    original = story.run("--message", "start")
    assert "before 1 one" in original["tools"][-1]
    original_head = original["history"][0]["id"]
    # checkpoint N: after the first step (v = 1, f.txt = "one"), before the model's second turn
    n = _checkpoint(original["history"], tools=1, next_node="model")

    # replay from N in a new process: the second step sees N's workspace, not the latest one
    fork = story.run("--checkpoint-id", n)
    assert "before 1 one" in fork["tools"][-1]
    assert "restored from the snapshot of revision 1" in fork["tools"][-1]
    fork_head = fork["history"][0]["id"]

    # the original branch, continued later, still sees its own state
    later = story.run("--checkpoint-id", original_head, "--message", "orig")
    assert "now 2 two" in later["tools"][-1]
    # before_agent restored it; the model reads that with the thread's next sandbox result
    assert "restored from the snapshot of revision 2" in later["tools"][-1]
    later_head = later["history"][0]["id"]

    # the fork, continued after that, does not see what the original branch wrote
    fork_later = story.run("--checkpoint-id", fork_head, "--message", "fork")
    assert "now 2 two" in fork_later["tools"][-1]

    # and back on the original branch: its own message, its own variable
    again = story.run("--checkpoint-id", later_head, "--message", "orig2")
    assert "now 12 orig" in again["tools"][-1]

    # update_state on checkpoint N, then continue: N's workspace again
    edited = story.run("--checkpoint-id", n, "--update-message", "edited")
    assert "now 1 one" in edited["tools"][-1]


# -- human approval ------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_interrupt_then_resume_elsewhere_does_not_repeat_the_side_effect(
    tmp_path: Path, blobs: str, flavour: str
) -> None:
    """One AI message asks for a sandbox side effect and a human's approval. The approval
    interrupts the node; resuming (in another process) re-runs the node, but the side effect is
    replayed from the checkpoint, not executed again."""
    extra = ["--async"] if flavour == "async" else []
    story = Story("approval", "sqlite", str(tmp_path / "cp.sqlite"), blobs, *extra)
    paused = story.run("--message", "go")
    assert paused["interrupted"]
    resumed = story.run("--resume", json.dumps("yes, publish"))
    assert "yes, publish" in resumed["tools"]
    assert "'effect\\n' set once" in resumed["tools"][-1]
    assert resumed["last"] == "approved and done"


def test_human_in_the_loop_middleware_approval_resumed_in_another_process(
    postgres_dsn: str, blobs: str
) -> None:
    story = Story("hitl", "postgres", postgres_dsn, blobs)
    paused = story.run("--message", "go")
    assert paused["interrupted"]
    assert paused["tools"] == []  # gated: nothing ran before the approval
    approve = json.dumps({"decisions": [{"type": "approve"}]})
    first = story.run("--resume", approve)
    assert first["interrupted"]  # the second exec is gated too
    assert "wrote" in first["tools"][-1]
    second = story.run("--resume", approve)
    assert "'effect\\n'" in second["tools"][-1]
    assert second["last"] == "done"


# -- several workers, one Postgres checkpointer ----------------------------------------------------


def test_two_workers_alternating_turns_never_hold_two_live_sandboxes(postgres_dsn: str) -> None:
    """Workers A and B (separate processes) take turns on one thread with one Postgres
    checkpointer and snapshot blobs in a Postgres store. Each turn continues the other worker's
    state; between turns no worker holds a live sandbox for the thread, so there are never two."""
    story = Story("count", "postgres", postgres_dsn, postgres_dsn, "--release-between-turns")
    workers: list[subprocess.Popen[str]] = []
    try:
        for _ in range(2):  # one after the other: both run the savers' schema setup
            workers.append(story.start("--serve"))
            read_event(workers[-1], "ready")
        for turn in range(1, 5):
            active, idle = workers[turn % 2], workers[(turn + 1) % 2]
            assert active.stdin is not None
            assert idle.stdin is not None
            active.stdin.write(json.dumps({"message": f"turn {turn}"}) + "\n")
            active.stdin.flush()
            reply = read_event(active, "turn")
            n, log = reply["tools"][-1].split("stdout:\n", 1)[1].split(" ", 1)
            assert int(n) == turn  # the variable came from the other worker's turn
            assert log.count(":") == turn  # and so did the file
            assert reply["live"] == {}
            idle.stdin.write(json.dumps({"live": True}) + "\n")
            idle.stdin.flush()
            assert read_event(idle, "live")["live"] == {}
    finally:
        for worker in workers:
            worker.communicate(timeout=HANG_GUARD)  # closes stdin: the worker ends


def test_after_sigkill_a_remote_sandbox_is_attached_not_restored(
    tmp_path: Path, blobs: str
) -> None:
    """E2B sandboxes outlive the process that made them (here: the E2B emulator, through the
    real SDK). The next process attaches to the same sandbox, so even an unpicklable variable is
    still there and nothing is restored."""
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator(api_key="e2b_" + uuid.uuid4().hex) as emulator:
        env = {**os.environ, **emulator.env()}
        story = Story(
            "attach", "sqlite", str(tmp_path / "cp.sqlite"), blobs, "--provider", "e2b", env=env
        )
        _kill_while_blocked(story, "--message", "go", "--block-at-turn", "1")
        resumed = story.run()
    assert resumed["tools"][-1].strip() == "stdout:\nlock 1 kept"  # no notice: same sandbox


# -- snapshots written behind (remote sandboxes outlive the process) -------------------------------


@contextlib.contextmanager
def _e2b_story(story: str, tmp_path: Path, blobs: str) -> Iterator[tuple[Any, Story]]:
    """An E2B emulator in this process (it outlives the worker processes and their SIGKILL) and a
    story whose workers use it through the real SDK, with a SQLite checkpointer."""
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator(api_key="e2b_" + uuid.uuid4().hex) as emulator:
        env = {**os.environ, **emulator.env()}
        yield (
            emulator,
            Story(
                story, "sqlite", str(tmp_path / "cp.sqlite"), blobs, "--provider", "e2b", env=env
            ),
        )


_CAPTURE_CELL = "guest_changes"
"""In the code of the one cell an E2B capture runs (its listing, files and variables)."""


def _is_capture(request: Any) -> bool:
    return request.route == "jupyter execute" and _CAPTURE_CELL in str(request.body.get("code"))


def _kill_while_the_snapshot_is_held(emulator: Any, story: Story) -> None:
    """Run two steps; hold the second step's snapshot in its request; SIGKILL the process while
    the model thinks, before that snapshot completes."""
    import threading

    release = threading.Event()
    # the first step's snapshot completes
    held = emulator.inject("jupyter execute", body=_CAPTURE_CELL, hold=release, after=1)
    try:
        # The second snapshot is written behind: the model may block before it reaches the
        # emulator, and the kill waits until it is there, held.
        _kill_while_blocked(
            story, "--message", "go", "--block-at-turn", "2", until=lambda: held.hits == 1
        )
        listings = [r for r in emulator.requests if _is_capture(r)]
        assert [r.status for r in listings] == [200, 0]  # the second was still being captured
    finally:
        release.set()
        emulator.clear_faults()


def test_sigkill_before_a_snapshot_written_behind_completes_attaches_to_the_sandbox(
    tmp_path: Path, blobs: str
) -> None:
    with _e2b_story("behind", tmp_path, blobs) as (emulator, story):
        _kill_while_the_snapshot_is_held(emulator, story)
        resumed = story.run()
    # the same sandbox, at the checkpoint's head: the lock (never picklable) is still there
    assert resumed["tools"][-1].strip() == "stdout:\n2 two\nlock"
    assert resumed["sandbox"]["revision"] == 3


def test_sigkill_and_a_lost_sandbox_restore_the_last_complete_snapshot_and_say_what_was_lost(
    tmp_path: Path, blobs: str
) -> None:
    with _e2b_story("behind", tmp_path, blobs) as (emulator, story):
        _kill_while_the_snapshot_is_held(emulator, story)
        (sandbox_id,) = emulator.sandbox_ids()
        emulator.expire(sandbox_id)
        resumed = story.run()
    text = resumed["tools"][-1]
    assert "[notice] The sandbox was restored from the snapshot of revision 1." in text
    assert "Changes made after revision 1 (up to 2) were not saved and are lost." in text
    assert "1 one" in text
    assert "NameError: name 'lock' is not defined" in text


def test_fork_while_a_snapshot_is_written_behind_sees_its_checkpoint(
    tmp_path: Path, blobs: str
) -> None:
    """The second step's snapshot is still being written when the process forks from the first
    step; the fork sees the first step's state, and the original branch, continued afterwards
    (its sandbox was replaced by the fork's), finds its late snapshot: nothing is lost."""
    with _e2b_story("fork", tmp_path, blobs) as (emulator, story):
        # the second step's capture takes a while: the fork arrives while it is in flight
        emulator.inject("jupyter execute", body=_CAPTURE_CELL, delay=3.0, after=1)
        done = story.run("--fork-in-flight")
    assert list(done["pending"].values()) == [2]
    assert "now 1 one" in done["fork"]
    assert "now 2 two" in done["main"]
    assert "restored from the snapshot of revision 2." in done["main"]
    assert "not saved" not in done["main"]
