"""`gc`: orphaned local sandboxes and unreferenced snapshot blobs, with a real checkpointer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langchain_sandbox.cli import main as cli_main
from langchain_sandbox.gc import collect_garbage
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


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
