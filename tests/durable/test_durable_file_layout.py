"""A thread taken over by a new process gets its files back with their modification times, hard
links and holes, and its FIFOs (local provider, SQLite checkpointer, snapshot blobs in a shared directory).

Process A (story ``code`` of ``agent_worker.py``: each human message is code the model runs)
makes the files and prints their ``stat``; process B, a fresh sandbox restored from A's
snapshot, prints them again. Fails when the restore drops a time, a link or a hole.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_durable_restores import _stdout
from test_durable_sessions import Story

OLD_NS = 1_000_000_000_123_456_789
SIZE = 8 * 1024 * 1024

_STAT = """
import json, os, stat
facts = {"fifo": stat.S_ISFIFO(os.lstat("run/pipe").st_mode)}
for name in ["old.txt", "d/new.txt", "d/same.txt", "holes.bin"]:
    st = os.stat(name)
    facts[name] = [st.st_mtime_ns, st.st_ino, st.st_nlink, st.st_blocks * 512, st.st_size]
print(json.dumps(facts))
"""

_MAKE = f"""
import os
os.makedirs("d", exist_ok=True)
open("old.txt", "w").write("old")
open("d/new.txt", "w").write("new")
os.link("old.txt", "d/same.txt")
fd = os.open("holes.bin", os.O_WRONLY | os.O_CREAT)
os.ftruncate(fd, {SIZE})
os.pwrite(fd, b"x", {SIZE // 2})
os.close(fd)
os.utime("old.txt", ns=({OLD_NS}, {OLD_NS}))
os.makedirs("run")
os.mkfifo("run/pipe")
"""


def test_a_new_process_restores_times_links_holes_and_fifos(tmp_path: Path) -> None:
    story = Story("code", "sqlite", str(tmp_path / "checkpoints.sqlite"), str(tmp_path / "blobs"))
    made = story.run("--message", _MAKE + _STAT)
    before = json.loads(_stdout(made["tools"][-1]))
    assert before["old.txt"][1] == before["d/same.txt"][1]
    assert before["holes.bin"][3] < SIZE

    shown = story.run("--message", _STAT)
    text = shown["tools"][-1]
    assert "restored from the snapshot" in text, text
    after = json.loads(_stdout(text))
    assert before.pop("fifo") is True
    assert after.pop("fifo") is True, "the FIFO is a FIFO again"
    for name, facts in before.items():
        assert after[name][0] == facts[0], (name, "mtime")
        assert after[name][2] == facts[2], (name, "link count")
        assert after[name][4] == facts[4], (name, "size")
    assert after["old.txt"][0] == OLD_NS
    assert after["old.txt"][1] == after["d/same.txt"][1], "one inode, two names"
    assert after["holes.bin"][3] < 64 * 1024, "the holes are holes again"
    assert "could not" not in text
    assert "came back" not in text
