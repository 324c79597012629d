"""The name a run notes for its checkpointer is the one gc computes for the URL it is given,
whichever saver class, connection or pool the application used."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langchain_sandbox import SandboxMiddleware, SandboxRuntime
from langchain_sandbox.checkpointing.checkpointer_names import acheckpointer_name, checkpointer_name
from langchain_sandbox.gc import open_checkpointer
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call

CONNECT = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


async def gc_name(url: str) -> str | None:
    async with open_checkpointer(url) as saver:
        return await acheckpointer_name(saver)


async def test_sqlite_savers_are_named_by_their_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with SqliteSaver.from_conn_string("app.sqlite") as saver:
        saver.setup()
        assert checkpointer_name(saver) == f"sqlite:///{tmp_path / 'app.sqlite'}"
    async with AsyncSqliteSaver.from_conn_string("app.sqlite") as async_saver:
        named = await acheckpointer_name(async_saver)
        assert named == f"sqlite:///{tmp_path / 'app.sqlite'}"
        # from a worker thread, as a sync tool in an async run calls it
        assert await asyncio.to_thread(checkpointer_name, async_saver) == named
    assert await gc_name("sqlite:///app.sqlite") == named
    assert await gc_name(f"sqlite:///{tmp_path / 'app.sqlite'}") == named


async def test_savers_that_end_with_their_process_have_no_name() -> None:
    assert checkpointer_name(InMemorySaver()) is None
    async with AsyncSqliteSaver.from_conn_string(":memory:") as saver:
        assert await acheckpointer_name(saver) is None


def test_langgraph_devs_saver_outlives_its_process_and_has_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``langgraph dev``'s saver is an InMemorySaver that writes its checkpoints to disk and
    reloads them: its threads resume after a restart, so its snapshots must be named."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph_runtime_inmem.checkpoint import InMemorySaver as DevSaver

    monkeypatch.chdir(tmp_path)
    saver = DevSaver(serde=JsonPlusSerializer())
    assert checkpointer_name(saver) == "python:langgraph_runtime_inmem.checkpoint.InMemorySaver"


async def test_postgres_connections_and_pools_share_the_name_gc_uses(postgres_dsn: str) -> None:
    expected = await gc_name(postgres_dsn)
    assert expected is not None
    assert expected.startswith("postgresql://127.0.0.1:")
    assert "postgres@" not in expected  # no user, no password
    with PostgresSaver.from_conn_string(postgres_dsn) as saver:
        assert checkpointer_name(saver) == expected
    with ConnectionPool(postgres_dsn, kwargs=CONNECT, open=True) as pool:
        assert checkpointer_name(PostgresSaver(pool)) == expected  # type: ignore[arg-type]
    async with AsyncConnectionPool(postgres_dsn, kwargs=CONNECT, open=False) as async_pool:
        async_saver = AsyncPostgresSaver(async_pool)  # type: ignore[arg-type]
        assert await acheckpointer_name(async_saver) == expected
        assert await asyncio.to_thread(checkpointer_name, async_saver) == expected
    async with await AsyncConnection.connect(postgres_dsn, **CONNECT) as conn:
        assert await acheckpointer_name(AsyncPostgresSaver(conn)) == expected  # type: ignore[arg-type]


async def test_an_async_run_notes_its_checkpointer_in_the_store(tmp_path: Path) -> None:
    store = LocalDirectoryBlobStore(tmp_path / "blobs")
    assert await store.checkpointers() == set()
    runtime = SandboxRuntime(snapshotter=Snapshotter(store))
    model = ScriptedToolModel(script=[call("sandbox_exec", code="x = 1"), "done"])
    try:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
            agent = create_agent(
                model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=saver
            )
            await agent.ainvoke(
                {"messages": [("user", "go")]}, {"configurable": {"thread_id": "t"}}
            )
    finally:
        await runtime.aclose()
    assert await store.checkpointers() == {f"sqlite:///{tmp_path / 'cp.sqlite'}"}
    await store.forget_checkpointer(f"sqlite:///{tmp_path / 'cp.sqlite'}")
    assert await store.checkpointers() == set()
    assert os.listdir(tmp_path / "blobs" / "checkpointers") == []


async def test_a_postgres_blob_store_lists_the_checkpointers_of_two_applications(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Two applications (two SQLite checkpointers) keep their blobs in one LangGraph Postgres
    store. gc given one refuses and names the other; given both it keeps every blob both need."""
    from langgraph.store.postgres.aio import AsyncPostgresStore

    from langchain_sandbox.errors import InvalidInputError
    from langchain_sandbox.gc import collect_garbage
    from langchain_sandbox.snapshots import LangGraphStoreBlobStore

    namespace = ("gc_test", uuid.uuid4().hex)
    urls = [f"sqlite:///{tmp_path / name}" for name in ("a.sqlite", "b.sqlite")]
    async with AsyncPostgresStore.from_conn_string(postgres_dsn) as pg_store:
        await pg_store.setup()
        store = LangGraphStoreBlobStore(pg_store, namespace=namespace)
        runtime = SandboxRuntime(snapshotter=Snapshotter(store))
        try:
            for url, text in zip(urls, ("from a", "from b"), strict=True):
                model = ScriptedToolModel(
                    script=[call("sandbox_exec", code=f"open('f.txt', 'w').write({text!r})"), "ok"]
                )
                async with AsyncSqliteSaver.from_conn_string(
                    url.removeprefix("sqlite:///")
                ) as saver:
                    agent = create_agent(
                        model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=saver
                    )
                    await agent.ainvoke(
                        {"messages": [("user", "go")]}, {"configurable": {"thread_id": text}}
                    )
        finally:
            await runtime.aclose()
        assert await store.checkpointers() == set(urls)
        blobs = {info.key async for info in store.iter_blobs()}

        with pytest.raises(InvalidInputError) as refused:
            await collect_garbage(
                checkpointer_url=urls[0],
                snapshotter=Snapshotter(store),
                dry_run=False,
                grace_seconds=0,
            )
        assert urls[1] in str(refused.value)
        assert {info.key async for info in store.iter_blobs()} == blobs

        report = await collect_garbage(
            checkpointer_url=urls, snapshotter=Snapshotter(store), dry_run=False, grace_seconds=0
        )
        assert report["checkpointers"] == sorted(urls)
        assert report["blobs"]["live_refs"] == 2  # one snapshot per application's thread
        assert report["blobs"]["deleted_blobs"] == 0
        assert {info.key async for info in store.iter_blobs()} == blobs
