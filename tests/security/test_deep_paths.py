"""Class 6: deep and long paths neither crash the host nor escape its bounds.

``write_files("a/" * 3000 + "f")`` and 1,200 nested ``mkdir`` from code used to make listing,
snapshot capture, ``close()`` and ``gc`` raise ``RecursionError``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langchain_sandbox.core.workspace import MAX_PATH_DEPTH
from langchain_sandbox.errors import InvalidPathError
from langchain_sandbox.gc import collect_garbage
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots.store import digest
from security.gvisor_containers import processes_naming

_HANG = 300.0


async def _exists(path: str) -> bool:
    return await asyncio.to_thread(os.path.lexists, path)


_NEST = """
import os
os.chdir("/home/user")
for _ in range(DEPTH):
    os.mkdir("d")
    os.chdir("d")
with open("bottom.txt", "w") as handle:
    handle.write("deep")
os.chdir("/home/user")
"""


async def test_host_entry_points_refuse_paths_too_deep_or_too_long(
    provider: LocalProvider,
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    try:
        for path in ("a/" * 3000 + "f", "b" * 200 + "/" + "c" * 200 * 30):
            with pytest.raises(InvalidPathError, match=r"deeper than|longer than"):
                await session.write_files({path: b"x"})
            with pytest.raises(InvalidPathError):
                await session.read_files([path])
            with pytest.raises(InvalidPathError):
                await session.list_files(path)
            with pytest.raises(InvalidPathError):
                await session.remove_files([path])
        # The deepest path accepted still works end to end.
        deepest = "a/" * (MAX_PATH_DEPTH - 1) + "f"
        await session.write_files({deepest: b"ok"})
        assert (await session.read_files([deepest]))[deepest] == b"ok"
        assert (await session.run_code("1")).value == "1"
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_a_tree_nested_by_code_is_listed_captured_closed_and_collected(
    tmp_path: Path, isolation: str
) -> None:
    provider = LocalProvider(base_dir=tmp_path / "sandboxes", isolation=isolation)
    store = LocalDirectoryBlobStore(tmp_path / "blobs")
    snapshotter = Snapshotter(store)
    session = await provider.create(SessionSpec(limits=Limits(timeout=120.0)))
    directory = session.directory
    try:
        made = await session.run_code(_NEST.replace("DEPTH", "1200"))
        assert made.ok, made.render()

        listing = await asyncio.wait_for(session.list_files(".", recursive=True), _HANG)
        depths = [entry.path.count("/") + 1 for entry in listing]
        assert max(depths) == MAX_PATH_DEPTH
        info = await asyncio.wait_for(snapshotter.capture(session), _HANG)
        assert any("deeper than" in reason for reason in info.omitted.values())
        await session.write_files({"top.txt": b"top"})
        fresh = await provider.create(SessionSpec(limits=Limits(timeout=120.0)))
        try:
            await snapshotter.restore(fresh, info.ref)
        finally:
            await fresh.close()

        # The tree is removed from the host by remove_files, whatever its depth.
        await asyncio.wait_for(session.remove_files(["d"]), _HANG)
        assert not await _exists(os.path.join(session.workspace_dir, "d"))
        await session.run_code(_NEST.replace("DEPTH", "1200"))
    finally:
        await asyncio.wait_for(session.close(), _HANG)
    assert not await _exists(directory)
    await provider.aclose()


_CRASHING_OWNER = """
import asyncio, os, sys
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider

async def main():
    provider = LocalProvider(base_dir=sys.argv[1], isolation=sys.argv[3])
    session = await provider.create(SessionSpec(limits=Limits(timeout=120.0)))
    made = await session.run_code(sys.argv[2])
    print(made.ok, session.directory, flush=True)
    os._exit(0)  # the owner dies without closing: its session is an orphan now

asyncio.run(main())
"""


async def test_gc_removes_a_deep_orphan_and_still_collects_blobs(
    tmp_path: Path, isolation: str
) -> None:
    base = tmp_path / "sandboxes"
    owner = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CRASHING_OWNER,
        str(base),
        _NEST.replace("DEPTH", "1200"),
        isolation,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(owner.communicate(), _HANG)
    ok, leftover = out.decode().split()
    assert ok == "True"
    assert await _exists(leftover)

    store = LocalDirectoryBlobStore(tmp_path / "blobs")
    await store.put_many({digest(b"unreferenced"): b"unreferenced"})
    provider = LocalProvider(base_dir=base, isolation=isolation)
    try:
        report = await asyncio.wait_for(
            collect_garbage(
                providers=[provider],
                checkpointer=InMemorySaver(),
                snapshotter=Snapshotter(store),
                dry_run=False,
                grace_seconds=0,
                allow_empty_checkpointer=True,
            ),
            _HANG,
        )
    finally:
        await provider.aclose()
    assert [box["destroyed"] for box in report["sandboxes"]] == [True]
    assert not await _exists(leftover)
    # Nothing of the sandbox runs on either (gVisor's runsc, gofer and Sentry name their state
    # directory, inside the session's, on their command lines).
    assert await asyncio.to_thread(processes_naming, leftover) == []
    assert report["blobs"]["deleted_blobs"] == 1
