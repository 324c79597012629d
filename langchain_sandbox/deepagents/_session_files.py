"""The workspace's files on a session, for [`SandboxBackend`][langchain_sandbox.SandboxBackend]:
batch reads and writes through the provider's file API, each refusal classified into the error
code Deep Agents expects (``file_not_found``, ``is_directory``, ``permission_denied``...), and
paths outside the workspace read through the sandbox itself (see ``_outside``)."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from datetime import UTC, datetime

from deepagents.backends.protocol import FileInfo

from langchain_sandbox.core.workspace import WORKSPACE_ROOT, resolve_path
from langchain_sandbox.deepagents._outside import read_outside, sandbox_path
from langchain_sandbox.errors import InvalidInputError, InvalidPathError
from langchain_sandbox.providers.base import FileInfo as SandboxFileInfo
from langchain_sandbox.providers.base import Session


class Fetched:
    """Per path: the file's bytes, or the Deep Agents error code saying why there are none."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.errors: dict[str, str] = {}


def sort_uploads(
    files: Sequence[tuple[str, bytes]],
) -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    """Sort ``files`` by index into what cannot be written (``{index: error code}``), what goes
    to the workspace's file API and what goes outside it (both ``{index: sandbox path}``)."""
    errors: dict[int, str] = {}
    targets: dict[int, str] = {}
    outside: dict[int, str] = {}
    for index, (path, data) in enumerate(files):
        target = sandbox_path(path)
        if target is None or not isinstance(data, (bytes, bytearray)):
            errors[index] = "invalid_path"
        elif not in_workspace(target):
            outside[index] = target
        elif (inside := workspace_path(target)) is not None:
            targets[index] = inside
        else:
            errors[index] = "invalid_path"
    return errors, targets, outside


# -- file access on a session ---------------------------------------------------------------


async def write_workspace(
    session: Session,
    files: Sequence[tuple[str, bytes]],
    targets: dict[int, str],
    errors: dict[int, str],
) -> None:
    """Write ``{index in files: workspace path}`` with the file API, noting refusals in
    ``errors``."""
    try:
        await session.write_files({targets[i]: bytes(files[i][1]) for i in targets})
        return
    except InvalidInputError:
        pass
    # Something in the batch was refused: write one by one to say which.
    for index, target in targets.items():
        try:
            await session.write_files({target: bytes(files[index][1])})
        except InvalidInputError:
            errors[index] = await _unwritable(session, target)


async def fetch_on(session: Session, targets: dict[str, str], *, max_bytes: int | None) -> Fetched:
    """Read ``{given path: sandbox path}``: the workspace's through the file API, the others
    through the sandbox itself (see ``_outside``)."""
    inside = {p: w for p, t in targets.items() if (w := workspace_path(t)) is not None}
    fetched = await _fetch_files(session, inside, max_bytes=max_bytes) if inside else Fetched()
    outside = [p for p, t in targets.items() if not in_workspace(t)]
    for path, target in targets.items():
        if path not in inside and in_workspace(target):
            fetched.errors[path] = "invalid_path"  # too deep or too long a path (`resolve_path`)
    if outside:
        data, codes = await read_outside(
            session, sorted({targets[p] for p in outside}), max_bytes=max_bytes
        )
        for path in outside:
            target = targets[path]
            if target in codes:
                fetched.errors[path] = codes[target]
            elif target in data:
                fetched.data[path] = data[target]
            else:
                fetched.errors[path] = "file_not_found"
    return fetched


async def _fetch_files(
    session: Session, targets: dict[str, str], *, max_bytes: int | None
) -> Fetched:
    """Read ``{given path: workspace path}``, classifying what cannot be read.

    Each parent directory is listed once first, so a missing file, a directory, or a file its
    owner may not read (what the sandbox's own user would be refused; the host could read it)
    gets its error code without a failed read, and only readable files are transferred.
    """
    fetched = Fetched()
    by_parent: dict[str, list[str]] = {}
    for path, target in targets.items():
        by_parent.setdefault(posixpath.dirname(target), []).append(path)
    readable: dict[str, str] = {}
    for parent, group in by_parent.items():
        try:
            entries = {absolute(e.path): e for e in await session.list_files(parent)}
        except InvalidPathError:
            entries = {}
        for path in group:
            target = targets[path]
            entry = entries.get(target)
            if target == WORKSPACE_ROOT or (entry is not None and entry.is_dir):
                fetched.errors[path] = "is_directory"
            elif entry is None:
                fetched.errors[path] = "file_not_found"
            elif entry.kind != "file":
                fetched.errors[path] = "invalid_path"
            elif not entry.mode & 0o400:
                fetched.errors[path] = "permission_denied"
            elif max_bytes is not None and entry.size > max_bytes:
                fetched.errors[path] = "too_large"
            else:
                readable[path] = target
    if readable:
        try:
            data = await session.read_files(list(readable.values()))
        except InvalidInputError:
            data = {}
            for target in readable.values():
                try:
                    data.update(await session.read_files([target]))
                except InvalidInputError as exc:
                    fetched.errors.update(
                        {p: f"Error: {exc}" for p, t in readable.items() if t == target}
                    )
        for path, target in readable.items():
            if target in data:
                fetched.data[path] = data[target]
    return fetched


async def missing_or_invalid(session: Session, target: str) -> str:
    parent = posixpath.dirname(target)
    try:
        names = {absolute(e.path) for e in await session.list_files(parent)}
    except InvalidPathError:
        return "path_not_found"
    return "invalid_path" if target in names else "path_not_found"


async def _unwritable(session: Session, target: str) -> str:
    """Why ``target`` could not be written: a directory there, else a path that cannot be one."""
    try:
        entries = {absolute(e.path): e for e in await session.list_files(posixpath.dirname(target))}
    except InvalidPathError:
        return "invalid_path"
    entry = entries.get(target)
    return "is_directory" if entry is not None and entry.is_dir else "invalid_path"


# -- paths and messages ---------------------------------------------------------------------


def workspace_path(path: str) -> str | None:
    """The normalized absolute path if ``path`` is absolute and inside the workspace."""
    target = sandbox_path(path)
    if target is None:
        return None
    try:
        return resolve_path(target)
    except InvalidPathError:
        return None


def in_workspace(target: str) -> bool:
    """Whether the normalized sandbox path ``target`` lies in the workspace."""
    return target == WORKSPACE_ROOT or target.startswith(WORKSPACE_ROOT + "/")


def absolute(relative: str) -> str:
    return WORKSPACE_ROOT if relative in ("", ".") else f"{WORKSPACE_ROOT}/{relative}"


def entry_of(info: SandboxFileInfo) -> FileInfo:
    entry: FileInfo = {"path": absolute(info.path), "is_dir": info.is_dir, "size": info.size}
    if info.mtime_ns:
        modified = datetime.fromtimestamp(info.mtime_ns / 1e9, tz=UTC)
        entry["modified_at"] = modified.isoformat()
    return entry


__all__ = [
    "Fetched",
    "absolute",
    "entry_of",
    "fetch_on",
    "in_workspace",
    "missing_or_invalid",
    "sort_uploads",
    "workspace_path",
    "write_workspace",
]
