"""What a restore must undo, and what the model must be told, when a new process takes a thread over.

Each story runs ``agent_worker.py`` (story ``code``: every human message is code the model runs)
in fresh processes, one of them killed with SIGKILL, with a SQLite or Postgres checkpointer and
the snapshot blobs in a shared directory, on every provider: local, and E2B and Runloop through
their SDKs against emulators that outlive the workers (``story_providers.py``). Each fails when
its behaviour is broken: checked by disabling the restore's removals, and by dropping each
notice, in ``snapshotter.py`` and ``rehydration.py``.

A snapshot written behind (E2B, Runloop) that fails is told on the thread's next call, so the
stories flush it and make one more call before they look at what the model read.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from story_providers import StoryProvider
from test_durable_sessions import HANG_GUARD, Story, read_event

# Every provider with SQLite, and Postgres on the local one: the checkpointer and the provider are
# independent parts of a story, so each is covered without running every pair (each story runs
# 5-25 s).
_SETUPS = [("sqlite", "local"), ("postgres", "local"), ("sqlite", "e2b"), ("sqlite", "runloop")]
STORY_SETUPS = pytest.mark.parametrize(("saver", "story_provider"), _SETUPS, indirect=True)
# Kubernetes too where a story needs no background process or port (its Capabilities say no).
RESTORE_SETUPS = pytest.mark.parametrize(
    ("saver", "story_provider"), [*_SETUPS, ("sqlite", "kubernetes")], indirect=True
)

_TXT_FILES = "import os\nprint(sorted(n for n in os.listdir('.') if n.endswith('.txt')))"
RECHECK_EVERY_CAPTURE = ("--store-recheck-seconds", "0")


def _stdout(tool_text: str) -> str:
    return tool_text.split("stdout:\n", 1)[1].split("\n[", 1)[0].strip()


def _send(worker: Any, command: dict[str, Any], reply: str) -> dict[str, Any]:
    worker.stdin.write(json.dumps(command) + "\n")
    worker.stdin.flush()
    return read_event(worker, reply)


def _turn(worker: Any, command: dict[str, Any]) -> dict[str, Any]:
    return _send(worker, command, "turn")


def _flush(worker: Any) -> None:
    """Wait until the worker's snapshots written behind are complete (or failed)."""
    _send(worker, {"flush": True}, "flushed")


def _kill(worker: Any) -> None:
    os.kill(worker.pid, signal.SIGKILL)
    worker.communicate(timeout=HANG_GUARD)
    assert worker.returncode == -signal.SIGKILL


def _story(saver: tuple[str, str], blobs: str, provider: StoryProvider, *extra: str) -> Story:
    return Story("code", *saver, blobs, *provider.worker_args, *extra, env=provider.env)


def _break(store: Path, aside: Path) -> None:
    """The store's volume goes bad: a file stands where its directory was."""
    store.rename(aside)
    store.write_text("")


def _mend(store: Path, aside: Path) -> None:
    store.unlink()
    aside.rename(store)


@RESTORE_SETUPS
def test_a_fork_in_a_new_process_removes_the_files_made_after_its_checkpoint(
    saver: tuple[str, str], blobs: str, story_provider: StoryProvider
) -> None:
    """Process A makes a.txt, then extra.txt, and is killed. Process B continues the thread: a
    local sandbox died with A, so B's new one is restored with both files; an E2B or Runloop one
    outlived A, and B attaches to it (nothing restored). B then forks from the checkpoint before
    extra.txt existed: the restore into its live sandbox (on E2B and Runloop, the one A made)
    must remove extra.txt."""
    story = _story(saver, blobs, story_provider)
    first = story.start("--serve")
    try:
        read_event(first, "ready")
        _turn(first, {"message": "open('a.txt', 'w').write('one')"})
        later = _turn(first, {"message": "open('extra.txt', 'w').write('late')"})
        _flush(first)
    finally:
        _kill(first)
    (before_extra,) = [h["id"] for h in later["history"] if h["tools"] == 1 and h["next"] == []]
    second = story.start("--serve")
    try:
        read_event(second, "ready")
        head = _turn(second, {"message": _TXT_FILES})
        fork = _turn(second, {"message": _TXT_FILES, "checkpoint_id": before_extra})
    finally:
        second.communicate(timeout=HANG_GUARD)
    assert _stdout(head["tools"][-1]) == "['a.txt', 'extra.txt']"
    attached = "restored" not in head["tools"][-1]
    assert attached == story_provider.sandboxes_outlive_their_process, head["tools"][-1]
    assert _stdout(fork["tools"][-1]) == "['a.txt']", fork["tools"][-1]
    assert "restored from the snapshot of revision 1" in fork["tools"][-1]


