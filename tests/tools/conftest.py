"""Fixtures for the tool tests: a runtime on the real local provider (bubblewrap) with its own
workspace and snapshot store under the test's temporary directory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


def make_local_runtime(root: Path, **kwargs: object) -> SandboxRuntime:
    """A runtime on the local provider whose sessions and blobs live under ``root``."""
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / "sessions"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runtimes built with defaults (the default runtime, a toolkit's own) keep their blobs and
    sessions under the test's directory, never under the real home."""
    monkeypatch.setenv("LANGCHAIN_SANDBOX_HOME", str(tmp_path / "home"))


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[SandboxRuntime]:
    made = make_local_runtime(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
async def aruntime(tmp_path: Path) -> AsyncIterator[SandboxRuntime]:
    made = make_local_runtime(tmp_path)
    try:
        yield made
    finally:
        await made.aclose()
