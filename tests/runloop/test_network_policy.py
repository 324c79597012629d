"""Runloop refuses a NetworkPolicy before asking the platform for anything: its network policies
are not mapped yet, and a devbox with the whole internet is not what a policy asks for."""

from __future__ import annotations

import pytest

from langchain_sandbox import ConfigurationError, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator


async def test_a_policy_is_refused_at_creation(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    policy = NetworkPolicy(allow=["api.test"], secrets=[Secret("KEY", "v4lue", ["api.test"])])
    with pytest.raises(ConfigurationError, match="does not enforce a NetworkPolicy") as caught:
        await provider.create(SessionSpec(network=policy))
    assert "v4lue" not in str(caught.value)
    assert emulator.requests == []
