"""What providers of remote sandboxes (E2B, Runloop) share: SDK loading, tags, retries, pip.

* **SDK loading**: provider SDKs are optional extras; `load_sdk` imports one when a provider
  is built and names the extra when it is missing.
* **Tags**: every sandbox this package creates carries `TAG_KEY` (so ``gc`` lists only
  ours) and `SESSION_KEY` (so a listed sandbox maps back to its session), next to the
  spec's own metadata.
* **Retries**: `RemoteProvider._retry` repeats an operation that is safe to repeat, within
  a deadline, after the subclass's `RemoteProvider._translate` hook has turned the SDK's
  exception into the package's taxonomy (which says whether it is retryable). Running code or a
  command is never passed through it.
* **Packages**: a remote sandbox installs with pip run as a command (`pip_install_command`).
* **Change listings**: the sandbox compares its workspace with the host's last listing itself
  (`guest_changes`); `known_reference` names that listing
  by the token the sandbox gave it (the listing's cursor) instead of sending it again.
"""

from __future__ import annotations

import contextlib
import importlib
import shlex
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, TypeVar

from langchain_sandbox.errors import InvalidInputError, MissingDependencyError, SandboxError
from langchain_sandbox.providers.base import (
    ChangeListing,
    FileInfo,
    OutputCallback,
    Provider,
    Session,
    VariablesDump,
)
from langchain_sandbox.results import ExecutionResult
from langchain_sandbox.retries import DEFAULT_ATTEMPTS, DEFAULT_DEADLINE, retry_async

T = TypeVar("T")

TAG_KEY = "langchain_sandbox"
"""Metadata key set to ``"1"`` on every sandbox this package creates (``gc`` filters on it)."""
SESSION_KEY = "langchain_sandbox_session"
"""Metadata key holding the session id, so a listed sandbox maps back to its session."""


def load_sdk(module: str, *, package: str, extra: str, purpose: str) -> ModuleType:
    """Import a provider SDK, or raise [`MissingDependencyError`][langchain_sandbox.MissingDependencyError] naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(package, extra, purpose=purpose) from exc


def tag_metadata(metadata: Mapping[str, str], session_id: str) -> dict[str, str]:
    """The metadata a new sandbox is created with: the spec's, plus this package's tags."""
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInputError("Sandbox metadata must map strings to strings.")
    return {**metadata, TAG_KEY: "1", SESSION_KEY: session_id}


def read_tags(
    tags: Mapping[str, str] | None, default_session_id: str
) -> tuple[str, dict[str, str]]:
    """A listed sandbox's session id and the spec's metadata, without this package's tags."""
    metadata = dict(tags or {})
    session_id = metadata.pop(SESSION_KEY, default_session_id)
    metadata.pop(TAG_KEY, None)
    return session_id, metadata


def pip_install_command(names: Sequence[str]) -> str:
    """The shell command that installs validated requirements with the sandbox's ``python3``.

    ``PIP_BREAK_SYSTEM_PACKAGES``: images whose Python is "externally managed" (Debian's) would
    otherwise refuse; the sandbox is ours to change. Not ``--quiet``: pip's progress lines are
    what ``on_output`` streams while it runs.
    """
    return (
        "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --disable-pip-version-check "
        f"--no-input --progress-bar off -- {shlex.join(names)}"
    )


def known_reference(known: Mapping[str, FileInfo], since: object | None) -> dict[str, Any]:
    """How a change-listing request names the host's listing ``known``.

    The sandbox keeps the listing it answered last under a token it returns as the
    `cursor`. A caller that passes that
    cursor back as ``since`` (with the listing those changes complete, as the contract says) is
    named by the token, a few bytes, instead of one entry per file; otherwise the listing goes
    itself. A sandbox that no longer has the listing (a restarted kernel, a devbox restored from
    an older disk snapshot, another process's capture since) answers ``stale``, and the caller
    asks again with ``since=None``.
    """
    if isinstance(since, str):
        return {"since": since}
    return {
        "known": {
            path: [info.size, info.mtime_ns, info.mode, info.kind] for path, info in known.items()
        }
    }


def change_listing(
    answer: Mapping[str, Any], contents: Mapping[str, bytes], variables: VariablesDump | None
) -> ChangeListing:
    """The [`ChangeListing`][langchain_sandbox.ChangeListing] of a sandbox's answer
    (`changes`, plus its token)."""
    return ChangeListing(
        changed=tuple(FileInfo(*entry) for entry in answer["changed"]),
        gone=tuple(answer["gone"]),
        contents=contents,
        variables=variables,
        cursor=answer["token"],
    )


class RemoteSession(Session):
    """A session of a remote sandbox: packages are installed with pip, run as a command."""

    async def _install_packages(
        self, names: list[str], *, timeout: float, on_output: OutputCallback | None
    ) -> ExecutionResult:
        return await self.run_command(
            pip_install_command(names), timeout=timeout, on_output=on_output
        )


class RemoteProvider(Provider):
    """A provider whose sandboxes live behind an SDK: one retry policy, one translation hook.

    Args:
        retry_attempts: Attempts of a safe operation at most.
        retry_deadline: Seconds within which a safe operation is retried.
    """

    def __init__(
        self, *, retry_attempts: int = DEFAULT_ATTEMPTS, retry_deadline: float = DEFAULT_DEADLINE
    ) -> None:
        self.retry_attempts = retry_attempts
        self.retry_deadline = retry_deadline

    @abstractmethod
    def _translate(self, exc: BaseException, what: str, *, path: str | None) -> SandboxError:
        """Map an SDK or transport exception to the package's taxonomy (the one place that does).

        ``path`` is the workspace path a file operation was about, so "not found" can become
        [`InvalidPathError`][langchain_sandbox.InvalidPathError]. A ``SandboxError`` is returned as is.
        """

    @contextlib.asynccontextmanager
    async def _errors(self, what: str, *, path: str | None = None) -> AsyncIterator[None]:
        """Translate what the block raises (cancellation passes through untouched)."""
        try:
            yield
        except SandboxError:
            raise
        except Exception as exc:
            raise self._translate(exc, what, path=path) from exc

    async def _retry(
        self, what: str, operation: Callable[[], Awaitable[T]], *, path: str | None = None
    ) -> T:
        """Run a safe-to-repeat operation, retrying retryable failures within the deadline."""

        async def attempt() -> T:
            async with self._errors(what, path=path):
                return await operation()

        return await retry_async(
            attempt, attempts=self.retry_attempts, deadline=self.retry_deadline
        )


__all__ = [
    "SESSION_KEY",
    "TAG_KEY",
    "RemoteProvider",
    "RemoteSession",
    "change_listing",
    "known_reference",
    "load_sdk",
    "pip_install_command",
    "read_tags",
    "tag_metadata",
]
