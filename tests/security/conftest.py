"""Fixtures of the security suite: the local provider's own (real sandboxes under a temporary
base dir), shared rather than repeated, at every isolation level: each attack runs on bubblewrap
and on gVisor."""

from __future__ import annotations

import pytest
from isolation_levels import ISOLATION_LEVELS, require_gvisor
from local.conftest import provider, session


@pytest.fixture(params=ISOLATION_LEVELS)
def isolation(request: pytest.FixtureRequest) -> str:
    if request.param == "gvisor":
        require_gvisor()
    return str(request.param)


__all__ = ["isolation", "provider", "session"]
