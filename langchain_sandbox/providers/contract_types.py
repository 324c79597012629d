"""The value types of the provider contract: what a session is made from and what it answers.

[`Limits`][langchain_sandbox.Limits], [`SessionSpec`][langchain_sandbox.SessionSpec],
[`Capabilities`][langchain_sandbox.Capabilities], [`SessionRecord`][langchain_sandbox.SessionRecord],
[`FileInfo`][langchain_sandbox.FileInfo], [`ChangeListing`][langchain_sandbox.ChangeListing] and
[`VariablesDump`][langchain_sandbox.VariablesDump], with the input checks every provider applies
the same way. They hold no behaviour of a sandbox: `providers.base` is the abstract contract that
uses them, and re-exports them so callers import both from one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.guest_facts import variable_names, variable_reasons
from langchain_sandbox.results import DEFAULT_CAPTURE_BYTES

OutputCallback = Callable[[Literal["stdout", "stderr"], str], None]
"""Called with each chunk of output while code runs (for streaming to a UI). Must not block."""

INSTALL_TIMEOUT = 600.0
"""Default wall time of ``install_packages``, in seconds."""


def checked_timeout(timeout: float | None, default: float) -> float:
    """``timeout`` (or ``default`` when ``None``) as seconds; zero, negative, infinite and
    non-numbers are refused the same way on every provider."""
    value = default if timeout is None else timeout
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInputError(f"timeout must be a positive number of seconds, not {timeout!r}.")
    return float(value)


def check_port(port: object) -> int:
    """``port`` if it is a TCP port number (1 to 65535), else raise
    [`InvalidInputError`][langchain_sandbox.InvalidInputError]."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidInputError(f"port must be an integer from 1 to 65535, not {port!r}.")
    return port


def installed_notice(names: Sequence[str]) -> str:
    """The notice a successful ``install_packages`` result carries, on every provider."""
    return f"Installed: {', '.join(names)}."


@dataclass(frozen=True)
class Limits:
    """Resource limits of a session. ``None`` leaves a limit to the provider's own default.

    Attributes:
        timeout: Default wall time of one ``run_code`` / ``run_command`` call, in seconds, and
            its ceiling: through [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] (and so every tool)
            a call may ask for less time, never more.
        memory_mb: Memory of the whole session (all its processes).
        max_processes: Processes and threads the session may have at once.
        max_output_bytes: Bytes of each output stream kept per call (head and tail).
        max_file_bytes: Largest file ``read_files`` returns.
        workspace_bytes: Quota of the workspace (``/home/user``): what its files take on disk,
            a sparse file counted at its apparent size. A call that grows the workspace past it
            is stopped, and ``write_files`` refuses to. Enforced by the local provider; remote
            providers have their own disk sizes. Where the local provider runs as root, the
            workspace is a file system of this size, so writes past it fail with ``ENOSPC``
            inside the sandbox (files unlinked but still open included).
        workspace_files: How many files and directories the workspace may hold. The local
            provider running as root enforces it as the inode count of the workspace's own file
            system; elsewhere it is not enforced. Remote providers have their own.
        tmp_bytes: Size of the private ``/tmp`` (local provider: a tmpfs of this size, which
            also counts against ``memory_mb``); ``None``: as large as ``memory_mb``.
        max_tool_calls: Host tools one ``run_code`` call may call from its code
            (``SandboxExecTool(tools=...)``); past it each call raises ``ToolLimitError`` in
            the code, which stops a runaway loop.
        tool_calls_seconds: Seconds those inner calls may take in total, per ``run_code`` call;
            the one that runs past it is stopped and raises ``ToolLimitError``. The call's own
            ``timeout`` still bounds the whole run, inner calls included.
        max_background_processes: Named background processes (`Session.start_process`) that
            may run at once; port relays are not counted. They count against ``memory_mb`` and
            ``max_processes`` like everything else in the session.
    """

    timeout: float = 60.0
    memory_mb: int | None = 1024
    max_processes: int | None = 256
    max_output_bytes: int = DEFAULT_CAPTURE_BYTES
    max_file_bytes: int = 64 * 1024 * 1024
    workspace_bytes: int | None = 1024 * 1024 * 1024
    workspace_files: int | None = 100_000
    tmp_bytes: int | None = None
    max_tool_calls: int = 100
    tool_calls_seconds: float = 300.0
    max_background_processes: int = 8