@RESTORE_SETUPS
def test_a_new_process_says_the_sandbox_is_new_when_no_snapshot_was_saved(
    tmp_path: Path, saver: tuple[str, str], story_provider: StoryProvider
) -> None:
    """Process A cannot write the snapshot store (a file stands where its directory goes), so
    its steps keep no snapshot, and the model is told. A ends and its sandbox is gone. Process
    B, with the store usable again, cannot restore the thread: it starts empty and tells the
    model so, instead of showing an empty workspace as if nothing had happened."""
    blocker = tmp_path / "store-volume"
    blocker.write_text("")
    story = _story(saver, str(blocker / "blobs"), story_provider)
    first = story.start("--serve")
    try:
        read_event(first, "ready")
        _turn(first, {"message": "x = 1\nopen('a.txt', 'w').write('one')"})
        _flush(first)
        told = _turn(first, {"message": "print('next')"})
    finally:
        first.communicate(timeout=HANG_GUARD)
    assert first.returncode == 0
    assert "Could not save a snapshot of revision 1" in "\n".join(told["tools"])
    assert told["sandbox"].get("snapshot") is None
    story_provider.lose_every_sandbox()
    blocker.unlink()  # the operator fixes the volume
    second = story.run("--message", "import os\nprint(os.path.exists('a.txt'), 'x' in globals())")
    text = second["tools"][-1]
    assert (
        "This sandbox is new: the state of revision 2 could not be restored because no "
        "snapshot of it was saved." in text
    ), text
    assert _stdout(text) == "False False"


@RESTORE_SETUPS
def test_sigkill_after_a_step_whose_snapshot_failed_restores_the_last_one_and_says_what_was_lost(
    tmp_path: Path, blobs: str, saver: tuple[str, str], story_provider: StoryProvider
) -> None:
    """Turn 1's snapshot is saved; turn 2's cannot be (the store's directory is replaced by a
    file), and the model is told; then the process is killed and its sandbox is gone. The next
    process restores turn 1's snapshot and tells the model that the later changes are lost."""
    story = _story(saver, blobs, story_provider, *RECHECK_EVERY_CAPTURE)
    worker = story.start("--serve")
    store, aside = Path(blobs), tmp_path / "store-aside"
    try:
        read_event(worker, "ready")
        _turn(worker, {"message": "open('a.txt', 'w').write('one')"})
        _flush(worker)
        _break(store, aside)
        _turn(worker, {"message": "open('a.txt', 'w').write('two')"})
        _flush(worker)
        told = _turn(worker, {"message": "print('next')"})
    finally:
        _kill(worker)
    assert "Could not save a snapshot of revision 2" in "\n".join(told["tools"])
    story_provider.lose_every_sandbox()
    _mend(store, aside)
    resumed = story.run("--message", "print(open('a.txt').read())")
    text = resumed["tools"][-1]
    assert "[notice] The sandbox was restored from the snapshot of revision 1." in text
    assert "Changes made after revision 1 (up to 3) were not saved and are lost." in text
    assert _stdout(text) == "one"
