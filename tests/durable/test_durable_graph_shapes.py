"""Durability of the graph shapes where a sandbox call's own state is not the whole story (issue #9):
parallel calls re-run after a SIGKILL mid-step, ``Send`` fan-out to ``SandboxToolNode``, and a
tool node inside a subgraph. Every run is a fresh process (``graph_worker.py``); only the
checkpointer (SQLite file or a real Postgres server) and the snapshot store connect them.
"""

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

WORKER = Path(__file__).with_name("graph_worker.py")


class Thread:
    """One thread of one graph shape, run by a fresh worker process per turn."""

    def __init__(
        self,
        shape: str,
        saver: tuple[str, str],
        blobs: str,
        *extra: str,
        env: dict[str, str] | None = None,
    ) -> None:
        kind, target = saver
        self.env = env
        self.base = [
            sys.executable, str(WORKER), "--shape", shape, "--saver", kind, "--target", target,
            "--blobs", blobs, "--thread", f"t-{uuid.uuid4().hex[:8]}", *extra,
        ]  # fmt: skip

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return forked_python.run(
            [*self.base, *args],
            capture_output=True,
            text=True,
            timeout=HANG_GUARD,
            check=False,
            env=self.env,
        )

    def done(self, *args: str) -> dict[str, Any]:
        proc = self.run(*args)
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        done = [e for e in events if e["event"] == "done"]
        if proc.returncode != 0 or not done:
            raise AssertionError(f"worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return done[-1]

    def start(self, *args: str) -> subprocess.Popen[str]:
        return forked_python.popen(
            [*self.base, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )


@pytest.fixture
def sqlite(tmp_path: Path) -> tuple[str, str]:
    return "sqlite", str(tmp_path / "checkpoints.sqlite")


# -- parallel calls, SIGKILL mid-step ------------------------------------------------------------


def _kill_while_b_waits(thread: Thread, blocked: str = "B") -> None:
    """Start turn 1 with call ``blocked`` held once the calls before it have saved their work,
    then SIGKILL the process."""
    doomed = thread.start("--message", "go", "--block-call", blocked)
    try:
        assert read_event(doomed, "blocked")["call"] == blocked
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.communicate(timeout=HANG_GUARD)
    assert doomed.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    ("shape", "flavour"),
    [
        ("parallel", "sync"),
        ("parallel", "async"),
        ("sub-parallel", "sync"),
        ("parallel", "durability-async"),
    ],
)
def test_a_call_rerun_after_sigkill_mid_step_starts_from_the_finished_calls_state(
    saver: tuple[str, str], blobs: str, shape: str, flavour: str
) -> None:
    """One AI message, calls A and B. A finishes (its record is saved among the step's pending
    writes); the process is SIGKILLed while B runs. The resume re-runs only B: it must start
    from A's files and variables, and the step's merged record must keep both calls' work. So
    too when the agent is a subgraph (its step's pending writes are the subgraph's)."""
    extra = {"async": ["--async"], "durability-async": ["--durability", "async"]}.get(flavour, [])
    thread = Thread(shape, saver, blobs, *extra)
    _kill_while_b_waits(thread)

    resumed = thread.done()  # invoke(None): LangGraph re-runs B only
    b_sees, after = resumed["tools"][-2:]
    assert "True\n['a.txt', 'b.txt']" in b_sees, b_sees  # B ran on top of A: x and a.txt
    assert "x = 1 y = None\n['a.txt', 'b.txt']" in after, after  # the merged record kept both calls
    assert resumed["sandbox"]["revision"] == 3  # A: 1, B: 2 (not a second 1), the listing: 3
    assert resumed["last"] == "done"


def test_a_call_rerun_after_sigkill_finds_a_snapshot_written_behind_when_the_sandbox_is_gone(
    sqlite: tuple[str, str], blobs: str
) -> None:
    """E2B (its emulator in this process, through the real SDK): A's record names the last
    complete snapshot (none yet) and its head; its own snapshot is written behind. SIGKILL while
    B waits, and the sandbox expires: the re-run B must find A's snapshot by A's head."""
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator(api_key="e2b_" + uuid.uuid4().hex) as emulator:
        env = {**os.environ, **emulator.env()}
        thread = Thread("parallel", sqlite, blobs, "--provider", "e2b", env=env)
        _kill_while_b_waits(thread)  # once A's snapshot, written behind, is complete
        (sandbox_id,) = emulator.sandbox_ids()
        emulator.expire(sandbox_id)
        resumed = thread.done()
    b_sees, after = resumed["tools"][-2:]
    assert "restored from the snapshot of revision 1." in b_sees, b_sees
    assert "True\n['a.txt', 'b.txt']" in b_sees, b_sees
    assert "x = 1 y = None\n['a.txt', 'b.txt']" in after, after


def test_update_state_on_a_step_cut_by_sigkill_reruns_the_step_without_the_abandoned_writes(
    sqlite: tuple[str, str], blobs: str
) -> None:
    """After the SIGKILL mid-step, a new process edits the state (``update_state``) and goes on
    from the checkpoint it returns: a fork with no pending writes, so LangGraph runs A and B
    again. The abandoned run's saved record (A's, on the step's checkpoint) must not leak into
    the fork: the calls get revisions 1 and 2, and the record keeps both calls' work."""
    thread = Thread("parallel", sqlite, blobs)
    _kill_while_b_waits(thread)

    resumed = thread.done("--update-message", "a note")
    after = resumed["tools"][-1]
    assert "x = 1 y = None\n['a.txt', 'b.txt']" in after, after
    assert resumed["sandbox"]["revision"] == 3  # a leaked record would make it 4


def test_the_one_call_rerun_of_three_starts_from_both_finished_calls(
    saver: tuple[str, str], blobs: str
) -> None:
    """Three calls in one message; A and B finish (both records saved), the SIGKILL hits while
    C waits. C must start from the merge of A's and B's work, and the record keep all three."""
    thread = Thread("parallel3", saver, blobs)
    _kill_while_b_waits(thread, "C")

    resumed = thread.done()
    c_sees, after = resumed["tools"][-2:]
    assert "True True\n['a.txt', 'b.txt', 'c.txt']" in c_sees, c_sees
    assert "x = 1 y = 2\n['a.txt', 'b.txt', 'c.txt']" in after, after
    assert resumed["sandbox"]["revision"] == 4


def test_a_call_rerun_beside_a_replayed_task_starts_from_the_tasks_state(
    sqlite: tuple[str, str], blobs: str
) -> None:
    """The same two calls plus a human approval, in one ToolNode run: each sandbox call is a
    task. A's task result is saved; SIGKILL while B waits. The resume replays A's result and
    runs B, which must start from A's state (the record in A's saved task result)."""
    thread = Thread("tasks", sqlite, blobs)
    _kill_while_b_waits(thread)

    assert thread.done()["interrupted"]  # B ran; the approval asks again
    approved = thread.done("--resume", "yes")  # A and B replay, the approval returns
    _, b, answer, after = approved["tools"]
    assert answer == "yes"
    assert "True\n['a.txt', 'b.txt']" in b, b
    assert "x = 1 y = None\n['a.txt', 'b.txt']" in after, after
    assert approved["sandbox"]["revision"] == 3


# -- Send fan-out to SandboxToolNode ----------------------------------------------------------------


@pytest.mark.parametrize("shape", ["send-with", "send-messages"])
def test_send_fan_out_keeps_every_branchs_files_across_processes(
    sqlite: tuple[str, str], blobs: str, shape: str
) -> None:
    """Each call of an AI message goes to SandboxToolNode in a Send of its own, the payload
    carrying the sandbox record or messages only. Turn 2 runs in a new process: every branch
    starts from turn 1's state, and no branch's file is lost from the record."""
    thread = Thread(shape, sqlite, blobs)
    first = thread.done("--message", "one")
    assert "['t1_1.txt', 't1_2.txt']" in first["tools"][-1]
    assert first["sandbox"]["revision"] == 3

    second = thread.done("--message", "two")
    fan = second["tools"][3:5]
    assert any(
        "[notice] The sandbox was restored from the snapshot of revision 3" in t for t in fan
    )
    assert "['t1_1.txt', 't1_2.txt', 't2_1.txt', 't2_2.txt']" in second["tools"][-1]
    assert second["sandbox"]["revision"] == 6
    # Both calls of each turn wrote shared.txt: the record keeps the one that ran last (its
    # revision is higher), so turn 2 first finds what turn 1's listing read there.
    kept = _stdout_lines(first["tools"][-1])[-1]
    assert kept in ("t1_1", "t1_2")
    assert kept in {_stdout_lines(t)[1] for t in fan}, fan


def _stdout_lines(tool_text: str) -> list[str]:
    return tool_text.split("stdout:\n", 1)[1].strip().splitlines()


def test_a_send_rerun_after_sigkill_mid_step_starts_from_the_finished_sends_state(
    saver: tuple[str, str], blobs: str
) -> None:
    """Two Sends to the tool node, payloads of messages only; the first finishes (its record is
    saved among the step's pending writes) and the SIGKILL hits while the second waits. The
    resume re-runs only the second Send, which has no record of its own: it must continue from
    the graph's channel and the first Send's saved record (its file, shared.txt), and the
    merged record keep both."""
    thread = Thread("send-messages", saver, blobs)
    _kill_while_b_waits(thread, "t1_2")

    resumed = thread.done()
    second, listing = resumed["tools"][-2:]
    assert _stdout_lines(second)[:2] == ["['t1_1.txt']", "t1_1"], second
    assert _stdout_lines(listing) == ["['t1_1.txt', 't1_2.txt']", "t1_2"], listing
    assert resumed["sandbox"]["revision"] == 3


# -- subgraphs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["sub-undeclared", "sub2-mid-only"])
def test_a_subgraph_whose_parent_drops_the_record_is_refused_at_the_first_call(
    sqlite: tuple[str, str], blobs: str, shape: str
) -> None:
    """The agent loop is a subgraph of a parent whose state has no `sandbox` key, or of one
    that declares it but is itself a one-invocation subgraph of a root without it: the record
    would die with each invocation. The first sandbox call refuses, to the developer."""
    proc = Thread(shape, sqlite, blobs).run("--message", "one")
    assert proc.returncode != 0
    assert "ConfigurationError" in proc.stderr
    assert "Declare `sandbox: NotRequired[SandboxChannel]` in the parent graph's state" in (
        proc.stderr
    )
    assert '"event": "done"' not in proc.stdout


@pytest.mark.parametrize(
    "shape", ["sub-declared", "sub-stateful", "sub2-declared", "sub2-mid-stateful"]
)
def test_a_subgraph_keeps_its_sandbox_across_processes_when_the_record_has_a_home(
    sqlite: tuple[str, str], blobs: str, shape: str
) -> None:
    """The parents declare `sandbox` up to the root, or up to a subgraph that keeps its own
    state (`checkpointer=True`): turn 2, in a new process, finds turn 1's files."""
    thread = Thread(shape, sqlite, blobs)
    first = thread.done("--message", "one")
    assert "['t1_1.txt', 't1_2.txt']" in first["tools"][-1]
    second = thread.done("--message", "two")
    assert any("restored from the snapshot of revision 3" in t for t in second["tools"][-3:-1])
    assert "['t1_1.txt', 't1_2.txt', 't2_1.txt', 't2_2.txt']" in second["tools"][-1]
