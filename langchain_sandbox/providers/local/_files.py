"""The session's workspace, read and written from the host without ever following a symlink.

The workspace is a real host directory that sandboxed code can fill with anything, symlinks to
``/etc/shadow`` or a symlinked parent directory included. So every access walks the path one
component at a time from a descriptor of the workspace root (``openat`` with ``O_NOFOLLOW``): a
symlink anywhere on the way is refused with :class:`~langchain_sandbox.errors.InvalidPathError`
instead of being followed, and there is no check-then-use window to race. Files are opened
non-blocking and must be regular files, so a FIFO planted in the workspace cannot hang the host.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import operator
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

from langchain_sandbox.errors import InvalidInputError, InvalidPathError
from langchain_sandbox.providers.base import FileInfo
from langchain_sandbox.providers.names import LOCAL
from langchain_sandbox.workspace import MAX_PATH_DEPTH, relative_path

logger = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HostWorkspace:
    """Safe file operations on the host directory bound at ``/home/user``.

    Args:
        root: Host path of the workspace directory.
        max_file_bytes: Largest file :meth:`read` returns.
    """

    def __init__(self, root: str, *, max_file_bytes: int) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes

    @contextlib.contextmanager
    def _directory(self, parts: list[str], *, create: bool, display: str) -> Iterator[int]:
        """A descriptor of the directory ``parts`` below the root, walked without symlinks."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _path_error(exc, display) from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _split(path: str) -> tuple[list[str], str]:
        relative = relative_path(path)
        if relative == ".":
            return [], ""
        *parents, name = relative.split("/")
        return parents, name

    def require_dir(self, path: str) -> None:
        """Raise unless ``path`` is a directory reached without symlinks (a command's cwd)."""
        parents, name = self._split(path)
        with self._directory([*parents, name] if name else [], create=False, display=path):
            return

    def write(self, path: str, data: bytes) -> None:
        """Create or replace a regular file, creating parent directories."""
        parents, name = self._split(path)
        if not name:
            raise InvalidPathError(f"{path!r} is the workspace directory, not a file.")
        with self._directory(parents, create=True, display=path) as parent:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o644, dir_fd=parent)
            except OSError as exc:
                raise _path_error(exc, path) from None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise InvalidPathError(f"{path!r} exists and is not a regular file.")
                os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes]:
        """The bytes of several regular files, keyed as given. Each directory is walked to once
        for all the files in it (a snapshot reads thousands of small files)."""
        by_parent: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for path in paths:
            parents, name = self._split(path)
            if not name:
                raise InvalidPathError(f"{path!r} is the workspace directory, not a file.")
            by_parent.setdefault(tuple(parents), []).append((name, path))
        contents: dict[str, bytes] = {}
        for directory, names in by_parent.items():
            with self._directory(list(directory), create=False, display=names[0][1]) as parent:
                for name, path in names:
                    contents[path] = self._read_in(parent, name, path)
        return {path: contents[path] for path in paths}

    def _read_in(self, parent: int, name: str, path: str) -> bytes:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except OSError as exc:
            raise _path_error(exc, path) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
                raise InvalidPathError(f"{path!r} is {kind}.")
            if info.st_size > self.max_file_bytes:
                raise InvalidInputError(
                    f"{path!r} has {info.st_size} bytes, more than the {self.max_file_bytes} "
                    "a read returns; read it in parts from code instead."
                )
            data = _read_at_most(fd, info.st_size, self.max_file_bytes)
        finally:
            os.close(fd)
        if data is None:
            raise InvalidInputError(f"{path!r} grew past {self.max_file_bytes} bytes.")
        return data

    def listdir(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        """Entries of a directory (a file lists as itself); symlinks are listed, not followed."""
        parents, name = self._split(path)
        prefix = "/".join([*parents, name]) if name else ""
        with self._directory(parents, create=False, display=path) as parent:
            if not name:
                return self._scan(parent, "", recursive)
            try:
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except OSError as exc:
                raise _path_error(exc, path) from None
            if not stat.S_ISDIR(info.st_mode):
                found = _file_info(prefix, info)
                return [] if found is None else [found]
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise _path_error(exc, path) from None
            try:
                return self._scan(fd, prefix + "/", recursive)
            finally:
                os.close(fd)

    def _scan(self, fd: int, prefix: str, recursive: bool) -> list[FileInfo]:
        """The entries below ``fd``, depth first in name order, walked with an explicit stack
        (sandboxed code can nest directories far deeper than Python's recursion limit).

        Directories at :data:`MAX_PATH_DEPTH` are listed but not entered: no path the host API
        accepts lies below them. The loop body is the cost of every capture of a large
        workspace, so it does per entry only what it must: one ``lstat`` and one ``FileInfo``.
        """
        entries: list[FileInfo] = []
        append = entries.append
        # Per directory being walked: its descriptor, its path prefix, whether its
        # subdirectories are entered, and the children left.
        stack: list[tuple[int, str, bool, Iterator[os.DirEntry[str]]]] = []
        enter = recursive and prefix.count("/") + 1 < MAX_PATH_DEPTH
        current: tuple[int, str, bool, Iterator[os.DirEntry[str]]] | None = (
            fd,
            prefix,
            enter,
            _sorted_entries(fd),
        )
        try:
            while current is not None:
                directory, base, descend, children = current
                for entry in children:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed by sandboxed code while we listed
                    fmt = info.st_mode & _S_IFMT
                    path = base + entry.name
                    if fmt == stat.S_IFREG:
                        append(
                            FileInfo(path, info.st_size, info.st_mtime_ns, info.st_mode & 0o7777)
                        )
                    elif fmt == stat.S_IFDIR:
                        append(FileInfo(path, 0, info.st_mtime_ns, info.st_mode & 0o7777, "dir"))
                        if not descend:
                            continue
                        try:
                            child = os.open(entry.name, _DIR_FLAGS, dir_fd=directory)
                        except OSError:
                            continue
                        stack.append(current)
                        below = path + "/"
                        deeper = below.count("/") + 1 < MAX_PATH_DEPTH
                        current = (child, below, deeper, _sorted_entries(child))
                        break
                    elif fmt == stat.S_IFLNK:
                        mode = info.st_mode & 0o7777
                        append(FileInfo(path, info.st_size, info.st_mtime_ns, mode, "symlink"))
                    # FIFOs, sockets and devices are left out (see _file_info).
                else:
                    if directory != fd:
                        os.close(directory)
                    current = stack.pop() if stack else None
        finally:
            for directory, _, _, _ in stack:
                if directory != fd:
                    os.close(directory)
            if current is not None and current[0] != fd:
                os.close(current[0])
        return entries

    def usage(self) -> int:
        """Bytes the workspace takes on the host: per file the larger of its size and the disk
        blocks it uses, so a sparse file counts at its apparent size (what reading it, and so a
        snapshot of it, costs) and a tiny file at the block it occupies. Any depth is counted."""
        total = 0

        def visit(fd: int) -> list[str]:
            nonlocal total
            dirs: list[str] = []
            with os.scandir(fd) as iterator:
                for entry in iterator:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    total += max(info.st_size, info.st_blocks * 512)
                    if stat.S_ISDIR(info.st_mode):
                        dirs.append(entry.name)
            return dirs

        _walk_tree(os.open(self.root, _DIR_FLAGS), visit)
        return total

    def remove(self, path: str) -> None:
        """Remove a file, symlink or directory tree; a missing path is not an error."""
        parents, name = self._split(path)
        if not name:
            raise InvalidPathError("The workspace directory itself cannot be removed.")
        try:
            with self._directory(parents, create=False, display=path) as parent:
                try:
                    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
                except FileNotFoundError:
                    return
                if stat.S_ISDIR(info.st_mode):
                    remove_tree(parent, name)
                else:
                    os.unlink(name, dir_fd=parent)
        except InvalidPathError as exc:
            if exc.details.get("errno") == errno.ENOENT:
                return
            raise


_READ_CHUNK = 1024 * 1024


def _read_at_most(fd: int, expected: int, limit: int) -> bytes | None:
    """The file's bytes, read in chunks; ``None`` if it holds more than ``limit``.

    Memory follows what the file holds (its size when opened, plus what it grew meanwhile),
    never the limit: a ``read(limit + 1)`` reserved the whole limit per file, which a capture of
    100,000 tiny files turned into terabytes of address space.
    """
    chunks: list[bytes] = []
    total = 0
    want = min(expected, limit) + 1  # one byte more than expected tells a file that grew
    while True:
        chunk = os.read(fd, min(max(want - total, 1), _READ_CHUNK))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)


