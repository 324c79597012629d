"""E2B's SDK and what its answers mean here: loading it, its errors in the package's taxonomy
(statuses through `remote_errors`, the rest by the SDK's exception types), and a code execution's
result fields."""

from __future__ import annotations

import re
from typing import Any

from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    InvalidPathError,
    ProviderUnavailableError,
    ProviderUnreachableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
)
from langchain_sandbox.providers.names import E2B as PROVIDER_NAME
from langchain_sandbox.providers.remote import load_sdk
from langchain_sandbox.providers.remote_errors import status_error
from langchain_sandbox.results import Artifact, ExecutionError


def load_e2b_sdk() -> Any:
    return load_sdk(
        "e2b_code_interpreter",
        package="e2b-code-interpreter",
        extra="e2b",
        purpose="The E2B provider",
    )


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    # The code interpreter and the control plane put the status first: "503 Service ...", "429: ..."
    match = re.match(r"\s*(\d{3})\b", str(exc))
    return int(match.group(1)) if match else None


def translate(
    exc: BaseException, what: str, *, secret: str | None, path: str | None = None
) -> SandboxError:
    """Map an SDK or transport exception to the package's taxonomy. The one place that does."""
    if isinstance(exc, SandboxError):
        return exc
    import e2b
    import httpx

    message = str(exc) or type(exc).__name__
    if secret:
        message = message.replace(secret, "<redacted>")
    details = {"sdk_error": type(exc).__name__}

    def make(cls: type[SandboxError], retryable: bool | None = None) -> SandboxError:
        return cls(
            f"E2B: {what} failed: {message}",
            retryable=retryable,
            provider=PROVIDER_NAME,
            details=details,
        )

    if path is not None and isinstance(exc, e2b.FileNotFoundException):
        return InvalidPathError(f"{path!r} does not exist in the sandbox.", provider=PROVIDER_NAME)
    if path is not None and isinstance(exc, e2b.InvalidArgumentException):
        return InvalidPathError(f"{path!r} cannot be used here: {message}", provider=PROVIDER_NAME)
    # The edge's 502 for a sandbox that no longer exists arrives, through the code interpreter,
    # as a plain exception whose text is all there is; the SDK itself tells envd's case by it.
    if "was not found" in message or "was killed" in message:
        return make(SandboxGoneError)
    status = _status_of(exc)
    if status is not None:
        return status_error(
            status,
            provider=PROVIDER_NAME,
            label="E2B",
            what=what,
            message=message,
            details=details,
        )
    if isinstance(exc, e2b.AuthenticationException):
        return make(AuthenticationError)
    if isinstance(exc, e2b.RateLimitException):
        return make(QuotaExceededError)
    if isinstance(exc, e2b.NotFoundException | e2b.SandboxNotRunningException):
        return make(SandboxGoneError)
    if isinstance(exc, e2b.SandboxUnreachableException):
        return make(ProviderUnavailableError)
    if isinstance(exc, e2b.TimeoutException | httpx.TimeoutException | TimeoutError):
        return make(SandboxTimeoutError)
    if isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
        return make(ProviderUnreachableError)
    if isinstance(exc, httpx.TransportError | ConnectionError | OSError):
        return make(ProviderUnavailableError)
    if isinstance(exc, e2b.InvalidArgumentException | e2b.TemplateException):
        return make(InvalidInputError)
    return make(SandboxError, retryable=False)


def execution_fields(execution: Any) -> dict[str, Any]:
    """Result fields from the SDK's ``Execution``: the last value, figures, the exception."""
    value: str | None = None
    artifacts: list[Artifact] = []
    for result in execution.results:
        if result.is_main_result and result.text is not None:
            value = result.text
        if result.png:
            name = f"figure-{len(artifacts) + 1}.png"
            artifacts.append(Artifact(name=name, mime_type="image/png", data=result.png))
    error = execution.error
    return {
        "value": value,
        "artifacts": artifacts,
        "error": (
            ExecutionError(name=error.name, value=error.value, traceback=error.traceback or "")
            if error is not None
            else None
        ),
        "exit_code": 1 if error is not None else 0,
    }
