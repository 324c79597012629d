"""The error taxonomy.

Failures of *user code* are never exceptions: they are [`ExecutionResult`][langchain_sandbox.ExecutionResult]
values the model can read. The exceptions here are for the infrastructure around the code: a sandbox
that is gone, a provider that is down, an input the package refuses. Each class says whether repeating
the same operation may succeed (``retryable``); retries use that flag and nothing else.
"""

from __future__ import annotations

from typing import Any


class SandboxError(Exception):
    """Base class of every error this package raises.

    Attributes:
        retryable: ``True`` when the same operation may succeed if repeated (after a backoff).
        provider: Name of the provider the error came from, when there is one.
        details: Small JSON-safe diagnostics (status codes, ids). Never secrets.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        provider: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable
        self.provider = provider
        self.details = dict(details or {})

    def __str__(self) -> str:
        return self.message


class InvalidInputError(SandboxError, ValueError):
    """The caller (or the model) passed something the package refuses to act on."""


class InvalidPathError(InvalidInputError):
    """A path escapes the workspace (``..``, an absolute path outside it, a symlink leading out)."""


class InvalidPackageNameError(InvalidInputError):
    """A package name that is an option, a URL, a path or shell syntax rather than a requirement."""


class UnsafeArchiveError(InvalidInputError):
    """A snapshot or archive that would write outside the workspace, or is malformed or too large."""


class CapabilityError(InvalidInputError):
    """The provider (or this session of it) cannot do what was asked: its
    [`Capabilities`][langchain_sandbox.Capabilities] flag for it is ``False``. The message says
    which and what to use instead."""


class ProcessLimitError(InvalidInputError):
    """Starting one more background process would pass the session's
    ``Limits.max_background_processes``; stop one first."""


class SandboxTimeoutError(SandboxError):
    """An infrastructure operation (create, attach, upload...) ran past its deadline.

    User code that runs too long is *not* this: it returns a result with ``timed_out=True``.
    """

    retryable = True


class SandboxGoneError(SandboxError):
    """The sandbox no longer exists (expired, killed, its worker died). Create or restore a new one."""


class SessionClosedError(SandboxError):
    """The session was closed by its owner; using it again is a programming error."""


class ProviderUnavailableError(SandboxError):
    """The provider could not be reached or answered 5xx. Usually transient."""

    retryable = True


class ProviderUnreachableError(ProviderUnavailableError):
    """The provider did not answer at all (connection refused, no route, DNS): a wrong address
    or a network down, which waiting seldom fixes. Retried once at most
    (`UNREACHABLE_ATTEMPTS`), so the caller hears in seconds."""


class CheckpointerUnavailableError(SandboxError):
    """A checkpointer named by URL could not be opened (server down, wrong address or password)."""

    retryable = True


class QuotaExceededError(SandboxError):
    """The provider rate-limited the request or the account ran out of quota (HTTP 429)."""

    retryable = True


class ConfigurationError(SandboxError):
    """The package is set up wrong for where it runs: an extra is not installed, a provider has no
    (or a rejected) API key, the local provider cannot isolate code on this machine.

    These are for the developer, not the model: the model can do nothing about them, so tools and
    middleware never turn them into a tool result; they propagate out of the agent's run. They
    are raised when the runtime or provider is built where that can be known, else at the first
    call.
    """


class AuthenticationError(ConfigurationError):
    """The provider has no API key, or rejected it (HTTP 401/403). Retrying cannot help."""


class ThreadBusyError(SandboxError):
    """Another run holds the thread (the turn lease of
    [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware], ``SandboxRuntime.hold_thread`` or
    [`PostgresThreadLock`][langchain_sandbox.PostgresThreadLock]): running this turn now would
    lose one of the two. Retry when it ends, or wait for it with ``hold_thread(..., wait=)``.

    Attributes:
        thread_id: The thread.
    """

    retryable = True

    def __init__(self, message: str, *, thread_id: str) -> None:
        super().__init__(message, details={"thread_id": thread_id})
        self.thread_id = thread_id


class SnapshotStoreUnavailable(ProviderUnavailableError):
    """The snapshot store could not be reached (down, connection refused, timed out) while a
    sandbox was being restored or a record read. Nothing is lost: the call fails before it
    runs, the checkpoint keeps naming the snapshot, and a later call restores it in full once
    the store answers again. Usually transient."""


class SnapshotNotFoundError(SandboxError):
    """A snapshot (or one of its blobs) named by a record is missing from the snapshot store."""


class IsolationUnavailableError(ConfigurationError):
    """The local provider cannot isolate code on this machine; the message says how to fix it."""


class EnvironmentBuildError(ConfigurationError):
    """A local sandbox environment could not be built (no package index reachable, a requirement
    that does not resolve). The message names the cause and pip's last lines.

    The application chooses environments, not the model, so this is a developer's error: it
    propagates out of the agent's run like any other [`ConfigurationError`][langchain_sandbox.ConfigurationError]."""


class UnknownArgumentError(ConfigurationError, TypeError):
    """A constructor was given an argument it does not take (a typo, or an option of another
    object). The message names the closest valid argument, or where the option belongs.

    A ``TypeError`` too, as Python's own unexpected-keyword error is."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""

    def __init__(self, package: str, extra: str, *, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed. "
            f"Install it with: pip install 'langchain-sandbox[{extra}]'"
        )
        self.package = package
        self.extra = extra


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: only [`SandboxError`][langchain_sandbox.SandboxError] with ``retryable`` set."""
    return isinstance(exc, SandboxError) and exc.retryable


__all__ = [
    "AuthenticationError",
    "CapabilityError",
    "CheckpointerUnavailableError",
    "ConfigurationError",
    "EnvironmentBuildError",
    "InvalidInputError",
    "InvalidPackageNameError",
    "InvalidPathError",
    "IsolationUnavailableError",
    "MissingDependencyError",
    "ProcessLimitError",
    "ProviderUnavailableError",
    "ProviderUnreachableError",
    "QuotaExceededError",
    "SandboxError",
    "SandboxGoneError",
    "SandboxTimeoutError",
    "SessionClosedError",
    "SnapshotNotFoundError",
    "SnapshotStoreUnavailable",
    "ThreadBusyError",
    "UnknownArgumentError",
    "UnsafeArchiveError",
    "is_retryable",
]
