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
    if ".." in path.split("/"):
        raise InvalidPathError(f"Path {path!r} uses '..'; paths must stay inside {root}.")
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


__all__ = ["WORKSPACE_ROOT", "relative_path", "resolve_path"]
