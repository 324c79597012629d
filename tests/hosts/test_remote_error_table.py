"""One HTTP status, one error, on every remote provider: each provider's real SDK is driven
against its emulator, the listing request is answered with an injected status, and the error
that comes out must be the table's (`providers.remote_errors`), with the status in its details."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    ProviderUnavailableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
)
from langchain_sandbox.providers.base import Provider

# Written out, not read from the module under test: a change of the table must change this too.
_EXPECTED: dict[int, tuple[type[SandboxError], bool]] = {
    400: (InvalidInputError, False),
    401: (AuthenticationError, False),
    403: (AuthenticationError, False),
    404: (SandboxGoneError, False),
    408: (ProviderUnavailableError, True),
    409: (ProviderUnavailableError, True),
    418: (SandboxError, False),
    429: (QuotaExceededError, True),
    500: (ProviderUnavailableError, True),
    503: (ProviderUnavailableError, True),
}

Faulted = Callable[[int], AbstractAsyncContextManager[Provider]]


@asynccontextmanager
async def _e2b(status: int) -> AsyncIterator[Provider]:
    pytest.importorskip("e2b_code_interpreter")
    from langchain_sandbox.providers.e2b import E2BProvider
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator(api_key="e2b_table_key") as emulator:
        emulator.inject(r"^GET /v2/sandboxes$", status=status, times=None, should_retry=False)
        provider = E2BProvider(
            api_key=emulator.api_key,
            api_url=emulator.url,
            sandbox_url=emulator.url,
            retry_attempts=1,
        )
        try:
            yield provider
        finally:
            await provider.aclose()


@asynccontextmanager
async def _runloop(status: int) -> AsyncIterator[Provider]:
    pytest.importorskip("runloop_api_client")
    from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

    async with RunloopEmulator(api_key="rl_table_key") as emulator:
        emulator.inject(r"^/v1/devboxes$", method="GET", status=status, times=100)
        provider: Provider = emulator.provider(retry_attempts=1)
        try:
            yield provider
        finally:
            await provider.aclose()


@asynccontextmanager
async def _kubernetes(status: int) -> AsyncIterator[Provider]:
    pytest.importorskip("k8s_agent_sandbox")
    from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator

    async with KubernetesEmulator() as cluster:
        cluster.inject(re.escape("/sandboxclaims") + "$", method="GET", status=status, times=100)
        provider: Provider = cluster.provider(retry_attempts=1)
        try:
            yield provider
        finally:
            await provider.aclose()


_PROVIDERS: dict[str, Faulted] = {"e2b": _e2b, "runloop": _runloop, "kubernetes": _kubernetes}


@pytest.mark.parametrize("status", sorted(_EXPECTED))
@pytest.mark.parametrize("name", sorted(_PROVIDERS))
async def test_a_status_means_the_same_error_on_every_provider(name: str, status: int) -> None:
    expected, retryable = _EXPECTED[status]
    async with _PROVIDERS[name](status) as provider:
        with pytest.raises(SandboxError) as raised:
            await provider.list_sessions()
    error: Any = raised.value
    assert type(error) is expected, f"{name}: {status} became {type(error).__name__}: {error}"
    assert error.retryable is retryable
    assert error.details["status"] == status
    assert error.provider == name
