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
import os
import shutil
import stat
from collections.abc import Iterator
from typing import Literal

from langchain_sandbox.errors import InvalidInputError, InvalidPathError
from langchain_sandbox.providers.base import FileInfo
from langchain_sandbox.providers.names import LOCAL
from langchain_sandbox.workspace import relative_path

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

    def read(self, path: str) -> bytes:
        """The bytes of a regular file."""
        parents, name = self._split(path)
        if not name:
            raise InvalidPathError(f"{path!r} is the workspace directory, not a file.")
        with self._directory(parents, create=False, display=path) as parent:
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
                with os.fdopen(os.dup(fd), "rb") as handle:
                    data = handle.read(self.max_file_bytes + 1)
            finally:
                os.close(fd)
            if len(data) > self.max_file_bytes:
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
                return [_file_info(prefix, info)]
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise _path_error(exc, path) from None
            try:
                return self._scan(fd, prefix + "/", recursive)
            finally:
                os.close(fd)

    def _scan(self, fd: int, prefix: str, recursive: bool) -> list[FileInfo]:
        entries: list[FileInfo] = []
        with os.scandir(fd) as iterator:
            children = sorted(iterator, key=lambda entry: entry.name)
        for entry in children:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed by sandboxed code while we listed
            entries.append(_file_info(prefix + entry.name, info))
            if recursive and stat.S_ISDIR(info.st_mode):
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                try:
                    entries.extend(self._scan(child, prefix + entry.name + "/", recursive))
                finally:
                    os.close(child)
        return entries

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
                    # shutil.rmtree with dir_fd walks by descriptor and never follows symlinks.
                    shutil.rmtree(name, dir_fd=parent)
                else:
                    os.unlink(name, dir_fd=parent)
        except InvalidPathError as exc:
            if exc.details.get("errno") == errno.ENOENT:
                return
            raise


def _file_info(path: str, info: os.stat_result) -> FileInfo:
    kind: Literal["file", "dir", "symlink"]
    if stat.S_ISLNK(info.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(info.st_mode):
        kind = "dir"
    else:
        kind = "file"
    return FileInfo(
        path=path,
        size=0 if kind == "dir" else info.st_size,
        mtime_ns=info.st_mtime_ns,
        mode=stat.S_IMODE(info.st_mode),
        kind=kind,
    )


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


__all__ = ["HostWorkspace"]
