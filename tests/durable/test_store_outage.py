"""A snapshot store that is down while a sandbox is restored: a typed error the model reads
(``SnapshotStoreUnavailable``), never a raw exception out of the run nor an empty sandbox that
would supersede the snapshot; once the store answers again the next turn restores in full.

The store is a real ``PostgresStore`` (through a connection pool, as a deployment would have it)
on a Postgres server of this test's own, stopped for the outage and started again on its data.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from postgres_server import INSTALL_HINT, PostgresServer, find_bindir

from langchain_sandbox import SandboxRuntime
from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.snapshots import LangGraphStoreBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call

pytest.importorskip("langchain")


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    started = PostgresServer.start(bindir)
    try:
        yield started
    finally:
        started.stop()


def script(messages: list[Any]) -> Any:
    if isinstance(messages[-1], ToolMessage):
        return "done"
    if messages[-1].text == "write":
        return call("sandbox_exec", code="open('notes.txt', 'w').write('kept')")
    return call("sandbox_exec", code="print(open('notes.txt').read())")


def test_a_store_outage_during_restore_is_a_typed_error_and_the_next_turn_restores(
    tmp_path: Path, server: PostgresServer
) -> None:
    from langchain.agents import create_agent
    from langgraph.store.postgres import PostgresStore
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(
        server.dsn,
        kwargs={"autocommit": True, "prepare_threshold": 0},
        check=ConnectionPool.check_connection,
        timeout=1,
    )
    config: Any = {"configurable": {"thread_id": "outage"}}
    with pool, SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        store = PostgresStore(pool)
        store.setup()

        def turn(base: str, message: str) -> str:
            snapshotter = Snapshotter(LangGraphStoreBlobStore(store))
            options = {"base_dir": tmp_path / base}
            with SandboxRuntime("local", provider_options=options, snapshotter=snapshotter) as rt:
                agent = create_agent(
                    ScriptedToolModel(script=script),
                    middleware=[SandboxMiddleware(runtime=rt)],
                    checkpointer=saver,
                )
                result = agent.invoke({"messages": [HumanMessage(message)]}, config)
            return [m.text for m in result["messages"] if isinstance(m, ToolMessage)][-1]

        turn("first", "write")
        server.pause()
        try:
            during = turn("second", "show")  # a new process: the sandbox must be restored
        finally:
            server.resume()
        after = turn("third", "show")
    assert "The snapshot store could not be reached" in during, during
    assert "Nothing is lost" in during
    assert "kept" in after, after
