"""``langchain-sandbox gc`` never deletes what a paused, resumable or other application's thread
still needs (issue #9 item 6, issue #11's gc gap), told with real processes and checkpointers.

Each story runs the workers of ``agent_worker.py`` / ``deep_agent_worker.py`` (every process
starts with no sandbox), then the ``langchain-sandbox gc`` command as a user runs it, with
``--grace 0`` so that only references, never the age of a blob, keep it; then a new process
resumes the thread and must find its files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import forked_python
import pytest
from test_durable_sessions import Story

HANG_GUARD = 240  # seconds; only so that a broken run fails instead of hanging


def gc(checkpointers: list[str], blobs: str, *extra: str) -> dict[str, Any]:
    """Run ``langchain-sandbox gc --yes --grace 0 --json`` and return its report."""
    command = [sys.executable, "-m", "langchain_sandbox.cli", "gc", "--blobs", blobs]
    command += [f"--checkpointer={url}" for url in checkpointers]
    done = forked_python.run(
        [*command, "--grace", "0", "--yes", "--json", *extra],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def blob_count(blobs: str) -> int:
    return sum(1 for path in Path(blobs).rglob("*") if path.is_file() and len(path.name) == 62)


def checkpointer_url(saver: tuple[str, str]) -> str:
    kind, target = saver
    return f"sqlite:///{target}" if kind == "sqlite" else target


def test_gc_of_two_applications_keeps_what_a_paused_parallel_step_saved(
    tmp_path: Path, saver: tuple[str, str], blobs: str
) -> None:
    """App B (create_agent) is paused mid-step: of one message's two calls, the sandbox call
    finished (its record is a ``sandbox`` write among the step's pending writes) and the other
    waits at ``interrupt()``. App A shares the blob store. gc given both checkpointers keeps
    B's snapshot; B resumes in a new process with its file and variable."""
    mine = ("sqlite", str(tmp_path / "a.sqlite"))
    app_a = Story("count", *mine, blobs)
    app_b = Story("approval-agent", *saver, blobs)
    assert count_of(app_a.run("--message", "a1")) == (1, 1)
    assert app_b.run("--message", "go")["interrupted"]

    report = gc([checkpointer_url(mine), checkpointer_url(saver)], blobs)
    assert report["blobs"]["deleted_blobs"] == 0, report

    resumed = app_b.run("--resume", json.dumps("yes"))
    assert "'effect\\n' set once" in resumed["tools"][-1], resumed["tools"]
    assert resumed["last"] == "approved and done"
    assert count_of(app_a.run("--message", "a2")) == (2, 2)


def test_gc_keeps_the_snapshot_a_run_paused_at_interrupt_names_only_in_pending_writes(
    saver: tuple[str, str], blobs: str
) -> None:
    """One AI message: a sandbox side effect and a human approval (``interrupt()``). While the
    run waits, the side effect's snapshot is named only by the checkpoint's pending writes (the
    node has not finished). gc must keep it: the resume, in a new process, reads the file."""
    story = Story("approval", *saver, blobs)
    paused = story.run("--message", "go")
    assert paused["interrupted"]
    before = blob_count(blobs)
    assert before > 0

    report = gc([checkpointer_url(saver)], blobs)
    assert report["blobs"]["deleted_blobs"] == 0, report
    assert blob_count(blobs) == before

    resumed = story.run("--resume", json.dumps("yes, publish"))
    assert "'effect\\n' set once" in resumed["tools"][-1]
    assert "started empty" not in resumed["tools"][-1]
    assert resumed["last"] == "approved and done"


def test_gc_keeps_what_a_deep_agent_thread_needs(saver: tuple[str, str], blobs: str) -> None:
    """A deep agent's graph has no ``sandbox`` channel: the backend files its records in the
    store, keyed by the conversation. gc reads the conversations of the checkpoints and keeps
    those records and their snapshots, so a killed thread resumes with its files."""
    pytest.importorskip("deepagents")
    from test_durable_deepagents import FINAL, Thread

    thread = Thread(saver, blobs)
    thread.kill_when_blocked("--message", "go", "--block-at-turn", "2")
    before = blob_count(blobs)

    report = gc([checkpointer_url(saver)], blobs)
    assert report["blobs"]["deleted_blobs"] == 0, report
    assert blob_count(blobs) == before
    assert report["checkpointers"] == [served_name(saver)]  # the backend noted its checkpointer

    resumed = thread.run()
    assert FINAL in resumed["tools"][-1]
    assert "[notice] The sandbox was restored from the snapshot" in resumed["tools"][-1]


def test_gc_keeps_both_branches_of_a_replayed_deep_agent_step(
    saver: tuple[str, str], blobs: str
) -> None:
    """Time travel replays turn 0's tool calls (the same AI message): each branch's records are
    filed under the step its calls ran in. gc keeps both branches' records and snapshots, and
    new processes continuing either branch read the ``run.txt`` of their own."""
    pytest.importorskip("deepagents")
    from test_durable_deepagents import Thread, branch_stamps, replay_first_tools

    thread = Thread(saver, blobs)
    original, stamps = replay_first_tools(thread)

    report = gc([checkpointer_url(saver)], blobs)
    assert report["blobs"]["deleted_blobs"] == 0, report
    assert branch_stamps(thread, original) == stamps


def test_gc_keeps_what_a_deep_agent_s_subagent_wrote(saver: tuple[str, str], blobs: str) -> None:
    """A subagent's records are filed under its own conversation, which no checkpoint of the
    parent holds, and under the parent's ``task`` call, which gc finds in the parent's: killed
    after the subagent ran, collected, resumed in a new process, the parent sees its files."""
    pytest.importorskip("deepagents")
    from test_durable_deepagents import BOTH, Thread

    thread = Thread(saver, blobs, "--subagent")
    thread.kill_when_blocked("--message", "go", "--block-at-turn", "2")
    gc([checkpointer_url(saver)], blobs)

    resumed = thread.run()
    assert BOTH in resumed["tools"][-1], resumed["tools"]
    assert "[notice] The sandbox was restored from the snapshot" in resumed["tools"][-1]


def gc_refused(checkpointers: list[str], blobs: str, *extra: str) -> str:
    """Run ``gc --yes --grace 0`` expecting a refusal (exit code 2); return its message."""
    command = [sys.executable, "-m", "langchain_sandbox.cli", "gc", "--blobs", blobs]
    command += [f"--checkpointer={url}" for url in checkpointers]
    done = forked_python.run(
        [*command, "--grace", "0", "--yes", *extra],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    return done.stderr


def served_name(saver: tuple[str, str]) -> str:
    """The name under which the store lists a checkpointer (the URL without credentials)."""
    kind, target = saver
    if kind == "sqlite":
        return f"sqlite:///{Path(target).resolve()}"
    host_port_db = target.split("@", 1)[1].split("?", 1)[0]
    return f"postgresql://{host_port_db}"


def count_of(event: dict[str, Any]) -> tuple[int, int]:
    """(the counter variable, lines in the log file) a ``count`` story turn printed."""
    n, log = event["tools"][-1].split("stdout:\n", 1)[1].split(" ", 1)
    return int(n), log.count(":")


def test_two_applications_sharing_the_blob_store(
    tmp_path: Path, saver: tuple[str, str], blobs: str
) -> None:
    """Applications A (SQLite) and B (SQLite, or Postgres) keep their snapshots in one blob
    directory. gc given only A's checkpointer refuses, naming B's, and deletes nothing; given
    both, it collects and B's thread continues with its variable and file in a new process."""
    mine = ("sqlite", str(tmp_path / "a.sqlite"))
    app_a = Story("count", *mine, blobs)
    app_b = Story("count", *saver, blobs)
    assert count_of(app_a.run("--message", "a1")) == (1, 1)
    assert count_of(app_b.run("--message", "b1")) == (1, 1)
    before = blob_count(blobs)

    refusal = gc_refused([checkpointer_url(mine)], blobs)
    assert served_name(saver) in refusal
    assert served_name(mine) not in refusal
    assert "--checkpointer" in refusal
    assert "Traceback" not in refusal
    assert blob_count(blobs) == before

    report = gc([checkpointer_url(mine), checkpointer_url(saver)], blobs)
    assert sorted(report["checkpointers"]) == sorted([served_name(mine), served_name(saver)])
    assert count_of(app_b.run("--message", "b2")) == (2, 2)
    assert count_of(app_a.run("--message", "a2")) == (2, 2)


def test_a_gone_application_is_forgotten_by_name_then_its_blobs_are_collected(
    tmp_path: Path, blobs: str
) -> None:
    """B's checkpoints are deleted for good: gc given A's checkpointer still refuses (it cannot
    know B is gone) until told to forget B's name; then B's blobs go and A's stay."""
    mine, gone = ("sqlite", str(tmp_path / "a.sqlite")), ("sqlite", str(tmp_path / "b.sqlite"))
    app_a = Story("count", *mine, blobs)
    Story("approval", *gone, blobs).run("--message", "go")  # its own file contents
    assert count_of(app_a.run("--message", "a1")) == (1, 1)
    Path(gone[1]).unlink()

    assert served_name(gone) in gc_refused([checkpointer_url(mine)], blobs)
    command = [sys.executable, "-m", "langchain_sandbox.cli", "gc", "--blobs", blobs, "--json"]
    command += [f"--checkpointer={checkpointer_url(mine)}", "--grace", "0"]
    preview = forked_python.run(
        [*command, f"--forget-checkpointer={served_name(gone)}"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    assert preview.returncode == 0, preview.stderr
    assert json.loads(preview.stdout)["blobs"]["deleted_blobs"] > 0
    assert served_name(gone) in gc_refused(
        [checkpointer_url(mine)], blobs
    )  # a dry run forgot nothing

    report = gc([checkpointer_url(mine)], blobs, f"--forget-checkpointer={served_name(gone)}")
    assert report["blobs"]["deleted_blobs"] > 0
    assert report["checkpointers"] == [served_name(mine)]
    assert gc([checkpointer_url(mine)], blobs)["blobs"]["deleted_blobs"] == 0
    assert count_of(app_a.run("--message", "a2")) == (2, 2)


def test_gc_keeps_both_branches_of_a_forked_deep_agent_thread(
    saver: tuple[str, str], blobs: str
) -> None:
    """A deep agent's conversation is stored as changes along each branch: a fork's turn belongs
    to the human message of its own branch. After gc, both the fork's head and the original
    checkpoint before the fork still continue from their own files, in new processes."""
    pytest.importorskip("deepagents")
    from test_durable_deepagents import FINAL, Thread, _shown, after_first_tools

    thread = Thread(saver, blobs)
    done = thread.run("--message", "go")
    assert FINAL in done["tools"][-1]
    after_turn_0 = after_first_tools(done)
    early = thread.run("--checkpoint-id", after_turn_0, "--message", "fork: early")
    assert _shown(early) == "first\nearly"

    report = gc([checkpointer_url(saver)], blobs)
    assert report["blobs"]["live_refs"] > 0, report

    onward = thread.run("--checkpoint-id", early["history"][0]["id"], "--message", "fork: on")
    assert _shown(onward) == "early\non"
    again = thread.run("--checkpoint-id", after_turn_0, "--message", "fork: again")
    assert _shown(again) == "first\nagain"
    late = thread.run("--checkpoint-id", done["history"][0]["id"], "--message", "fork: late")
    assert _shown(late) == "first second\nlate"
