"""A NetworkPolicy the local provider cannot route through its proxy is refused at ``create``:
without isolation the code has the host's network, and nothing is ever started."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_sandbox import ConfigurationError, NetworkPolicy, SessionSpec
from langchain_sandbox.providers.local import LocalProvider


async def test_a_policy_without_bubblewrap_is_refused(tmp_path: Path) -> None:
    provider = LocalProvider(base_dir=tmp_path / "sandboxes", isolation="none")
    try:
        with pytest.raises(ConfigurationError, match="isolation='bubblewrap'"):
            await provider.create(SessionSpec(network=NetworkPolicy(allow=["api.test"])))
        assert not (tmp_path / "sandboxes" / "sessions").exists()
    finally:
        await provider.aclose()
