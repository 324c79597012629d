"""The default blob store: one file per blob in a private local directory.

Layout: ``<root>/<first two hex digits>/<remaining 62>``, so no directory grows past a few
thousand entries. The root is created with mode 0700 and blobs with 0600 (snapshots hold the
user's files and variables). Writes go to a temporary file in the same directory and are moved
into place with ``os.replace``, so a reader (or a crash) never sees half a blob; with
``durable=True`` (the default) the file and its directory are fsynced first, so a checkpoint that
names a snapshot never outlives the snapshot's blobs after a power cut. `put_many` writes a
whole batch of temporary files, makes them durable with one ``syncfs`` (not two ``fsync`` per
blob: 10,000 small files took seconds), renames them all and syncs once more.

Default root: ``$LANGCHAIN_SANDBOX_HOME/blobs`` if that variable is set, else
``$XDG_DATA_HOME/langchain-sandbox/blobs`` (``~/.local/share/langchain-sandbox/blobs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import hashlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from langchain_sandbox.core.paths import HOME_ENV, data_dir
from langchain_sandbox.errors import SandboxError, SnapshotNotFoundError
from langchain_sandbox.snapshots.manifest import is_digest
from langchain_sandbox.snapshots.store import BlobInfo, BlobStore, check_key

ABANDONED_WRITE_SECONDS = 3600.0
"""Age of a put's temporary file (``.tmp-*``) after which ``gc`` removes it, whatever its grace
period: a put (or a batch of them) writes its files in one go and renames them as soon as they
are synced, so one untouched for an hour belongs to a writer that was killed."""

_TEMP_PREFIX = ".tmp-"
_CHECKPOINTERS = "checkpointers"
"""Subdirectory of the names of the checkpointers the store serves, one small JSON file each (its
name is not two characters long, so it is never taken for a fan-out directory of blobs)."""

T = TypeVar("T")


def default_blob_dir() -> Path:
    """Where [`LocalDirectoryBlobStore`][langchain_sandbox.LocalDirectoryBlobStore] keeps blobs when no path is given."""
    return data_dir() / "blobs"


class LocalDirectoryBlobStore(BlobStore):
    """Blobs as files under one directory on this machine.

    Args:
        path: The store's root directory (created, mode 0700, by the first write: building a
            store touches no disk, so it may happen on an event loop); default
            `default_blob_dir`.
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

    async def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        # One thread hop for the batch: a restore of 10,000 small files must not pay 10,000.
        root = os.fspath(self.root)
        unique = {key: os.path.join(root, key[:2], key[2:]) for key in map(check_key, keys)}
        try:
            return await asyncio.to_thread(self._read_many, unique)
        except OSError as exc:
            raise _store_error("read", exc) from exc

    @staticmethod
    def _read_many(paths: Mapping[str, str]) -> dict[str, bytes]:
        blobs: dict[str, bytes] = {}
        for key, path in paths.items():
            try:
                with open(path, "rb") as handle:
                    blobs[key] = handle.read()
            except FileNotFoundError:
                raise SnapshotNotFoundError(
                    f"Snapshot blob {key} is missing from the local snapshot store."
                ) from None
        return blobs

    async def put(self, key: str, data: bytes) -> None:
        await self._store(key, data, replace=False)

    async def replace(self, key: str, data: bytes) -> None:
        # os.replace swaps the file atomically: a reader sees the corrupt copy or the good one.
        await self._store(key, data, replace=True)

    async def _store(self, key: str, data: bytes, *, replace: bool) -> None:
        path = self._path(key)
        try:
            await asyncio.to_thread(self._write, path, data, replace=replace)
        except OSError as exc:
            raise _store_error("write", exc) from exc

    async def put_many(self, blobs: Mapping[str, bytes]) -> None:
        if not blobs:
            return
        keys = [check_key(key) for key in blobs]
        try:
            await asyncio.to_thread(self._write_many, {key: blobs[key] for key in keys})
        except OSError as exc:
            raise _store_error("write", exc) from exc

    def _write_many(self, blobs: Mapping[str, bytes]) -> None:
        """Write a batch: temporary files first, one sync, renames, one sync (see the module
        docs). A crash leaves at most temporary files, never a blob with half its bytes."""
        sync = _syncfs() if self.durable else None
        if sync is None and self.durable:
            for key, data in blobs.items():
                self._write(self._path(key), data)
            return
        root = os.fspath(self.root)
        batch = os.urandom(8).hex()  # unique per call: another batch may write the same key now
        fanouts: set[str] = set()
        staged: list[tuple[str, str]] = []
        try:
            for key, data in blobs.items():
                final = os.path.join(root, key[:2], key[2:])
                if os.path.exists(final):
                    continue
                if key[:2] not in fanouts:
                    self._prepare(self.root / key[:2] / key[2:])
                    fanouts.add(key[:2])
                tmp = os.path.join(root, key[:2], f"{_TEMP_PREFIX}{batch}-{len(staged)}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                staged.append((tmp, final))
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
            if sync is not None and staged:
                sync(self.root)
            for tmp, final in staged:
                os.replace(tmp, final)
            renamed, staged = bool(staged), []
        finally:
            for tmp, _ in staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        if sync is not None and renamed:
            sync(self.root)

    def _prepare(self, path: Path) -> None:
        if not self._root_ready:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
            self._root_ready = True
        path.parent.mkdir(mode=0o700, exist_ok=True)

    def _write(self, path: Path, data: bytes, *, replace: bool = False) -> None:
        if not replace and path.exists():
            return
        self._prepare(path)
        fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
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
        # Plain strings, not Path objects: a restore looks up every blob of a snapshot (100,000
        # files), and building Paths cost more than the stat calls.
        root = os.fspath(self.root)
        paths = {key: os.path.join(root, key[:2], key[2:]) for key in map(check_key, keys)}
        return await asyncio.to_thread(
            lambda: {key for key, path in paths.items() if not os.path.exists(path)}
        )

    async def delete(self, keys: Iterable[str]) -> None:
        paths = [self._path(key) for key in keys]
        await asyncio.to_thread(self._unlink_all, paths)

    @staticmethod
    def _unlink_all(paths: list[Path]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    async def note_checkpointer(self, name: str) -> None:
        await self._checkpointer_io("write", self._note, name)

    async def checkpointers(self) -> set[str]:
        return await self._checkpointer_io("read", self._read_checkpointers)

    async def forget_checkpointer(self, name: str) -> None:
        await self._checkpointer_io("write", self._forget, name)

    async def _checkpointer_io(self, action: str, work: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(work, *args)
        except OSError as exc:
            raise _store_error(action, exc, "a checkpointer's name") from exc

    def _checkpointer_file(self, name: str) -> Path:
        return self.root / _CHECKPOINTERS / f"{hashlib.sha256(name.encode()).hexdigest()}.json"

    def _note(self, name: str) -> None:
        self._write(self._checkpointer_file(name), json.dumps({"name": name}).encode())

    def _read_checkpointers(self) -> set[str]:
        try:
            entries = list(os.scandir(self.root / _CHECKPOINTERS))
        except FileNotFoundError:
            return set()
        names: set[str] = set()
        for entry in entries:
            if entry.name.startswith(_TEMP_PREFIX):
                continue
            try:
                with open(entry.path, encoding="utf-8") as handle:
                    names.add(str(json.load(handle)["name"]))
            except FileNotFoundError:  # forgotten meanwhile
                continue
            except (ValueError, KeyError, TypeError):
                raise SandboxError(
                    f"The local snapshot store's entry {_CHECKPOINTERS}/{entry.name} (a "
                    "checkpointer's name) is unreadable; delete that file inside the store."
                ) from None
        return names

    def _forget(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._checkpointer_file(name).unlink()

    async def remove_abandoned_writes(self, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove the temporary files of puts whose writer died (untouched for
        `ABANDONED_WRITE_SECONDS`); a live put's file is younger and is left alone."""
        return await asyncio.to_thread(self._remove_abandoned, dry_run)

    def _remove_abandoned(self, dry_run: bool) -> tuple[int, int]:
        cutoff = time.time() - ABANDONED_WRITE_SECONDS
        count = size = 0
        for fanout in self._fanouts():
            try:
                entries = list(os.scandir(self.root / fanout))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if not entry.name.startswith(_TEMP_PREFIX):
                    continue
                try:
                    stat = entry.stat(follow_symlinks=False)
                    if stat.st_mtime > cutoff:
                        continue
                    if not dry_run:
                        os.unlink(entry.path)
                except FileNotFoundError:  # renamed or removed meanwhile
                    continue
                count, size = count + 1, size + stat.st_size
        return count, size

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


@functools.cache
def _syncfs() -> Callable[[Path], None] | None:
    """``syncfs(2)`` (flush one filesystem), or ``None`` where the C library lacks it."""
    try:
        libc_syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):
        return None

    def sync(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc_syncfs(fd) != 0:
                error = ctypes.get_errno()
                raise OSError(error, os.strerror(error))
        finally:
            os.close(fd)

    return sync


def _store_error(action: str, exc: OSError, what: str = "a blob") -> SandboxError:
    # The message reaches the model (as a notice) and logs: it names the failure, never the
    # store's host path, which may contain the user's home directory.
    return SandboxError(
        f"The local snapshot store could not {action} {what}: {exc.strerror or type(exc).__name__}."
    )


__all__ = ["ABANDONED_WRITE_SECONDS", "HOME_ENV", "LocalDirectoryBlobStore", "default_blob_dir"]