@dataclass(frozen=True)
class SessionSpec:
    """What to create.

    Attributes:
        template: Provider image / template / blueprint name; ``None`` for the provider default.
        env: Variables visible inside the sandbox. Only these: the host's environment never is.
        limits: Resource limits.
        network: ``False``: no network; ``True``: the provider's open network; a
            [`NetworkPolicy`][langchain_sandbox.NetworkPolicy]: the hosts it allows and nothing
            else, with secrets the code uses but never reads (refused at creation by a provider
            that cannot enforce it).
        packages: Requirements installed when the session is created.
        metadata: Tags stored with the sandbox (``thread_id`` among them) so ``gc`` can find
            orphans. JSON-safe strings only, never secrets.
    """

    template: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    network: bool | NetworkPolicy = False
    packages: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do. Differences between providers live here and nowhere else.

    Attributes:
        stateful_python: Variables, imports and functions persist between ``run_code`` calls.
        shell: ``run_command`` is available.
        network_control: Network can be denied to sandboxed code (and enabled per session).
        install_packages: ``install_packages`` works.
        figures: matplotlib figures come back as PNG artifacts.
        variables: ``dump_variables`` / ``load_variables`` work (picklable globals).
        pause: ``pause`` keeps the sandbox (its files, and its variables) for a later ``attach``
            and stops paying for compute; without it ``pause`` leaves the sandbox running.
        pause_keeps_memory: A paused sandbox comes back with its whole memory (E2B), not only
            the picklable variables saved before pausing (Runloop keeps only the disk).
        attach_across_processes: ``attach`` works from another process (remote sandboxes do; a
            local sandbox lives and dies with the process that made it).
        native_snapshots: The provider can snapshot a disk itself (used as a fast path).
        tools_from_code: Code can call host tools (``run_code(..., tools=...)``).
        processes: Background processes work (`Session.start_process`, ``process_output``,
            ``stop_process``, ``list_processes``).
        ports: `Session.expose_port` gives a URL the host can open.
    """

    stateful_python: bool = True
    shell: bool = True
    network_control: bool = True
    install_packages: bool = True
    figures: bool = True
    variables: bool = True
    pause: bool = False
    pause_keeps_memory: bool = False
    attach_across_processes: bool = False
    native_snapshots: bool = False
    tools_from_code: bool = False
    processes: bool = True
    ports: bool = False


class SessionRecord(TypedDict, total=False):
    """JSON-safe description of a session: enough to find it again, no secrets, no live handles.

    ``state`` is provider-specific (e.g. a Runloop disk snapshot id); it must be JSON-safe too.
    """

    provider: str
    session_id: str
    sandbox_id: str
    created_at: float
    metadata: dict[str, str]
    state: dict[str, Any]


@dataclass(frozen=True)
class FileInfo:
    """One entry of the workspace.

    Attributes:
        path: Workspace-relative POSIX path (``"data/a.csv"``).
        size: Size in bytes (0 for directories).
        mtime_ns: Modification time in nanoseconds, as precise as the provider reports it; used
            to skip re-hashing unchanged files between snapshots.
        mode: Permission bits (``0o644``).
        kind: ``"file"``, ``"dir"``, ``"symlink"`` (symlinks are listed, never followed) or
            ``"fifo"`` (a named pipe, where the provider lists them: the local provider).
        inode: The regular file's inode number where the provider reports it (0: not reported,
            and always 0 for directories and symlinks); two paths with the same inode are hard
            links of one file, which a snapshot keeps as such.
        links: The regular file's hard link count, where reported (1 otherwise).
        sparse: The regular file takes fewer blocks on disk than its size (it has holes),
            where reported; a restore writes such a file's zero blocks as holes.
    """

    path: str
    size: int
    mtime_ns: int
    mode: int = 0o644
    kind: Literal["file", "dir", "symlink", "fifo"] = "file"
    inode: int = 0
    links: int = 1
    sparse: bool = False

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"


@dataclass(frozen=True)
class FileMetadata:
    """What a restore gives a file besides its contents (see `Session.write_restored`).

    Attributes:
        mtime_ns: The modification time it was captured with, in nanoseconds.
        sparse: Write its zero blocks as holes (it was sparse when captured).
    """

    mtime_ns: int
    sparse: bool = False


@dataclass(frozen=True)
class ChangeListing:
    """How the workspace differs from a listing the caller already holds, as
    [`Session.list_changes`][langchain_sandbox.Session.list_changes] returns it.

    Attributes:
        changed: Every entry (any kind) of the recursive listing that is not in ``known`` exactly
            as it is now: new paths, and paths whose size, mtime, mode or kind differ. A file
            with contents is listed with its stat after its contents were read.
        gone: The paths of ``known`` the workspace no longer has (or that a listing no longer
            reaches: sockets and devices are never listed, FIFOs only by some providers).
        contents: path -> bytes of some of the regular files in ``changed`` (a file over the
            provider's bundling cap, one that changed while it was read, or one that is not a
            regular file has none: read those with [`Session.read_files`][langchain_sandbox.Session.read_files]).
        variables: The interpreter's globals, when the provider dumps them in the same request
            ([`Session.lists_variables`][langchain_sandbox.Session.lists_variables]) and the caller asked for them.
        cursor: An opaque token naming the moment of this listing, or ``None``. Passed back as
            ``since`` together with the listing these changes complete, it lets the provider
            skip what it can prove unchanged since then (the local provider: entries whose
            ``ctime`` is older).
    """

    changed: tuple[FileInfo, ...]
    gone: tuple[str, ...]
    contents: Mapping[str, bytes] = field(default_factory=dict)
    variables: VariablesDump | None = None
    cursor: object | None = None


def changes_between(
    known: Mapping[str, FileInfo],
    listing: Iterable[FileInfo],
    contents: Mapping[str, bytes] | None = None,
) -> ChangeListing:
    """The [`ChangeListing`][langchain_sandbox.ChangeListing] of a full ``listing`` against ``known`` (for providers that
    list everything and compare on the host)."""
    changed: list[FileInfo] = []
    seen: set[str] = set()
    for info in listing:
        seen.add(info.path)
        if known.get(info.path) != info:
            changed.append(info)
    gone = tuple(path for path in known if path not in seen)
    return ChangeListing(tuple(changed), gone, contents or {})


@dataclass(frozen=True)
class VariablesDump:
    """A session's Python globals, pickled inside the sandbox as one object graph.

    Attributes:
        data: Opaque bytes for [`Session.load_variables`][langchain_sandbox.Session.load_variables] (produced by
            `langchain_sandbox.providers.guest.variables`; the host never unpickles them).
        saved: Names captured.
        skipped: Names that were not captured; a restore tells the model.
        reasons: Why each skipped name was left out (its value cannot be pickled, or the dump
            would have been larger than allowed with it), said when the dump is made.
    """

    data: bytes
    saved: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)

    def notice(self) -> str | None:
        """The message for the model naming what was not captured and why, or ``None``."""
        if not self.skipped:
            return None
        unexplained = [name for name in self.skipped if name not in self.reasons]
        described = "; ".join(
            part for part in (variable_reasons(self.reasons), variable_names(unexplained)) if part
        )
        return f"Python variables not saved with this snapshot: {described}."


__all__ = [
    "INSTALL_TIMEOUT",
    "Capabilities",
    "ChangeListing",
    "FileInfo",
    "FileMetadata",
    "Limits",
    "OutputCallback",
    "SessionRecord",
    "SessionSpec",
    "VariablesDump",
    "changes_between",
    "check_port",
    "checked_timeout",
    "installed_notice",
]
