"""The Runloop SDK, loaded on demand, and its errors in the package's taxonomy (the one place
that maps them)."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_sandbox.errors import (
    ProviderUnavailableError,
    ProviderUnreachableError,
    SandboxError,
    SandboxTimeoutError,
)
from langchain_sandbox.providers.names import RUNLOOP as PROVIDER_NAME
from langchain_sandbox.providers.remote import load_sdk
from langchain_sandbox.providers.remote_errors import status_error


def runloop_sdk() -> Any:
    """The ``runloop_api_client`` module, or a clear error naming the extra that brings it."""
    return load_sdk(
        "runloop_api_client",
        package="runloop-api-client",
        extra="runloop",
        purpose="The Runloop provider",
    )


def translate(exc: BaseException, *, what: str) -> SandboxError:
    """Map an SDK or transport error to the package's taxonomy (the one place that does)."""
    if isinstance(exc, SandboxError):
        return exc
    sdk = runloop_sdk()
    from runloop_api_client.lib.polling import PollingTimeout

    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if isinstance(exc, sdk.APIStatusError):
        return status_error(
            exc.response.status_code,
            provider=PROVIDER_NAME,
            label="Runloop",
            what=what,
            message=message,
        )
    if isinstance(exc, (sdk.APITimeoutError, PollingTimeout, asyncio.TimeoutError)):
        return SandboxTimeoutError(f"Runloop {what} timed out", provider=PROVIDER_NAME)
    if isinstance(exc, sdk.APIConnectionError):
        import httpx

        # No answer at all (refused, no route) is told from a connection lost mid-request.
        never_answered = isinstance(exc.__cause__, httpx.ConnectError)
        unreachable = ProviderUnreachableError if never_answered else ProviderUnavailableError
        return unreachable(f"Runloop could not be reached ({what})", provider=PROVIDER_NAME)
    return SandboxError(f"Runloop: {what} failed: {message}", provider=PROVIDER_NAME)


def status_code(exc: BaseException) -> int | None:
    cause = exc.__cause__ if isinstance(exc, SandboxError) else exc
    status = getattr(getattr(cause, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


__all__ = ["runloop_sdk", "status_code", "translate"]
