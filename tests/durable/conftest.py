"""Fixtures of the durable-session tests: a real PostgreSQL server for the whole run, and the
providers a story runs on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_server import INSTALL_HINT, PostgresServer, find_bindir
from story_providers import PROVIDERS, StoryProvider, running_provider


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of a PostgreSQL server this test run started (and stops at the end).

    A missing server is a failure, never a skip, in CI (``CI=true``) and locally alike.
    """
    bindir = find_bindir()
    if bindir is None:
        where = "in CI" if os.environ.get("CI") == "true" else "locally"
        pytest.fail(f"{INSTALL_HINT} (running {where})", pytrace=False)
    server = PostgresServer.start(bindir)
    try:
        yield server.dsn
    finally:
        server.stop()


@pytest.fixture
def blobs(tmp_path: Path) -> str:
    """A snapshot blob directory shared by every process of one test."""
    return str(tmp_path / "blobs")


@pytest.fixture(params=["sqlite", "postgres"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A checkpointer as (kind, target): a SQLite file, then the run's Postgres server."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "checkpoints.sqlite")
    else:
        yield "postgres", request.getfixturevalue("postgres_dsn")


@pytest.fixture(params=PROVIDERS)
def story_provider(request: pytest.FixtureRequest) -> Iterator[StoryProvider]:
    """The story's provider: local, then E2B and Runloop on their emulators."""
    with running_provider(request.param) as provider:
        yield provider
