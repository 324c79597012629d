"""`gc` refuses a checkpointer that cannot be the application's, and names dead owners' sandboxes
orphans; its failures are one line with the fix, never a traceback."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph

from .conftest import RunCli


def _a_blob(tmp_path: Path) -> Path:
    blob = tmp_path / "blobs" / "ab" / ("0" * 62)  # LocalDirectoryBlobStore: key[:2] / key[2:]
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"an unreferenced blob")
    os.utime(blob, (0, 0))  # older than any grace period
    return blob


def test_a_missing_sqlite_checkpointer_is_refused_and_not_created(
    run_cli: RunCli, tmp_path: Path
) -> None:
    blob = _a_blob(tmp_path)
    done = run_cli(
        "gc", "--checkpointer", "sqlite:///typo.sqlite", "--blobs", "blobs", "--grace", "0", "--yes"
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: No SQLite checkpointer at 'typo.sqlite'")
    assert "--allow-empty-checkpointer" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "typo.sqlite").exists()
    assert blob.exists()


def test_an_empty_checkpointer_is_refused_unless_allowed(run_cli: RunCli, tmp_path: Path) -> None:
    blob = _a_blob(tmp_path)
    with SqliteSaver.from_conn_string(str(tmp_path / "empty.sqlite")) as saver:
        saver.setup()
    args = ("gc", "--checkpointer", "sqlite:///empty.sqlite", "--blobs", "blobs", "--grace", "0")
    refused = run_cli(*args, "--yes")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: The checkpointer holds no checkpoint")
    assert blob.exists()
    allowed = run_cli(*args, "--yes", "--allow-empty-checkpointer")
    assert allowed.returncode == 0, allowed.stderr
    assert "snapshot blobs: destroyed 1" in allowed.stdout
    assert not blob.exists()


def test_a_checkpointer_with_checkpoints_is_used(run_cli: RunCli, tmp_path: Path) -> None:
    class State(TypedDict):
        n: int

    graph = StateGraph(State)
    graph.add_node("step", lambda state: {"n": state["n"] + 1})
    graph.add_edge(START, "step")
    with SqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        graph.compile(checkpointer=saver).invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert (
        sqlite3.connect(tmp_path / "agent.sqlite")
        .execute("select count(*) from checkpoints")
        .fetchone()[0]
    )
    _a_blob(tmp_path)
    done = run_cli("gc", "--checkpointer", "sqlite:///agent.sqlite", "--blobs", "blobs")
    assert done.returncode == 0, done.stderr
    assert "snapshot blobs: would destroy 1" in done.stdout


def test_an_unreachable_postgres_is_one_line_without_the_password(run_cli: RunCli) -> None:
    done = run_cli("gc", "--checkpointer", "postgresql://agent:s3cret@127.0.0.1:1/agent")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "error: Cannot open the Postgres checkpointer at postgresql://agent:***@127.0.0.1:1/agent"
    )
    assert "Is the server running" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert "s3cret" not in done.stderr
    assert "Traceback" not in done.stderr


def test_a_sandbox_whose_owner_died_is_an_orphan_not_in_use(
    run_cli: RunCli, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """
        import asyncio, os
        from langchain_sandbox.providers.base import SessionSpec
        from langchain_sandbox.providers.local import LocalProvider

        async def main():
            session = await LocalProvider().create(SessionSpec(metadata={"thread_id": "gone"}))
            print(session.session_id, flush=True)
            os._exit(0)  # dies without closing: the session directory stays behind

        asyncio.run(main())
        """
    )
    env = {**os.environ, "LANGCHAIN_SANDBOX_HOME": str(tmp_path / "home")}
    made = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert made.returncode == 0, made.stderr
    session_id = made.stdout.strip()
    # Seconds old, far inside the default grace period: its owner is gone all the same.
    listed = run_cli("gc")
    assert f"local {session_id} thread=gone: orphan, would destroy" in listed.stdout
    reaped = run_cli("gc", "--yes")
    assert f"local {session_id} thread=gone: orphan, destroyed" in reaped.stdout
    assert "no sandboxes found" in run_cli("gc").stdout


def test_demo_with_an_unknown_provider_is_a_usage_error(run_cli: RunCli) -> None:
    done = run_cli("demo", "--provider", "foo")
    assert done.returncode == 2
    assert "argument --provider: invalid choice: 'foo'" in done.stderr
    assert "Traceback" not in done.stderr
