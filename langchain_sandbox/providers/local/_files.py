"""The session's workspace, read and written from the host without ever following a symlink.

The workspace is a real host directory that sandboxed code can fill with anything, symlinks to
``/etc/shadow`` or a symlinked parent directory included. So every access walks the path one
component at a time from a descriptor of the workspace root (``openat`` with ``O_NOFOLLOW``): a
symlink anywhere on the way is refused with [`InvalidPathError`][langchain_sandbox.InvalidPathError]
instead of being followed, and there is no check-then-use window to race. Files are opened
non-blocking and must be regular files, so a FIFO planted in the workspace cannot hang the host.

Listing a tree, finding what changed in it and removing it walk on from the descriptors this
module opens (``_tree_walk.py``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence

from langchain_sandbox.core.workspace import relative_path
from langchain_sandbox.errors import InvalidInputError, InvalidPathError
from langchain_sandbox.providers.base import ChangeListing, FileInfo, FileMetadata
from langchain_sandbox.providers.local._tree_walk import (
    DIR_FLAGS,
    changes,
    file_info,
    listing,
    remove_tree,
    walk_tree,
)
from langchain_sandbox.providers.names import LOCAL

logger = logging.getLogger(__name__)


class HostWorkspace:
    """Safe file operations on the host directory bound at ``/home/user``.

    Args:
        root: Host path of the workspace directory.
        max_file_bytes: Largest file `read` returns.
        owner: ``(uid, gid)`` every file and directory the host creates gets, so the sandbox
            (an unprivileged host user when the host is root, gVisor's sandbox user) can change
            what a restore put back; ``None``: the host's own user, who is the sandbox's.
    """

    def __init__(
        self, root: str, *, max_file_bytes: int, owner: tuple[int, int] | None = None
    ) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.owner = owner

    @contextlib.contextmanager
    def _directory(self, parts: list[str], *, create: bool, display: str) -> Iterator[int]:
        """A descriptor of the directory ``parts`` below the root, walked without symlinks."""
        fd = os.open(self.root, DIR_FLAGS)
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                        if self.owner is not None:
                            os.chown(part, *self.owner, dir_fd=fd, follow_symlinks=False)
                try:
                    child = os.open(part, DIR_FLAGS, dir_fd=fd)
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

    def _by_parent(self, paths: Iterable[str]) -> dict[tuple[str, ...], list[tuple[str, str]]]:
        """Directory (its path components) -> (name, path) of each of ``paths`` in it."""
        by_parent: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for path in paths:
            parents, name = self._split(path)
            if not name:
                raise InvalidPathError(f"{path!r} is the workspace directory, not a file.")
            by_parent.setdefault(tuple(parents), []).append((name, path))
        return by_parent

    def write_many(
        self, files: Mapping[str, bytes], metadata: Mapping[str, FileMetadata] | None = None
    ) -> list[str]:
        """Create or replace several regular files (directory by directory), creating parent
        directories. Each directory is walked to once for all the files in it, so a restore of
        thousands of small files costs about what extracting an archive of them does.

        A file of ``metadata`` gets its modification time through its open descriptor right
        after the write (and, if sparse, its zero blocks as holes); returns the paths whose
        time could not be set."""
        metadata = metadata or {}
        unset: list[str] = []
        for directory, names in self._by_parent(files).items():
            with self._directory(list(directory), create=True, display=names[0][1]) as parent:
                for name, path in names:
                    if not _write_in(
                        parent, name, path, files[path], self.owner, metadata.get(path)
                    ):
                        unset.append(path)
        return unset

    def make_fifos(self, paths: Sequence[str]) -> list[str]:
        """Make a FIFO at each path, replacing what is there (a directory tree included), owned
        like every file the host writes; returns the paths where none could be made."""
        failed: list[str] = []
        for directory, names in self._by_parent(paths).items():
            try:
                with self._directory(list(directory), create=True, display=names[0][1]) as parent:
                    for name, path in names:
                        try:
                            with contextlib.suppress(FileNotFoundError):
                                if stat.S_ISDIR(
                                    os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                                ):
                                    remove_tree(parent, name)
                                else:
                                    os.unlink(name, dir_fd=parent)
                            os.mkfifo(name, 0o644, dir_fd=parent)
                            if self.owner is not None:
                                os.chown(name, *self.owner, dir_fd=parent, follow_symlinks=False)
                        except OSError:
                            failed.append(path)
            except (OSError, InvalidPathError):
                failed.extend(path for _, path in names)
        return failed

    def link_many(self, links: Mapping[str, str]) -> list[str]:
        """Make each path of ``links`` a hard link of the regular file it maps to (what is at
        the path is replaced; neither path is followed through a symlink); returns the paths
        that could not be linked (the target missing or not a regular file, say)."""
        failed: list[str] = []
        for path, target in links.items():
            target_parents, target_name = self._split(target)
            parents, name = self._split(path)
            try:
                with (
                    self._directory(target_parents, create=False, display=target) as source,
                    self._directory(parents, create=True, display=path) as parent,
                ):
                    info = os.stat(target_name, dir_fd=source, follow_symlinks=False)
                    if not stat.S_ISREG(info.st_mode):
                        failed.append(path)
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=parent)
                    os.link(
                        target_name,
                        name,
                        src_dir_fd=source,
                        dst_dir_fd=parent,
                        follow_symlinks=False,
                    )
            except (OSError, InvalidPathError):
                failed.append(path)
        return failed

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes]:
        """The bytes of several regular files, keyed as given. Each directory is walked to once
        for all the files in it (a snapshot reads thousands of small files)."""
        contents: dict[str, bytes] = {}
        for directory, names in self._by_parent(paths).items():
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
                found = file_info(prefix, info)
                return [] if found is None else [found]
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise _path_error(exc, path) from None
            try:
                return self._scan(fd, prefix + "/", recursive)
            finally:
                os.close(fd)

    def _scan(self, fd: int, prefix: str, recursive: bool) -> list[FileInfo]:
        """The entries below ``fd``, depth first in name order."""
        return listing(fd, prefix, recursive)

    def changes(self, known: Mapping[str, FileInfo], since: object | None) -> ChangeListing:
        """How the whole workspace differs from ``known`` (see
        [`Session.list_changes`][langchain_sandbox.Session.list_changes]; the ways it is found
        are in ``_tree_walk.changes``)."""
        with self._directory([], create=False, display=".") as root:
            return changes(root, self.root, known, since)

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

        walk_tree(os.open(self.root, DIR_FLAGS), visit)
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


def _write_in(
    parent: int,
    name: str,
    path: str,
    data: bytes,
    owner: tuple[int, int] | None,
    metadata: FileMetadata | None = None,
) -> bool:
    """Create or replace the regular file ``name`` of the directory ``parent``, owned by
    ``owner`` (``None``: the host's own user), with ``metadata`` if given; returns whether the
    metadata's modification time was set (``True`` without metadata)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o644, dir_fd=parent)
    except OSError as exc:
        raise _path_error(exc, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidPathError(f"{path!r} exists and is not a regular file.")
        if owner is not None:
            os.fchown(fd, *owner)
        os.ftruncate(fd, 0)
        if metadata is not None and metadata.sparse:
            _write_sparse(fd, data)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        if metadata is None:
            return True
        try:
            os.utime(fd, ns=(metadata.mtime_ns, metadata.mtime_ns))
        except (OSError, OverflowError):
            return False
        return True
    finally:
        os.close(fd)


_HOLE_BLOCK = 4096
_ZEROS = bytes(_HOLE_BLOCK)


def _write_sparse(fd: int, data: bytes) -> None:
    """Write ``data`` to the empty file ``fd`` leaving every all-zero block a hole (seeked
    over, and the length set at the end), as ``cp --sparse=always`` does."""
    view = memoryview(data)
    for offset in range(0, len(data), _HOLE_BLOCK):
        block = view[offset : offset + _HOLE_BLOCK]
        if block != _ZEROS[: len(block)]:
            while block:
                written = os.pwrite(fd, block, offset)
                block, offset = block[written:], offset + written
    os.ftruncate(fd, len(data))


__all__ = ["HostWorkspace"]
