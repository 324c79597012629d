"""The workspace every session has, and how a path given by a model maps into it.

Every provider roots the session's files at ``/home/user`` (E2B's and Runloop's default), so a path
in a conversation means the same thing wherever the conversation runs. Paths are checked lexically
here, on the host, before any provider sees them; the local provider additionally checks symlinks on
disk, because there the workspace is a real host directory.
"""

from __future__ import annotations

import posixpath

from langchain_sandbox.errors import InvalidPathError

WORKSPACE_ROOT = "/home/user"

MAX_PATH_BYTES = 4096
"""Longest path (UTF-8 bytes) the host API accepts: Linux's ``PATH_MAX``."""

MAX_PATH_DEPTH = 256
"""Most components a workspace path may have. Deeper trees made by sandboxed code are listed and
snapshotted down to this depth only (and still removed whole)."""


def resolve_path(path: str, *, root: str = WORKSPACE_ROOT) -> str:
    """Return the absolute POSIX path of ``path`` inside the workspace, or raise.

    Relative paths are anchored at ``root``. ``..`` components are refused outright rather than
    normalised away, and absolute paths must already lie inside ``root``.

    Raises:
        InvalidPathError: the path is empty, contains a NUL or a backslash, uses ``..``, or lies
            outside the workspace.
    """
    if not isinstance(path, str) or not path.strip():
        raise InvalidPathError(
            "A path is required (relative to /home/user, or absolute inside it)."
        )
    if "\x00" in path:
        raise InvalidPathError(f"Path {path!r} contains a NUL byte.")
    if "\\" in path:
        raise InvalidPathError(
            f"Path {path!r} contains a backslash; sandbox paths are POSIX paths."
        )
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidPathError(
            f"Path {path[:60]!r}... is longer than {MAX_PATH_BYTES} bytes; use a shorter path."
        )
    parts = path.split("/")
    if ".." in parts:
        raise InvalidPathError(f"Path {path!r} uses '..'; paths must stay inside {root}.")
    if sum(1 for part in parts if part not in ("", ".")) > MAX_PATH_DEPTH:
        raise InvalidPathError(
            f"Path {path[:60]!r}... is nested deeper than {MAX_PATH_DEPTH} directories; "
            "use a flatter layout."
        )
    absolute = posixpath.normpath(path if path.startswith("/") else posixpath.join(root, path))
    if absolute != root and not absolute.startswith(root + "/"):
        raise InvalidPathError(f"Path {path!r} is outside the workspace {root}.")
    return absolute


def relative_path(path: str, *, root: str = WORKSPACE_ROOT) -> str:
    """The workspace-relative form of ``path`` (``"."`` for the root itself)."""
    # Sandbox paths are not host paths: plain string work, never ``relpath`` (which asks the
    # host's filesystem for its working directory).
    absolute = resolve_path(path, root=root)
    return "." if absolute == root else absolute[len(root.rstrip("/")) + 1 :]


__all__ = ["MAX_PATH_BYTES", "MAX_PATH_DEPTH", "WORKSPACE_ROOT", "relative_path", "resolve_path"]