_S_IFMT = 0o170000
_by_name = operator.attrgetter("name")


def _sorted_entries(fd: int) -> Iterator[os.DirEntry[str]]:
    with os.scandir(fd) as iterator:
        return iter(sorted(iterator, key=_by_name))


def _file_info(path: str, info: os.stat_result) -> FileInfo | None:
    """What a listing says about an entry; ``None`` for FIFOs, sockets and devices, which are
    left out of listings (and so of snapshots): they hold no content to read or restore."""
    kind: Literal["file", "dir", "symlink"]
    if stat.S_ISLNK(info.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(info.st_mode):
        kind = "dir"
    elif stat.S_ISREG(info.st_mode):
        kind = "file"
    else:
        return None
    return FileInfo(
        path=path,
        size=0 if kind == "dir" else info.st_size,
        mtime_ns=info.st_mtime_ns,
        mode=stat.S_IMODE(info.st_mode),
        kind=kind,
    )


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove the directory ``name`` in ``parent_fd`` with everything below it, at any depth,
    never through a symlink (a symlink is removed, not followed).

    ``shutil.rmtree`` recurses, which a deep tree turns into ``RecursionError``, and holds a
    descriptor per level; this walks with :func:`_walk_tree`.
    """
    top = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    _walk_tree(top, _unlink_all_but_dirs, leave=lambda fd, child: os.rmdir(child, dir_fd=fd))
    os.rmdir(name, dir_fd=parent_fd)


def _walk_tree(
    top: int,
    visit: Callable[[int], list[str]],
    *,
    leave: Callable[[int, str], None] | None = None,
) -> None:
    """Depth-first over every directory below ``top`` (a descriptor this takes over), at any depth.

    ``visit(fd)`` handles one directory and returns the names of its subdirectories to enter;
    ``leave(parent_fd, name)`` runs once a subdirectory is done. Iterative, with two descriptors
    open at a time: it climbs back with ``..`` and checks that it lands in the directory it came
    from, so a tree moved meanwhile stops the walk (``OSError``) instead of leading it outside.
    A subdirectory replaced by a symlink or a file is skipped, never followed.
    """
    fd = top
    try:
        # Per level: the directory's name in its parent, its identity, the subdirectories left.
        frames: list[tuple[str, tuple[int, int], list[str]]] = [("", _identity(top), visit(top))]
        while True:
            pending = frames[-1][2]
            if pending:
                child_name = pending.pop()
                try:
                    child = os.open(child_name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    if leave is not None:  # replaced by a non-directory: removal unlinks it
                        os.unlink(child_name, dir_fd=fd)
                    continue
                os.close(fd)
                fd = child
                frames.append((child_name, _identity(child), visit(child)))
                continue
            if len(frames) == 1:
                return
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            if _identity(up) != frames[-2][1]:
                os.close(up)
                raise OSError(errno.ESTALE, "the tree moved while it was walked")
            os.close(fd)
            fd = up
            done = frames.pop()[0]
            if leave is not None:
                leave(fd, done)
    finally:
        os.close(fd)


def remove_directory(path: str | os.PathLike[str]) -> None:
    """Remove the host directory ``path`` and everything in it, as far as possible.

    For a session's own directory (workspace and all), at close and by ``gc``: a missing
    directory is fine, and what cannot be removed is logged, never raised, so closing always
    completes.
    """
    parent, name = os.path.split(os.path.abspath(path))
    try:
        parent_fd = os.open(parent, _DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        remove_tree(parent_fd, name)
    except FileNotFoundError:
        return
    except OSError as exc:
        logger.warning("could not remove a sandbox directory completely: %s", exc.strerror)
    finally:
        os.close(parent_fd)


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _unlink_all_but_dirs(fd: int) -> list[str]:
    """Unlink every entry of ``fd`` that is not a directory; return the directories' names."""
    dirs: list[str] = []
    with os.scandir(fd) as iterator:
        for entry in iterator:
            if entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
    return dirs


def _path_error(exc: OSError, path: str) -> InvalidPathError:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        message = f"{path!r} goes through a symlink; symlinks are not followed."
    elif exc.errno == errno.ENOTDIR:
        message = f"{path!r} goes through something that is not a directory (or a symlink)."
    elif exc.errno == errno.ENOENT:
        message = f"{path!r} does not exist in the workspace."
    elif exc.errno == errno.EISDIR:
        message = f"{path!r} is a directory."
    else:
        message = f"{path!r} cannot be accessed: {exc.strerror}."
    return InvalidPathError(message, provider=LOCAL, details={"errno": exc.errno})


__all__ = ["HostWorkspace", "remove_directory", "remove_tree"]
