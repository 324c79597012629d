"""Fixtures for the E2B provider: the real SDK against the local emulator, on loopback only.

The live key is read here, at import, before any fixture replaces the environment; live tests run
only when it is set.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from emulated_providers import provider_on

from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator

LIVE_E2B_KEY = os.environ.get("E2B_API_KEY", "")

# Distinctive so a leak is unmistakable in records, results, logs and the sandbox's environment.
FAKE_KEY = "e2b_fake_0123456789abcdefDISTINCTIVE"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The one allowed skip: live tests need a real key."""
    gate = pytest.mark.skipif(not LIVE_E2B_KEY, reason="E2B_API_KEY is not set")
    for item in items:
        if item.get_closest_marker("live_e2b") is not None:
            item.add_marker(gate)


@pytest.fixture
def live_e2b_key() -> str:
    return LIVE_E2B_KEY


@pytest.fixture
def emulator() -> Iterator[E2BEmulator]:
    with E2BEmulator(api_key=FAKE_KEY) as running:
        yield running


@pytest.fixture
def sdk_env(emulator: E2BEmulator, monkeypatch: pytest.MonkeyPatch) -> E2BEmulator:
    """Point the SDK's own environment settings at the emulator (for direct SDK tests)."""
    for name in ("E2B_DOMAIN", "E2B_DEBUG", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in emulator.env().items():
        monkeypatch.setenv(name, value)
    return emulator


@pytest.fixture
async def provider(emulator: E2BEmulator) -> AsyncIterator[E2BProvider]:
    async with provider_on(emulator, api_key=FAKE_KEY, retry_deadline=20) as made:
        yield made
