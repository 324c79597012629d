"""A damaged snapshot store costs what is damaged, never the thread: told across real processes.

Each story runs ``agent_worker.py`` (story ``code``: every human message is code the model runs)
in fresh processes against a SQLite checkpointer and a local blob directory, and damages the
store between (or during) the runs the way a disk or an operator would.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from test_durable_sessions import HANG_GUARD, Story, read_event


def _blob(blobs: str, key: str) -> Path:
    return Path(blobs) / key[:2] / key[2:]


def _garble(path: Path) -> None:
    """Same size, other bytes: what bit rot or a bad copy leaves."""
    path.write_bytes(bytes(len(path.read_bytes())))


RECHECK_EVERY_CAPTURE = ("--store-recheck-seconds", "0")
"""Worker flags: the snapshotter checks the store at every capture instead of every 300 s."""


def _stdout(tool_text: str) -> str:
    return tool_text.split("stdout:\n", 1)[1].strip()


@contextlib.contextmanager
def _live(story: Story) -> Iterator[Callable[[str], dict[str, Any]]]:
    """Turns of the story's thread in one worker process, so its session stays live between
    them: ``turn(code)`` returns the turn's event (tool outputs, the record)."""
    worker = story.start("--serve")
    try:
        read_event(worker, "ready")

        def turn(code: str) -> dict[str, Any]:
            assert worker.stdin is not None
            worker.stdin.write(json.dumps({"message": code}) + "\n")
            worker.stdin.flush()
            return read_event(worker, "turn")

        yield turn
    finally:
        worker.communicate(timeout=HANG_GUARD)


def test_a_corrupt_latest_manifest_costs_one_restore_not_every_later_step(
    tmp_path: Path,
) -> None:
    """The latest snapshot's manifest is garbage: the next process starts empty (and says so),
    and the snapshot it takes no longer builds on the corrupt one, so the process after it finds
    that work."""
    blobs = str(tmp_path / "blobs")
    story = Story("code", "sqlite", str(tmp_path / "cp.sqlite"), blobs)
    first = story.run("--message", "n = 1\nopen('log.txt', 'w').write('one')")
    _blob(blobs, first["sandbox"]["snapshot"]).write_bytes(b"\x00 not a manifest")

    second = story.run("--message", "n = 10\nopen('log.txt', 'w').write('two')\nprint('ok')")
    text = second["tools"][-1]
    assert "could not be restored from its snapshot" in text
    assert "Could not save a snapshot" not in text
    assert second["sandbox"]["snapshot"] != first["sandbox"]["snapshot"]

    third = story.run("--message", "print(n, open('log.txt').read())")
    assert _stdout(third["tools"][-1]) == "10 two"
    assert "could not be restored" not in third["tools"][-1]


def test_a_manifest_corrupted_while_the_session_is_live_is_not_named_again(
    tmp_path: Path,
) -> None:
    """The latest snapshot's manifest is damaged while its session is live, then a call changes
    nothing (its snapshot would be the same one). Once the store's trust is due (at every
    capture here; STORE_RECHECK_SECONDS, 300 s, by default), the record must not name the damaged
    manifest again: a restart restores the files and the variables."""
    blobs = str(tmp_path / "blobs")
    story = Story("code", "sqlite", str(tmp_path / "cp.sqlite"), blobs, *RECHECK_EVERY_CAPTURE)
    with _live(story) as turn:
        first = turn("x = 1\nopen('a.txt', 'w').write('A')")
        _garble(_blob(blobs, first["sandbox"]["snapshot"]))
        second = turn("print('nothing changes')")
    assert second["sandbox"]["snapshot"] != first["sandbox"]["snapshot"]

    after = story.run("--message", "print(x, open('a.txt').read())")
    assert _stdout(after["tools"][-1]) == "1 A", after["tools"][-1]


