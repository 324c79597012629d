"""`gc`: orphaned local sandboxes and unreferenced snapshot blobs, with a real checkpointer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from langchain_sandbox.cli import main as cli_main
from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.gc import checkpoint_references, collect_garbage
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.snapshots import BlobInfo, BlobStore, LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots.store import digest


def _leave_an_orphan(base_dir: Path) -> str:
    """Create a local session in a process that then dies without closing it."""
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from langchain_sandbox.providers.local import LocalProvider
        from langchain_sandbox.providers.base import SessionSpec

        async def main():
            provider = LocalProvider(base_dir={str(base_dir)!r})
            session = await provider.create(SessionSpec(metadata={{"thread_id": "gone"}}))
            await session.write_files({{"left.txt": b"behind"}})
            print(session.session_id, flush=True)
            os._exit(0)

        asyncio.run(main())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


async def test_orphaned_local_sandboxes_are_listed_then_reaped(tmp_path: Path) -> None:
    base = tmp_path / "sandboxes"
    orphan_id = _leave_an_orphan(base)
    provider = LocalProvider(base_dir=base)
    live = await provider.create()
    try:
        report = await collect_garbage(providers=[provider], dry_run=True, grace_seconds=0)
        by_id = {box["session_id"]: box for box in report["sandboxes"]}
        assert by_id[orphan_id]["orphan"] is True
        assert by_id[orphan_id]["destroyed"] is False
        assert by_id[live.session_id]["orphan"] is False
        assert (base / "sessions" / orphan_id).exists() or any(base.rglob(orphan_id))

        report = await collect_garbage(providers=[provider], dry_run=False, grace_seconds=0)
        by_id = {box["session_id"]: box for box in report["sandboxes"]}
        assert by_id[orphan_id]["destroyed"] is True
        assert not any(base.rglob(orphan_id))
        remaining = {r["session_id"] for r in await provider.list_sessions()}
        assert remaining == {live.session_id}
        assert (await live.run_code("print('alive')")).stdout == "alive\n"
    finally:
        await provider.aclose()


async def test_blobs_no_checkpoint_references_are_collected(tmp_path: Path) -> None:
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    provider = LocalProvider(base_dir=tmp_path / "sandboxes")
    try:
        async with await provider.create() as session:
            await session.write_files({"old.bin": b"o" * 50_000})
            old = await snapshotter.capture(session)
            await session.remove_files(["old.bin"])
            await session.write_files({"new.bin": b"n" * 70_000})
            new = await snapshotter.capture(session, base=old.ref)
    finally:
        await provider.aclose()

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"sandbox": {"snapshot": new.ref, "revision": 2}}
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, {})

        dry = await collect_garbage(
            providers=[], checkpointer=saver, snapshotter=snapshotter, grace_seconds=0
        )
        assert dry["blobs"]["live_refs"] == 1
        assert dry["blobs"]["deleted_bytes"] >= 50_000
        assert await snapshotter.store.missing([old.ref]) == set()

        await collect_garbage(
            providers=[],
            checkpointer=saver,
            snapshotter=snapshotter,
            dry_run=False,
            grace_seconds=0,
        )
    assert await snapshotter.store.missing([old.ref, new.ref]) == {old.ref}
    provider = LocalProvider(base_dir=tmp_path / "again")
    try:
        async with await provider.create() as fresh:
            await snapshotter.restore(fresh, new.ref)
            files = await fresh.read_files(["new.bin"])
            assert files["new.bin"] == b"n" * 70_000
    finally:
        await provider.aclose()


def test_cli_gc_without_checkpointer_leaves_blobs_alone(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert cli_main(["gc", "--blobs", str(tmp_path / "blobs")]) == 0
    out = capsys.readouterr().out
    assert "snapshot blobs: left alone" in out


class _DictBlobStore(BlobStore):
    """A working store of a user's own that does not record the checkpointers it serves."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    async def get(self, key: str) -> bytes:
        return self.blobs[key]

    async def put(self, key: str, data: bytes) -> None:
        self.blobs[key] = data

    async def missing(self, keys: Iterable[str]) -> set[str]:
        return set(keys) - set(self.blobs)

    async def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.blobs.pop(key, None)

    async def iter_blobs(self) -> AsyncIterator[BlobInfo]:
        for key, data in list(self.blobs.items()):
            yield BlobInfo(key=key, size=len(data), modified_at=0.0)


async def test_a_store_that_cannot_tell_which_checkpointers_it_serves_is_not_collected(
    tmp_path: Path,
) -> None:
    store = _DictBlobStore()
    data = b"unreferenced here, maybe not elsewhere"
    await store.put(digest(data), data)
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        await saver.aput(config, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        with pytest.raises(InvalidInputError, match="does not record which checkpointers"):
            await collect_garbage(
                providers=[],
                checkpointer=saver,
                snapshotter=Snapshotter(store),
                dry_run=False,
                grace_seconds=0,
            )
    assert store.blobs == {digest(data): data}


async def test_pending_writes_name_the_threads_current_sandbox_and_snapshot(tmp_path: Path) -> None:
    """A run paused at interrupt() keeps its finished calls' results only as pending writes (a
    task's ToolMessage, or a Command updating the channel): they name the sandbox the thread runs
    in now and a snapshot its resume restores."""
    paused = {"snapshot": "a" * 64, "revision": 1, "session": {"session_id": "paused-box"}}
    updated = {"snapshot": "b" * 64, "revision": 2, "session": {"session_id": "updated-box"}}
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        stored = await saver.aput(config, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        message = ToolMessage("done", tool_call_id="c1", artifact={"sandbox": paused})
        await saver.aput_writes(stored, [("__return__", message)], "task-1")
        await saver.aput_writes(
            stored, [("__return__", Command(update={"sandbox": updated}))], "task-2"
        )
        refs = await checkpoint_references(saver)
    assert refs.snapshot_refs == {"a" * 64, "b" * 64}
    assert refs.head_sessions == {"paused-box", "updated-box"}


async def test_a_snapshot_written_behind_its_checkpoint_is_kept_through_its_head(
    tmp_path: Path,
) -> None:
    """A record written before its snapshot completed names the snapshot only through its head
    (the store's name for it); gc keeps that snapshot and the name, so a resume still finds it."""
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    provider = LocalProvider(base_dir=tmp_path / "sandboxes")
    try:
        async with await provider.create() as session:
            await session.write_files({"late.bin": b"l" * 40_000})
            late = await snapshotter.capture(session, revision=2)
            await snapshotter.name_head("head-of-revision-2", late.ref)
            await session.write_files({"late.bin": b"u" * 30_000})
            unnamed = await snapshotter.capture(session, revision=3)
    finally:
        await provider.aclose()

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {
            "sandbox": {
                "revision": 2,
                "head": "head-of-revision-2",
                "snapshot": None,
                "snapshot_revision": 0,
            }
        }
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, {})
        assert (await checkpoint_references(saver)).late_heads == {"head-of-revision-2"}
        await collect_garbage(
            providers=[],
            checkpointer=saver,
            snapshotter=snapshotter,
            dry_run=False,
            grace_seconds=0,
        )
    assert await snapshotter.find_head("head-of-revision-2") == late.ref
    assert await snapshotter.store.missing([late.ref, unnamed.ref]) == {unnamed.ref}
    provider = LocalProvider(base_dir=tmp_path / "again")
    try:
        async with await provider.create() as fresh:
            await snapshotter.restore(fresh, late.ref)
            assert (await fresh.read_files(["late.bin"]))["late.bin"] == b"l" * 40_000
    finally:
        await provider.aclose()
