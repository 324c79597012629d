"""One table from an HTTP status to the package's error, for every remote provider.

E2B, Runloop and Kubernetes each answer failures with HTTP statuses, wrapped by their SDKs in
exceptions of their own. Each provider's ``_translate`` finds the status (and handles what only its
SDK says: a missing file, a transport failure before any answer), then calls `status_error`, so a
status means the same on every provider:

========================  ===================================  ===========
status                    error                                retryable
========================  ===================================  ===========
400, 422                  `InvalidInputError`                  no
401, 403                  `AuthenticationError`                no
404, 410                  `SandboxGoneError`                   no
408, 409                  `ProviderUnavailableError`           yes
429                       `QuotaExceededError`                 yes
5xx                       `ProviderUnavailableError`           yes
any other                 `SandboxError`                       no
========================  ===================================  ===========

408 and 409 are retryable: a request the server gave up waiting for, or one that met another
change of the same object (Kubernetes' optimistic concurrency, Runloop's devbox in transition),
may succeed when sent again. The error's ``details["status"]`` is the status, an ``int``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    ProviderUnavailableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
)

STATUS_ERRORS: Final[Mapping[int, type[SandboxError]]] = {
    400: InvalidInputError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: SandboxGoneError,
    408: ProviderUnavailableError,
    409: ProviderUnavailableError,
    410: SandboxGoneError,
    422: InvalidInputError,
    429: QuotaExceededError,
}
"""The statuses below 500 that mean more than "failed" (see the module docstring)."""


def error_class(status: int) -> type[SandboxError]:
    """The error an HTTP ``status`` becomes, on every remote provider."""
    if status in STATUS_ERRORS:
        return STATUS_ERRORS[status]
    return ProviderUnavailableError if status >= 500 else SandboxError


def status_error(
    status: int,
    *,
    provider: str,
    label: str,
    what: str,
    message: str,
    details: Mapping[str, Any] | None = None,
) -> SandboxError:
    """The error of a request ``what`` that ``label`` (``"E2B"``, ``"Runloop"``...) answered with
    ``status``: ``"<label>: <what> failed (<status>): <message>"``, typed by `error_class`."""
    return error_class(status)(
        f"{label}: {what} failed ({status}): {message}",
        provider=provider,
        details={**(details or {}), "status": status},
    )


__all__ = ["STATUS_ERRORS", "error_class", "status_error"]
