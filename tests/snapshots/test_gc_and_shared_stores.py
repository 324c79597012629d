"""Garbage collection, and snapshots shared through LangGraph stores (several "machines")."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite.aio import AsyncSqliteStore

from langchain_sandbox.errors import InvalidInputError, SnapshotNotFoundError
from langchain_sandbox.providers.base import Session
from langchain_sandbox.snapshots import (
    BlobStore,
    LangGraphStoreBlobStore,
    LocalDirectoryBlobStore,
    Snapshotter,
)
from langchain_sandbox.snapshots.store import digest

SessionFactory = Callable[[], Awaitable[Session]]


@pytest.fixture(params=["local", "memory", "sqlite"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "local":
        yield LocalDirectoryBlobStore(tmp_path / "blobs", durable=False)
    elif request.param == "memory":
        yield LangGraphStoreBlobStore(InMemoryStore())
    else:
        async with AsyncSqliteStore.from_conn_string(str(tmp_path / "store.db")) as sqlite_store:
            await sqlite_store.setup()
            yield LangGraphStoreBlobStore(sqlite_store)


async def blob_keys(store: BlobStore) -> set[str]:
    return {info.key async for info in store.iter_blobs()}


async def test_gc_keeps_what_live_snapshots_need_and_deletes_the_rest(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    snapshotter = Snapshotter(any_store)
    session = await new_session()
    await session.write_files({"shared.txt": b"in every revision", "step.txt": b"one"})
    first = await snapshotter.capture(session, revision=1)
    await session.write_files({"step.txt": b"two", "extra.bin": b"x" * 5000})
    second = await snapshotter.capture(session, base=first.ref, revision=2)
    await session.remove_files(["extra.bin"])
    await session.write_files({"step.txt": b"three"})
    third = await snapshotter.capture(session, base=second.ref, revision=3)

    everything = await blob_keys(any_store)
    needed = {third.ref} | (await snapshotter.load_manifest(third.ref)).blob_keys()

    # Everything is younger than the default grace period: nothing goes.
    kept = await snapshotter.collect_garbage([third.ref])
    assert kept.deleted_blobs == 0
    assert kept.kept_recent == len(everything - needed)

    preview = await snapshotter.collect_garbage([third.ref], dry_run=True, grace_seconds=0)
    # Revision 1 and 2: two manifests (a root and one part each, the parts packing "one"
    # and "two") and the 5000-byte file, too big to be packed.
    assert preview.deleted_blobs == 5
    assert preview.deleted_bytes >= 5000 + 3 + 3
    assert preview.reachable_blobs == len(needed)
    assert await blob_keys(any_store) == everything

    report = await snapshotter.collect_garbage([third.ref], grace_seconds=0)
    assert (report.deleted_blobs, report.deleted_bytes) == (
        preview.deleted_blobs,
        preview.deleted_bytes,
    )
    assert await blob_keys(any_store) == needed
    with pytest.raises(SnapshotNotFoundError):
        await snapshotter.restore(await new_session(), first.ref)
    fresh = await new_session()
    restored = await snapshotter.restore(fresh, third.ref)
    assert restored.revision == 3
    assert await fresh.read_files(["shared.txt", "step.txt"]) == {
        "shared.txt": b"in every revision",
        "step.txt": b"three",
    }

    # A live ref that is gone is reported; a malformed one is refused.
    lost = digest(b"a snapshot nobody stored")
    assert (await snapshotter.collect_garbage([third.ref, lost])).missing_refs == (lost,)
    with pytest.raises(InvalidInputError):
        await snapshotter.collect_garbage(["../../etc"])


async def test_a_recent_snapshot_not_yet_in_a_checkpoint_survives_gc(
    new_session: SessionFactory, store: LocalDirectoryBlobStore
) -> None:
    snapshotter = Snapshotter(store)
    session = await new_session()
    await session.write_files({"a.txt": b"old"})
    old = await snapshotter.capture(session, revision=1)
    await session.write_files({"a.txt": b"in flight"})
    in_flight = await snapshotter.capture(session, base=old.ref, revision=2)
    # gc runs with only the old ref live, while the new capture has not reached a checkpoint.
    await snapshotter.collect_garbage([old.ref], grace_seconds=3600)
    fresh = await new_session()
    await snapshotter.restore(fresh, in_flight.ref)
    assert await fresh.read_files(["a.txt"]) == {"a.txt": b"in flight"}


async def test_capture_rewrites_blobs_that_gc_removed_from_under_its_base(
    new_session: SessionFactory, store: LocalDirectoryBlobStore
) -> None:
    snapshotter = Snapshotter(store)
    session = await new_session()
    await session.write_files({"big.bin": b"b" * 10_000, "small.txt": b"s"})
    base = await snapshotter.capture(session, revision=1)
    # Every blob is collected (the base is no longer live), yet the next capture uses it as base.
    await snapshotter.collect_garbage([], grace_seconds=0)
    await session.write_files({"small.txt": b"t"})
    info = await snapshotter.capture(session, base=base.ref, revision=2)
    assert info.bytes_read >= 10_000
    fresh = await new_session()
    await snapshotter.restore(fresh, info.ref)
    assert (await fresh.read_files(["big.bin"]))["big.bin"] == b"b" * 10_000


async def test_workers_on_two_machines_share_snapshots_through_one_store(
    new_session: SessionFactory, tmp_path: Path
) -> None:
    """Two processes' worth of objects (store connection, snapshotter, session) over one
    database: what one worker captures, the other restores, incrementally."""
    database = str(tmp_path / "shared.db")
    async with (
        AsyncSqliteStore.from_conn_string(database) as first_db,
        AsyncSqliteStore.from_conn_string(database) as second_db,
    ):
        await first_db.setup()
        worker_a = Snapshotter(LangGraphStoreBlobStore(first_db, namespace=("deploy", "blobs")))
        worker_b = Snapshotter(LangGraphStoreBlobStore(second_db, namespace=("deploy", "blobs")))

        on_a = await new_session()
        await on_a.write_files({"report.md": b"# draft\n", "data.csv": b"a,b\n1,2\n"})
        await on_a.run_code("total = 3")
        step1 = await worker_a.capture(on_a, revision=1)

        on_b = await new_session()
        report = await worker_b.restore(on_b, step1.ref)
        assert report.notices[0].startswith("Restored the workspace to revision 1")
        assert (await on_b.run_code("total")).value == "3"
        await on_b.write_files({"report.md": b"# final\n"})
        step2 = await worker_b.capture(on_b, base=step1.ref, revision=2)
        # the manifest root and the part packing the changed file; variables unchanged
        assert step2.blobs_written == 2

        await worker_a.restore(on_a, step2.ref)
        assert await on_a.read_files(["report.md", "data.csv"]) == {
            "report.md": b"# final\n",
            "data.csv": b"a,b\n1,2\n",
        }
