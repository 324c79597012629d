"""The ``unpack`` operation of the Runloop and Kubernetes worker (stdlib only, Python >= 3.8): the
files of one ``write_files`` call, sent as one tar archive (`langchain_sandbox.providers._file_archive`
makes it), written into the workspace by one command, so a batch of N files costs one upload and
one command instead of N uploads.

Each member is written the way one upload of it would be: its parent directories made as by
``mkdir -p``, an existing regular file rewritten in place (it keeps its mode), a new one created
``0644`` (less the umask), an existing symlink at the path replaced by the file (never followed),
an existing directory or other non-regular file refused. The host builds the archive from paths
it has resolved inside the workspace; the operation still refuses any member that is not a
regular file or whose name is absolute, not normalised or climbs out with ``..``, so it writes
nothing outside ``root`` whatever the archive holds. It stops at the first member it refuses and
answers its index (the host knows the names; the sandbox sends facts, never sentences, see
`langchain_sandbox.providers.guest_facts`). The archive is deleted in every case.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Below this line, what the worker carries inline (`packer.shipped_part`).
# <shipped>
import contextlib as _contextlib  # noqa: E402 (the shipped code starts here)
import os as _os  # noqa: E402
import stat as _stat  # noqa: E402

_NEW_FILE_MODE = 0o644  # what an upload leaves (the emulators' and the local provider's too)


def unpack_files(archive: str, root: str) -> dict[str, Any]:
    """Write the members of the tar ``archive`` under the directory ``root``, then delete it.

    Answers ``{"written": n}``, or, at the first member it refuses, also ``"refused"`` (the
    member's index) and ``"why"``: ``"member"`` (not a regular file), ``"name"`` (absolute,
    ``..`` or not normalised), ``"directory"`` (a directory is at the path), ``"not_regular"``
    (another non-regular file is), ``"parent"`` (a parent is not a directory) or an errno.
    """
    import tarfile

    written = 0
    made: set[str] = set()  # parents already made: the host groups members by directory
    try:
        with tarfile.open(archive, "r:*") as members:
            for index, member in enumerate(members):
                why = _written(members, member, root, made)
                if why is not None:
                    return {"written": written, "refused": index, "why": why}
                written += 1
    finally:
        with _contextlib.suppress(OSError):
            _os.unlink(archive)
    return {"written": written}


def _written(members: Any, member: Any, root: str, made: set[str]) -> str | int | None:
    """Write one member under ``root``; why it was refused, or ``None``."""
    name = member.name
    if not member.isreg():
        return "member"
    if not name or name.startswith("/") or _os.path.normpath(name) != name:
        return "name"
    if name == ".." or name.startswith("../"):
        return "name"
    target = _os.path.join(root, name)
    parent = _os.path.dirname(target)
    if parent not in made:
        try:
            # As the per-file write's ``mkdir -p`` does (a symlinked directory on the way is
            # followed: inside the sandbox that is the sandbox's own business).
            _os.makedirs(parent, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            return "parent"
        except OSError as exc:
            return _errno(exc)
        made.add(parent)
    try:
        fd = _open_replacing_symlink(target)
    except OSError as exc:
        kind = _kind(target)
        return "directory" if kind == "directory" else "not_regular" if kind else _errno(exc)
    try:
        if not _stat.S_ISREG(_os.fstat(fd).st_mode):
            return "not_regular"
        _os.ftruncate(fd, 0)  # rewritten in place: an existing file keeps its mode
        source = members.extractfile(member)
        for chunk in iter(lambda: source.read(1 << 20), b""):
            view = memoryview(chunk)
            while view:
                view = view[_os.write(fd, view) :]
    except OSError as exc:
        return _errno(exc)
    finally:
        _os.close(fd)
    return None


_FLAGS = _os.O_WRONLY | _os.O_CREAT | _os.O_NOFOLLOW | _os.O_NONBLOCK | _os.O_CLOEXEC


def _open_replacing_symlink(target: str) -> int:
    """A descriptor of ``target`` for writing, never through a symlink (``O_NOFOLLOW``): a
    symlink at the path is removed and the file made in its place. ``O_NONBLOCK``: a FIFO
    there fails at once instead of waiting for a reader."""
    try:
        return _os.open(target, _FLAGS, _NEW_FILE_MODE)
    except OSError:
        if _kind(target) != "symlink":
            raise
    _os.unlink(target)
    return _os.open(target, _FLAGS, _NEW_FILE_MODE)


def _kind(path: str) -> str | None:
    """What is at ``path`` when it is not a regular file (``None``: nothing, or a file)."""
    try:
        mode = _os.lstat(path).st_mode
    except OSError:
        return None
    if _stat.S_ISLNK(mode):
        return "symlink"
    if _stat.S_ISDIR(mode):
        return "directory"
    return None if _stat.S_ISREG(mode) else "other"


def _errno(exc: OSError) -> str | int:
    return exc.errno if isinstance(exc.errno, int) else "not_regular"
