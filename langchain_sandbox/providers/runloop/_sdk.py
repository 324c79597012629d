"""The Runloop SDK, loaded on demand, and its errors in the package's taxonomy (the one place
that maps them)."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_sandbox.errors import (
    AuthenticationError,
    ProviderUnavailableError,
    ProviderUnreachableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
)
from langchain_sandbox.providers.names import RUNLOOP as PROVIDER_NAME
from langchain_sandbox.providers.remote import load_sdk


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

    details: dict[str, Any] = {}
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        details["status"] = status
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = f"Runloop {what} failed: {message}"
    if isinstance(exc, sdk.RateLimitError):
        return QuotaExceededError(text, provider=PROVIDER_NAME, details=details)
    if isinstance(exc, (sdk.AuthenticationError, sdk.PermissionDeniedError)):
        return AuthenticationError(
            f"Runloop rejected the API key ({what}): {message}",
            provider=PROVIDER_NAME,
            details=details,
        )
    if isinstance(exc, sdk.NotFoundError):
        return SandboxGoneError(
            f"The Runloop devbox is gone ({what}): {message}",
            provider=PROVIDER_NAME,
            details=details,
        )
    if isinstance(exc, (sdk.APITimeoutError, PollingTimeout, asyncio.TimeoutError)):
        return SandboxTimeoutError(
            f"Runloop {what} timed out", provider=PROVIDER_NAME, details=details
        )
    if isinstance(exc, sdk.APIConnectionError):
        import httpx

        # No answer at all (refused, no route) is told from a connection lost mid-request.
        never_answered = isinstance(exc.__cause__, httpx.ConnectError)
        unreachable = ProviderUnreachableError if never_answered else ProviderUnavailableError
        return unreachable(
            f"Runloop could not be reached ({what})", provider=PROVIDER_NAME, details=details
        )
    if (
        isinstance(exc, sdk.APIStatusError)
        and status is not None
        and (status >= 500 or status in (408, 409))
    ):
        return ProviderUnavailableError(text, provider=PROVIDER_NAME, details=details)
    return SandboxError(text, provider=PROVIDER_NAME, details=details)


def status_code(exc: BaseException) -> int | None:
    cause = exc.__cause__ if isinstance(exc, SandboxError) else exc
    status = getattr(getattr(cause, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


__all__ = ["runloop_sdk", "status_code", "translate"]
