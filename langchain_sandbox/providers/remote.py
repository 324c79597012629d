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
* **Change listings**: `RemoteSession.list_changes` owns the protocol: the sandbox compares its
  workspace with the host's last listing itself (`guest.changes.answer_changes`);
  `known_reference` names that listing by the token the sandbox gave it (the listing's cursor)
  instead of sending it again, and a ``stale`` answer sends it again. A provider only says how
  one request reaches its guest (`RemoteSession._ask_changes`).
* **Errors**: `remote_errors` maps an HTTP status to the same error on every provider.
"""

from __future__ import annotations

import contextlib
import importlib
import shlex
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, TypeVar

from langchain_sandbox.core.retries import DEFAULT_ATTEMPTS, DEFAULT_DEADLINE, retry_async
from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import (
    InvalidInputError,
    InvalidPathError,
    MissingDependencyError,
    SandboxError,
)
from langchain_sandbox.providers.base import (
    ChangeListing,
    FileInfo,
    OutputCallback,
    Provider,
    Session,
    VariablesDump,
)
from langchain_sandbox.results import ExecutionResult

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


BUNDLE_BYTES = 16 * 1024 * 1024
"""Bytes of file contents one change listing carries at most (the rest is read one request per
file)."""


class RemoteSession(Session):
    """A session of a remote sandbox: packages are installed with pip, run as a command, and
    the workspace's changes are listed by the guest, over the protocol `list_changes` keeps."""

    lists_variables = True
    bundle_file_bytes: ClassVar[int] = 4 * 1024 * 1024
    """Largest file a change listing carries (a bigger one is read on its own)."""
    listing_form: ClassVar[Mapping[str, int]] = {}
    """How coarse the provider's own ``list_files`` entries are (``mtime_unit_ns``,
    ``mode_mask`` of `guest.changes.changes`), so the guest lists in the same form."""

    async def _install_packages(
        self, names: list[str], *, timeout: float, on_output: OutputCallback | None
    ) -> ExecutionResult:
        return await self.run_command(
            pip_install_command(names), timeout=timeout, on_output=on_output
        )

    async def list_changes(
        self,
        known: Mapping[str, FileInfo],
        *,
        max_bytes: int,
        variables_max_bytes: int | None = None,
        since: object | None = None,
    ) -> ChangeListing:
        """One request to the guest (`guest.changes.answer_changes`): it compares the workspace
        with ``known``, named by its token when ``since`` is the cursor it returned
        (`known_reference`), reads the changed regular files and, when asked, dumps the
        variables. A guest that lost the listing the token named answers ``stale``, and the
        listing itself is sent once more."""
        request: dict[str, Any] = {
            "path": WORKSPACE_ROOT,
            "max_bytes": min(max_bytes, BUNDLE_BYTES),
            "max_file_bytes": self.bundle_file_bytes,
            **self.listing_form,
        }
        reply = await self._ask_changes(
            {**request, **known_reference(known, since)}, variables_max_bytes
        )
        if reply.answer.get("stale"):
            reply = await self._ask_changes(
                {**request, **known_reference(known, None)}, variables_max_bytes
            )
        if "missing" in reply.answer:
            raise InvalidPathError("The workspace is gone.", provider=self.provider_name)
        return change_listing(reply.answer, reply.contents, reply.variables)

    @abstractmethod
    async def _ask_changes(
        self, request: dict[str, Any], variables_max_bytes: int | None
    ) -> ChangesReply:
        """Send ``request`` to the guest's `answer_changes` (with the variables dump when
        ``variables_max_bytes`` is set) and return its answer, the changed files' contents
        decoded, and the dump."""


@dataclass(frozen=True)
class ChangesReply:
    """What a guest answered a change-listing request: the `answer_changes` answer (its
    ``changed``, ``gone``, ``token``; or ``stale`` / ``missing``), the contents it carried, and
    the variables dump when one was asked for and the answer is not stale."""

    answer: Mapping[str, Any]
    contents: Mapping[str, bytes] = field(default_factory=dict)
    variables: VariablesDump | None = None


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
    "BUNDLE_BYTES",
    "SESSION_KEY",
    "TAG_KEY",
    "ChangesReply",
    "RemoteProvider",
    "RemoteSession",
    "change_listing",
    "known_reference",
    "load_sdk",
    "pip_install_command",
    "read_tags",
    "tag_metadata",
]
