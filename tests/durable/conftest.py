"""Fixtures of the durable-session tests: a real PostgreSQL server for the whole run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from postgres_server import INSTALL_HINT, PostgresServer, find_bindir


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
