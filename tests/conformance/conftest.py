"""One behaviour suite, every provider: local (real bubblewrap, and real gVisor as ``local-gvisor``),
E2B, Runloop and Kubernetes (real SDKs against the emulators in ``langchain_sandbox.testing``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
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


@contextlib.asynccontextmanager
async def _e2b(tmp_path: Path) -> AsyncIterator[Provider]:
    from langchain_sandbox.providers.e2b import E2BProvider
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator(api_key="e2b_conformance") as emulator:
        provider = E2BProvider(
            api_key="e2b_conformance", api_url=emulator.url, sandbox_url=emulator.url
        )
        _OPENERS[id(provider)] = through_edge(emulator)
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
        _OPENERS[id(provider)] = through_edge(emulator)
        try:
            yield provider
        finally:
            await provider.aclose()


@contextlib.asynccontextmanager
async def _kubernetes(tmp_path: Path) -> AsyncIterator[Provider]:
    from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator

    # With the network a pod has unless a NetworkPolicy says otherwise: the provider has no
    # per-session switch (no network_control), and the suite checks that the flag tells the truth.
    async with KubernetesEmulator(network=True) as cluster:
        provider = cluster.provider()
        try:
            yield provider
        finally:
            await provider.aclose()


_OPENERS: dict[int, URLOpener] = {}


_FACTORIES = {
    "local": _local,
    "local-gvisor": _local_gvisor,
    "e2b": _e2b,
    "runloop": _runloop,
    "kubernetes": _kubernetes,
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
