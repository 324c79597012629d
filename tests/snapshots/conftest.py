"""Fixtures for snapshot tests: real local sandboxes and a private blob store per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

SessionFactory = Callable[[], Awaitable[Session]]


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[Provider]:
    try:
        from langchain_sandbox.providers.local import LocalProvider
    except ImportError:  # DEV-ONLY
        import sys

        sys.path.insert(0, "/tmp/dev")
        from dirsession import DirProvider as LocalProvider  # DEV-ONLY

    local = LocalProvider(base_dir=tmp_path / "sandboxes")
    yield local
    await local.aclose()


@pytest.fixture
async def new_session(provider: Provider) -> AsyncIterator[SessionFactory]:
    """Creates real local sessions and closes them all at the end of the test."""
    sessions: list[Session] = []

    async def create() -> Session:
        session = await provider.create()
        sessions.append(session)
        return session

    yield create
    for session in sessions:
        await session.close()


@pytest.fixture
def store(tmp_path: Path) -> LocalDirectoryBlobStore:
    return LocalDirectoryBlobStore(tmp_path / "blobs", durable=False)


@pytest.fixture
def snapshotter(store: LocalDirectoryBlobStore) -> Snapshotter:
    return Snapshotter(store)


@pytest.fixture
def store_bytes(store: LocalDirectoryBlobStore) -> Callable[[], int]:
    """Bytes of blob files on disk: what a snapshot step really cost."""
    return lambda: sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file())
