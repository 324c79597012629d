"""Fixtures of the security suite: real bubblewrap sandboxes under a temporary base dir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from langchain_sandbox.providers.local import LocalProvider


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[LocalProvider]:
    made = LocalProvider(base_dir=tmp_path / "sandboxes")
    try:
        yield made
    finally:
        await made.aclose()
