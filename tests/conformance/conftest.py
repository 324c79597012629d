"""One behaviour suite, every provider: local (real bubblewrap, and real gVisor as ``local-gvisor``),
E2B, Runloop and Kubernetes (real SDKs against the emulators in ``langchain_sandbox.testing``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from emulated_providers import EMULATED, emulated_provider
from process_helpers import URLOpener, open_directly, through_edge

from langchain_sandbox.providers.base import Provider


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


# Runloop and Kubernetes with the network a real devbox or pod always has: neither can deny it
# per session (no network_control), and the suite checks that the flag tells the truth.
_EMULATOR_OPTIONS: dict[str, dict[str, Any]] = {
    "runloop": {"network": True},
    "kubernetes": {"network": True},
}


def _emulated(name: str) -> Callable[[Path], contextlib.AbstractAsyncContextManager[Provider]]:
    @contextlib.asynccontextmanager
    async def factory(tmp_path: Path) -> AsyncIterator[Provider]:
        async with emulated_provider(name, emulator=_EMULATOR_OPTIONS.get(name)) as (
            emulator,
            provider,
        ):
            # No port URL to open on Kubernetes: the provider has no ports.
            if name != "kubernetes":
                _OPENERS[id(provider)] = through_edge(emulator)
            yield provider

    return factory


_OPENERS: dict[int, URLOpener] = {}


_FACTORIES = {
    "local": _local,
    "local-gvisor": _local_gvisor,
    **{name: _emulated(name) for name in EMULATED},
}


@pytest.fixture(params=sorted(_FACTORIES))
async def provider(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Provider]:
    async with _FACTORIES[request.param](tmp_path) as made:
        yield made
        _OPENERS.pop(id(made), None)


@pytest.fixture
def open_url(provider: Provider) -> URLOpener:
    """GET a URL ``expose_port`` gave (``OSError`` while nothing answers there): directly for
    the local provider, through the emulator's edge for E2B and Runloop."""
    return _OPENERS.get(id(provider), open_directly)
