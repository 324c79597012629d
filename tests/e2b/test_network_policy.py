"""E2B refuses a NetworkPolicy before asking the platform for anything: its ``allow_out`` lists
and header rules are not mapped yet, and a sandbox with the whole internet is not what a policy
asks for."""

from __future__ import annotations

import pytest

from langchain_sandbox import ConfigurationError, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator


async def test_a_policy_is_refused_at_creation(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    policy = NetworkPolicy(allow=["api.test"], secrets=[Secret("KEY", "v4lue", ["api.test"])])
    with pytest.raises(ConfigurationError, match="does not enforce a NetworkPolicy") as caught:
        await provider.create(SessionSpec(network=policy))
    assert "v4lue" not in str(caught.value)
    assert emulator.requests == []
