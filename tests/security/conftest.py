"""Fixtures of the security suite: real bubblewrap sandboxes under a temporary base dir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[LocalProvider]:
    made = LocalProvider(base_dir=tmp_path / "sandboxes")
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
async def session(provider: LocalProvider) -> AsyncIterator[LocalSession]:
    made = await provider.create(SessionSpec(limits=Limits(timeout=60.0)))
    try:
        yield made
    finally:
        await made.close()
