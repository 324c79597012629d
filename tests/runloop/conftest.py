"""Fixtures for the Runloop provider: a fresh emulator per test, the provider pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from emulated_providers import provider_on

from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

from .keys import FAKE_KEY


@pytest.fixture(autouse=True)
def _no_host_runloop_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests talk to the emulator only: the host's key and URL must not be picked up."""
    for name in ("RUNLOOP_API_KEY", "RUNLOOP_BASE_URL", "RUNLOOP_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def emulator() -> AsyncIterator[RunloopEmulator]:
    async with RunloopEmulator(api_key=FAKE_KEY) as running:
        yield running


@pytest.fixture
async def provider(emulator: RunloopEmulator) -> AsyncIterator[RunloopProvider]:
    async with provider_on(emulator, retry_deadline=10.0) as made:
        yield made
