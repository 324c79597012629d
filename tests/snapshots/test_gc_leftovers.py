"""gc removes what a writer killed mid-put left in the local store, never a live writer's file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots.local_store import ABANDONED_WRITE_SECONDS
from langchain_sandbox.snapshots.store import digest

# A real put in its own process, held between writing its temporary file and renaming it into
# place until a line arrives on stdin: the point where a SIGKILL leaves a `.tmp-*` file behind.
WRITER = textwrap.dedent(
    """
    import asyncio, os, sys
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore
    from langchain_sandbox.snapshots.store import digest

    rename = os.replace

    def held_rename(src, dst):
        print("writing", flush=True)
        sys.stdin.readline()
        rename(src, dst)

    os.replace = held_rename
    data = sys.argv[2].encode() * 100_000
    asyncio.run(LocalDirectoryBlobStore(sys.argv[1]).put(digest(data), data))
    print("done", flush=True)
    """
)


def start_writer(root: Path, text: str) -> subprocess.Popen[str]:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), text],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == "writing\n", writer.stderr.read() if writer.stderr else ""
    return writer


def temp_files(root: Path) -> set[Path]:
    return set(root.glob("*/.tmp-*"))


async def test_gc_removes_a_killed_writers_temp_file_and_spares_a_live_one(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    killed = start_writer(root, "killed")
    os.kill(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=60)
    (left,) = temp_files(root)
    assert left.stat().st_size == len("killed") * 100_000
    # as old as a killed writer's file gets while nobody runs gc
    hours_ago = time.time() - ABANDONED_WRITE_SECONDS - 60
    os.utime(left, (hours_ago, hours_ago))

    live = start_writer(root, "live")
    try:
        (writing,) = temp_files(root) - {left}
        snapshotter = Snapshotter(LocalDirectoryBlobStore(root))

        preview = await snapshotter.collect_garbage([], dry_run=True, grace_seconds=0)
        assert (preview.abandoned_writes, preview.abandoned_bytes) == (1, 600_000)
        assert temp_files(root) == {left, writing}

        report = await snapshotter.collect_garbage([], grace_seconds=0)
        assert (report.abandoned_writes, report.abandoned_bytes) == (1, 600_000)
        assert temp_files(root) == {writing}  # the live writer's file, even with grace 0
    finally:
        out, err = live.communicate("go\n", timeout=60)
    assert live.returncode == 0, err
    assert out == "done\n"
    data = b"live" * 100_000
    assert await LocalDirectoryBlobStore(root).get(digest(data)) == data
    assert temp_files(root) == set()
