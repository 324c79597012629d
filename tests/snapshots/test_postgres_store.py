"""Blobs shared by two workers through a real PostgreSQL store (LangGraph's AsyncPostgresStore).

The server is started from its binaries for this module by the same code the durable-session
tests use (``tests/durable/postgres_server.py``); a missing server is a failure, never a skip.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from langgraph.store.postgres.aio import AsyncPostgresStore

from langchain_sandbox.providers.base import Session
from langchain_sandbox.snapshots import LangGraphStoreBlobStore, Snapshotter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "durable"))
from postgres_server import INSTALL_HINT, PostgresServer, find_bindir

SessionFactory = Callable[[], Awaitable[Session]]


@pytest.fixture(scope="module")
def postgres_dsn() -> Iterator[str]:
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = PostgresServer.start(bindir)
    try:
        yield server.dsn
    finally:
        server.stop()


async def test_two_workers_share_snapshots_through_postgres(
    new_session: SessionFactory, postgres_dsn: str
) -> None:
    async with (
        AsyncPostgresStore.from_conn_string(postgres_dsn) as store_a,
        AsyncPostgresStore.from_conn_string(postgres_dsn) as store_b,
    ):
        await store_a.setup()
        worker_a = Snapshotter(LangGraphStoreBlobStore(store_a, namespace=("app", "blobs")))
        worker_b = Snapshotter(LangGraphStoreBlobStore(store_b, namespace=("app", "blobs")))

        first_session = await new_session()
        payload = bytes(range(256)) * 4096  # 1 MB of binary data survives base64 and JSONB
        await first_session.write_files({"model.bin": payload, "notes.md": b"step 1\n"})
        await first_session.run_code("weights = [0.5, 0.25]")
        step1 = await worker_a.capture(first_session, revision=1)

        second_session = await new_session()
        await worker_b.restore(second_session, step1.ref)
        assert await second_session.read_files(["model.bin", "notes.md"]) == {
            "model.bin": payload,
            "notes.md": b"step 1\n",
        }
        assert (await second_session.run_code("weights")).value == "[0.5, 0.25]"

        await second_session.write_files({"notes.md": b"step 2\n"})
        step2 = await worker_b.capture(second_session, base=step1.ref, revision=2)
        assert step2.bytes_written < 10_000  # the small note and a manifest, not the 1 MB file

        preview = await worker_a.collect_garbage([step2.ref], dry_run=True, grace_seconds=0)
        # step 1's manifest: its root and its part, which packs its note
        assert preview.deleted_blobs == 2
        report = await worker_a.collect_garbage([step2.ref], grace_seconds=0)
        assert report.deleted_blobs == 2
        third_session = await new_session()
        await worker_a.restore(third_session, step2.ref)
        assert (await third_session.read_files(["notes.md"]))["notes.md"] == b"step 2\n"
