"""One behaviour suite, every provider: local (real bubblewrap, and real gVisor as ``local-gvisor``),
E2B and Runloop (real SDKs against the emulators in ``langchain_sandbox.testing``)."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from langchain_sandbox.providers.base import Provider
from langchain_sandbox.testing._edge import EdgeClient


@contextlib.asynccontextmanager
async def _local(tmp_path: Path) -> AsyncIterator[Provider]:
    from langchain_sandbox.providers.local import LocalProvider

    provider = LocalProvider(base_dir=tmp_path / "local")
    try:
        yield provider
    finally:
        await provider.aclose()


@contextlib.asynccontextmanager
async def _local_gvisor(tmp_path: Path) -> AsyncIterator[Provider]:
    from isolation_levels import require_gvisor

    from langchain_sandbox.providers.local import LocalProvider

    require_gvisor()
    provider = LocalProvider(base_dir=tmp_path / "local", isolation="gvisor")
    try:
        yield provider
    finally:
        await provider.aclose()


@contextlib.asynccontextmanager
async def _e2b(tmp_path: Path) -> AsyncIterator[Provider]:
    from langchain_sandbox.providers.e2b import E2BProvider
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator(api_key="e2b_conformance") as emulator:
        provider = E2BProvider(
            api_key="e2b_conformance", api_url=emulator.url, sandbox_url=emulator.url
        )
        _OPENERS[id(provider)] = _through(emulator)
        try:
            yield provider
        finally:
            await provider.aclose()


@contextlib.asynccontextmanager
async def _runloop(tmp_path: Path) -> AsyncIterator[Provider]:
    from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

    # With the network a real devbox always has: Runloop cannot deny it (no network_control),
    # and the suite checks that the flag tells the truth.
    async with RunloopEmulator(network=True) as emulator:
        provider = emulator.provider()
        _OPENERS[id(provider)] = _through(emulator)
        try:
            yield provider
        finally:
            await provider.aclose()


URLOpener = Callable[[str], bytes]
_OPENERS: dict[int, URLOpener] = {}


def _direct(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


def _through(emulator: EdgeClient) -> URLOpener:
    """A remote sandbox's public port URL cannot be resolved here: the emulator's edge routes
    it on its host name, as the real one does."""

    def get(url: str) -> bytes:
        answer = emulator.open(url)
        if answer.status != 200:
            raise ConnectionRefusedError(f"{answer.status}: {answer.text()}")
        return answer.body

    return get


_FACTORIES = {"local": _local, "local-gvisor": _local_gvisor, "e2b": _e2b, "runloop": _runloop}


@pytest.fixture(params=sorted(_FACTORIES))
async def provider(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Provider]:
    async with _FACTORIES[request.param](tmp_path) as made:
        yield made
        _OPENERS.pop(id(made), None)


@pytest.fixture
def open_url(provider: Provider) -> URLOpener:
    """GET a URL ``expose_port`` gave (``OSError`` while nothing answers there): directly for
    the local provider, through the emulator's edge for E2B and Runloop."""
    return _OPENERS.get(id(provider), _direct)
