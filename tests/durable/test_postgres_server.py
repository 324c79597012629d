"""The Postgres server the durable tests start is real and usable by LangGraph's saver."""

from __future__ import annotations

from langgraph.checkpoint.postgres import PostgresSaver


def test_postgres_server_serves_a_checkpointer(postgres_dsn: str) -> None:
    with PostgresSaver.from_conn_string(postgres_dsn) as saver:
        saver.setup()
        config = {"configurable": {"thread_id": "probe", "checkpoint_ns": ""}}
        assert saver.get_tuple(config) is None
