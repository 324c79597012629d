"""Fixtures of the graph tests: one real runtime on the local (bubblewrap) provider per module.

Each test uses its own thread ids, so tests share the runtime's machinery but never a sandbox.
Snapshots go to a per-module temporary blob store, never to the user's data directory.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxRuntime]:
    blobs: Path = tmp_path_factory.mktemp("blobs")
    sandbox_runtime = SandboxRuntime(
        "local", snapshotter=Snapshotter(LocalDirectoryBlobStore(blobs, durable=False))
    )
    try:
        yield sandbox_runtime
    finally:
        sandbox_runtime.close()
    assert sandbox_runtime.live_sessions() == {}


@pytest.fixture
def thread() -> str:
    """A fresh thread id (so no two tests ever share a sandbox)."""
    return f"t-{uuid.uuid4().hex[:10]}"
