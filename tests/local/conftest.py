"""Fixtures of the local provider's tests: real sandboxes under a temporary base dir, at the
isolation level of the ``isolation`` fixture (bubblewrap unless a module asks for gVisor too)."""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession


@pytest.fixture
async def provider(tmp_path: Path, isolation: str) -> AsyncIterator[LocalProvider]:
    made = LocalProvider(base_dir=tmp_path / "sandboxes", isolation=isolation)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
async def session(provider: LocalProvider) -> AsyncIterator[LocalSession]:
    made = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's 127.0.0.1 that answers every connection with b"pong"."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            with connection:
                connection.sendall(b"pong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