def test_a_blob_corrupted_while_the_session_is_live_is_rewritten_from_the_file(
    tmp_path: Path,
) -> None:
    """A file's blob is damaged while its session is live. A step that rewrites the file with the
    same content stores a good copy again, so a restart restores the whole workspace."""
    blobs = str(tmp_path / "blobs")
    story = Story("code", "sqlite", str(tmp_path / "cp.sqlite"), blobs)
    content = "A" * 1000
    with _live(story) as turn:
        turn(f"open('a.txt', 'w').write({content!r})\nopen('b.txt', 'w').write('B')")
        _garble(_blob(blobs, hashlib.sha256(content.encode()).hexdigest()))
        turn("open('b.txt', 'w').write('B2')")  # a.txt unchanged: its hash is reused
        turn(f"open('a.txt', 'w').write({content!r})")  # same content, written again

    after = story.run("--message", "print(len(open('a.txt').read()), open('b.txt').read())")
    text = after["tools"][-1]
    assert _stdout(text) == "1000 B2"
    assert "could not be restored" not in text


def test_variables_corrupted_while_the_session_is_live_are_rewritten_from_the_next_dump(
    tmp_path: Path,
) -> None:
    """The variables blob is damaged while the session is live; the next step changes only a
    file, so its dump has the same bytes (the same key). Once the store's trust is due, that
    snapshot must not name the damaged copy: a restart restores the variables with the files."""
    blobs = str(tmp_path / "blobs")
    story = Story("code", "sqlite", str(tmp_path / "cp.sqlite"), blobs, *RECHECK_EVERY_CAPTURE)
    with _live(story) as turn:
        first = turn("x = 1\nopen('a.txt', 'w').write('A')")
        root = json.loads(_blob(blobs, first["sandbox"]["snapshot"]).read_bytes())
        _garble(_blob(blobs, root["variables"]["sha256"]))
        turn("open('b.txt', 'w').write('B')")

    after = story.run("--message", "print(x, open('a.txt').read(), open('b.txt').read())")
    text = after["tools"][-1]
    assert _stdout(text) == "1 A B", text
    assert "not restored" not in text


def test_a_corrupt_blob_costs_only_its_file_and_the_notice_names_it(tmp_path: Path) -> None:
    """A blob damaged after it was stored, under a file that did not change since: a restart
    restores every other file and the variables, and tells the model which file is gone."""
    blobs = str(tmp_path / "blobs")
    story = Story("code", "sqlite", str(tmp_path / "cp.sqlite"), blobs)
    content = "lost content " * 50
    story.run("--message", f"x = 7\nopen('a.txt', 'w').write({content!r})")
    story.run("--message", "open('b.txt', 'w').write('B')")
    _garble(_blob(blobs, hashlib.sha256(content.encode()).hexdigest()))

    after = story.run(
        "--message", "import os\nprint(os.path.exists('a.txt'), open('b.txt').read(), x)"
    )
    text = after["tools"][-1]
    assert _stdout(text) == "False B 7"
    assert (
        "1 file(s) could not be restored because their stored copy is missing or corrupt: a.txt."
        in text
    )
    assert "starts empty" not in text

    # the next snapshot does not name the damaged blob, so the step after is whole again
    story.run("--message", "open('a.txt', 'w').write('recreated')")
    final = story.run("--message", "print(open('a.txt').read(), open('b.txt').read(), x)")
    assert _stdout(final["tools"][-1]) == "recreated B 7"


def test_an_unusable_home_is_a_clear_error_for_the_model_not_a_crash_of_the_run(
    tmp_path: Path,
) -> None:
    """The package's directories cannot exist (a file is in the way: what a missing mount or a
    read-only volume gives too). The run completes; the model reads a clear error that names no
    host path; a snapshot store that cannot be written costs a notice, not the call."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    story = Story(
        "code",
        "sqlite",
        str(tmp_path / "cp.sqlite"),
        str(blocker / "blobs"),
        env={**os.environ, "LANGCHAIN_SANDBOX_HOME": str(blocker / "home")},
    )
    done = story.run("--message", "print('hello')")
    text = done["tools"][-1]
    assert "could not create the session's directory (Not a directory)" in text
    assert str(tmp_path) not in json.dumps(done)

    # Sessions can be made, blobs cannot be stored: the call's result survives, with a notice.
    story.env = {**os.environ, "LANGCHAIN_SANDBOX_HOME": str(tmp_path / "home")}
    saved = story.run("--message", "print('hello')")
    text = saved["tools"][-1]
    assert "stdout:\nhello" in text
    assert (
        "Could not save a snapshot of revision 1 of the sandbox (The local snapshot store" in text
    )
    assert str(tmp_path) not in json.dumps(saved)
