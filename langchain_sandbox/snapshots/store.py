"""Where snapshot blobs live: the small async key -> bytes interface every store implements.

Keys are sha256 hex digests of the bytes they name (content addressing), so a key can never be a
path, a put of an existing key is a no-op, and a reader can verify what it got. Stores do not
verify contents themselves; the [`Snapshotter`][langchain_sandbox.Snapshotter]
hashes what it writes and checks what it reads.

Two stores ship with the package: `LocalDirectoryBlobStore` (the default, one
file per blob) and `LangGraphStoreBlobStore` (any LangGraph ``BaseStore``,
e.g. a Postgres store shared by workers on several machines). Subclass `BlobStore` for
another backend: only the abstract methods are required; the batch methods have default
implementations a backend may override with real batching.
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.snapshots.manifest import is_digest

PUT_CONCURRENCY = 16
"""Blobs `BlobStore.put_many` writes at once by default."""


@dataclass(frozen=True)
class BlobInfo:
    """A blob as listed by `BlobStore.iter_blobs`.

    Attributes:
        key: The sha256 hex digest naming the blob.
        size: Its length in bytes.
        modified_at: When it was last written, in seconds since the epoch (``gc`` keeps blobs
            younger than its grace period, so it never deletes what a running capture just wrote).
    """

    key: str
    size: int
    modified_at: float


def digest(data: bytes) -> str:
    """The key of ``data``: its sha256 as lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def check_key(key: object) -> str:
    """Return ``key`` if it is a sha256 hex digest; raise ``InvalidInputError`` otherwise.

    Every store calls this before using a key, so a key can never smuggle a path or a
    namespace separator into a backend.
    """
    if not is_digest(key):
        raise InvalidInputError(f"Blob key {key!r} is not a lowercase sha256 hex digest.")
    return str(key)


class BlobStore(ABC):
    """Async content-addressed blob storage for snapshots."""

    @abstractmethod
    async def get(self, key: str) -> bytes:
        """The bytes of ``key``.

        Raises:
            SnapshotNotFoundError: the store has no such blob.
        """

    @abstractmethod
    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (its digest). Atomic: a reader never sees a partial blob."""

    async def replace(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` even though the store holds a copy already: that copy was
        found corrupt (it does not match its key). The default deletes it and puts ``data``;
        a backend that can overwrite in place should."""
        await self.delete([key])
        await self.put(key, data)

    @abstractmethod
    async def missing(self, keys: Iterable[str]) -> set[str]:
        """The subset of ``keys`` the store does not hold."""

    @abstractmethod
    async def delete(self, keys: Iterable[str]) -> None:
        """Delete blobs; keys that are not there are ignored."""

    @abstractmethod
    def iter_blobs(self) -> AsyncIterator[BlobInfo]:
        """Every blob in the store (for garbage collection), in no particular order."""

    async def note_checkpointer(self, name: str) -> None:
        """Record that a checkpointer named ``name`` references snapshots in this store (see
        `langchain_sandbox.checkpointing.checkpointer_names`); repeating it is harmless. The default
        records nothing: `checkpointers` then says it cannot tell."""

    async def checkpointers(self) -> set[str] | None:
        """The names `note_checkpointer` recorded and `forget_checkpointer` did not
        remove; ``None`` if the store does not record them (then ``gc`` cannot tell whether
        another application still needs a blob, and refuses to collect any)."""
        return None

    async def forget_checkpointer(self, name: str) -> None:
        """Drop ``name`` from `checkpointers` (its application and checkpoints are gone)."""

    async def remove_abandoned_writes(self, *, dry_run: bool = False) -> tuple[int, int]:
        """Remove what puts that never finished left behind (a writer killed mid-put), never
        what a live writer is still writing; return how many such leftovers and bytes there
        were. ``gc`` calls it. The default finds nothing: a store whose puts are atomic leaves
        nothing behind."""
        return 0, 0

    async def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The bytes of several blobs; raises ``SnapshotNotFoundError`` if any is missing."""
        unique = list(dict.fromkeys(keys))
        values = await asyncio.gather(*(self.get(key) for key in unique))
        return dict(zip(unique, values, strict=True))

    async def put_many(self, blobs: Mapping[str, bytes]) -> None:
        """Store several blobs (each atomically), `PUT_CONCURRENCY` at a time: a capture of
        100,000 small files must not become 100,000 tasks at once."""
        items = iter(blobs.items())

        async def drain() -> None:
            for key, data in items:
                await self.put(key, data)

        await asyncio.gather(*(drain() for _ in range(min(PUT_CONCURRENCY, len(blobs)))))


__all__ = ["PUT_CONCURRENCY", "BlobInfo", "BlobStore", "check_key", "digest"]
