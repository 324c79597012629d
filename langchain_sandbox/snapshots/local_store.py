"""The default blob store: one file per blob in a private local directory.

Layout: ``<root>/<first two hex digits>/<remaining 62>``, so no directory grows past a few
thousand entries. The root is created with mode 0700 and blobs with 0600 (snapshots hold the
user's files and variables). Writes go to a temporary file in the same directory and are moved
into place with ``os.replace``, so a reader (or a crash) never sees half a blob; with
``durable=True`` (the default) the file and its directory are fsynced first, so a checkpoint that
names a snapshot never outlives the snapshot's blobs after a power cut.

Default root: ``$LANGCHAIN_SANDBOX_HOME/blobs`` if that variable is set, else
``$XDG_DATA_HOME/langchain-sandbox/blobs`` (``~/.local/share/langchain-sandbox/blobs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from langchain_sandbox.errors import SandboxError, SnapshotNotFoundError
from langchain_sandbox.paths import HOME_ENV, data_dir
from langchain_sandbox.snapshots.manifest import is_digest
from langchain_sandbox.snapshots.store import BlobInfo, BlobStore, check_key


def default_blob_dir() -> Path:
    """Where :class:`LocalDirectoryBlobStore` keeps blobs when no path is given."""
    return data_dir() / "blobs"


class LocalDirectoryBlobStore(BlobStore):
    """Blobs as files under one directory on this machine.

    Args:
        path: The store's root directory (created, mode 0700, by the first write: building a
            store touches no disk, so it may happen on an event loop); default
            :func:`default_blob_dir`.
        durable: fsync each blob and its directory before a put returns.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, durable: bool = True) -> None:
        self.root = Path(path) if path is not None else default_blob_dir()
        self.durable = durable
        self._root_ready = False

    def __repr__(self) -> str:
        return f"LocalDirectoryBlobStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        key = check_key(key)
        return self.root / key[:2] / key[2:]

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise SnapshotNotFoundError(
                f"Snapshot blob {key} is missing from the local snapshot store."
            ) from None
        except OSError as exc:
            raise _store_error("read", exc) from exc

    async def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            await asyncio.to_thread(self._write, path, data)
        except OSError as exc:
            raise _store_error("write", exc) from exc

    def _write(self, path: Path, data: bytes) -> None:
        if path.exists():
            return
        if not self._root_ready:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
            self._root_ready = True
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.durable:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        if self.durable:
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    async def missing(self, keys: Iterable[str]) -> set[str]:
        paths = {key: self._path(key) for key in keys}
        return await asyncio.to_thread(
            lambda: {key for key, path in paths.items() if not path.exists()}
        )

    async def delete(self, keys: Iterable[str]) -> None:
        paths = [self._path(key) for key in keys]
        await asyncio.to_thread(self._unlink_all, paths)

    @staticmethod
    def _unlink_all(paths: list[Path]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    async def iter_blobs(self) -> AsyncIterator[BlobInfo]:
        for fanout in sorted(await asyncio.to_thread(self._fanouts)):
            if len(fanout) != 2:
                continue
            for info in await asyncio.to_thread(self._list_fanout, fanout):
                yield info

    def _fanouts(self) -> list[str]:
        try:
            return os.listdir(self.root)
        except FileNotFoundError:  # nothing was ever written
            return []

    def _list_fanout(self, fanout: str) -> list[BlobInfo]:
        infos: list[BlobInfo] = []
        try:
            entries = list(os.scandir(self.root / fanout))
        except (FileNotFoundError, NotADirectoryError):
            return infos
        for entry in entries:
            key = fanout + entry.name
            # Temporary files of writes in progress (".tmp-...") are not blobs.
            if not is_digest(key):
                continue
            try:
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            infos.append(BlobInfo(key=key, size=stat.st_size, modified_at=stat.st_mtime))
        return infos


def _store_error(action: str, exc: OSError) -> SandboxError:
    # The message reaches the model (as a notice) and logs: it names the failure, never the
    # store's host path, which may contain the user's home directory.
    return SandboxError(
        f"The local snapshot store could not {action} a blob: {exc.strerror or type(exc).__name__}."
    )


__all__ = ["HOME_ENV", "LocalDirectoryBlobStore", "default_blob_dir"]
