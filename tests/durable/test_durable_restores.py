"""What a restore must undo, and what the model must be told, when a new process takes a thread over.

Each story runs ``agent_worker.py`` (story ``code``: every human message is code the model runs)
in fresh processes, one of them killed with SIGKILL, with a SQLite or Postgres checkpointer and
the snapshot blobs in a shared directory. Each fails when its behaviour is broken: checked by
disabling the restore's removals, and by dropping each notice, in ``snapshotter.py`` and
``rehydration.py``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from test_durable_sessions import HANG_GUARD, Story, read_event

_TXT_FILES = "import os\nprint(sorted(n for n in os.listdir('.') if n.endswith('.txt')))"
RECHECK_EVERY_CAPTURE = ("--store-recheck-seconds", "0")


def _stdout(tool_text: str) -> str:
    return tool_text.split("stdout:\n", 1)[1].split("\n[", 1)[0].strip()


def _turn(worker: Any, command: dict[str, Any]) -> dict[str, Any]:
    worker.stdin.write(json.dumps(command) + "\n")
    worker.stdin.flush()
    return read_event(worker, "turn")


def test_a_fork_in_a_new_process_removes_the_files_made_after_its_checkpoint(
    saver: tuple[str, str], blobs: str
) -> None:
    """Process A makes a.txt, then extra.txt, and ends. Process B continues the thread (its new
    sandbox is restored with both), then forks from the checkpoint before extra.txt existed: the
    restore into its live sandbox must remove extra.txt. (Told on the local provider: the same
    story on E2B still passed with the restore's removals disabled, so it proved nothing there.)"""
    story = Story("code", *saver, blobs)
    story.run("--message", "open('a.txt', 'w').write('one')")
    later = story.run("--message", "open('extra.txt', 'w').write('late')")
    (before_extra,) = [h["id"] for h in later["history"] if h["tools"] == 1 and h["next"] == []]
    worker = story.start("--serve")
    try:
        read_event(worker, "ready")
        head = _turn(worker, {"message": _TXT_FILES})
        assert _stdout(head["tools"][-1]) == "['a.txt', 'extra.txt']"
        fork = _turn(worker, {"message": _TXT_FILES, "checkpoint_id": before_extra})
    finally:
        worker.communicate(timeout=HANG_GUARD)
    assert _stdout(fork["tools"][-1]) == "['a.txt']", fork["tools"][-1]
    assert "restored from the snapshot of revision 1" in fork["tools"][-1]


def test_a_new_process_says_the_sandbox_is_new_when_no_snapshot_was_saved(
    tmp_path: Path,
) -> None:
    """Process A cannot write the snapshot store (a file stands where its directory goes), so
    its one step keeps no snapshot. Process B, with the store usable again, cannot restore that
    step: it starts empty and tells the model so, instead of showing an empty workspace as if
    nothing had happened."""
    blocker = tmp_path / "store-volume"
    blocker.write_text("")
    story = Story("code", "sqlite", str(tmp_path / "cp.sqlite"), str(blocker / "blobs"))
    first = story.run("--message", "x = 1\nopen('a.txt', 'w').write('one')")
    assert "Could not save a snapshot of revision 1" in first["tools"][-1]
    assert first["sandbox"].get("snapshot") is None
    blocker.unlink()  # the operator fixes the volume
    second = story.run("--message", "import os\nprint(os.path.exists('a.txt'), 'x' in globals())")
    text = second["tools"][-1]
    assert (
        "This sandbox is new: the state of revision 1 could not be restored because no "
        "snapshot of it was saved." in text
    ), text
    assert _stdout(text) == "False False"


def test_sigkill_after_a_step_whose_snapshot_failed_restores_the_last_one_and_says_what_was_lost(
    tmp_path: Path, blobs: str
) -> None:
    """Turn 1's snapshot is saved; turn 2's cannot be (the store's directory is replaced by a
    file), then the process is killed. The next process restores turn 1's snapshot and tells the
    model that turn 2's changes are lost (the local sandbox died with its process)."""
    story = Story("code", "sqlite", str(tmp_path / "cp.sqlite"), blobs, *RECHECK_EVERY_CAPTURE)
    worker = story.start("--serve")
    store = Path(blobs)
    try:
        read_event(worker, "ready")
        _turn(worker, {"message": "open('a.txt', 'w').write('one')"})
        store.rename(tmp_path / "store-aside")
        store.write_text("")
        failed = _turn(worker, {"message": "open('a.txt', 'w').write('two')"})
        assert "Could not save a snapshot of revision 2" in failed["tools"][-1]
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.communicate(timeout=HANG_GUARD)
    assert worker.returncode == -signal.SIGKILL
    store.unlink()
    (tmp_path / "store-aside").rename(store)
    resumed = story.run("--message", "print(open('a.txt').read())")
    text = resumed["tools"][-1]
    assert "[notice] The sandbox was restored from the snapshot of revision 1." in text
    assert "Changes made after revision 1 (up to 2) were not saved and are lost." in text
    assert _stdout(text) == "one"
