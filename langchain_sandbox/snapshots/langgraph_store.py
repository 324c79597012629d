"""Snapshot blobs in a LangGraph ``BaseStore``, so workers on several machines share them.

Any ``BaseStore`` works (``InMemoryStore``, ``SqliteStore``, ``PostgresStore``, LangGraph
Server's store); with a Postgres store, every worker that reaches the database can restore any
thread's snapshot, which is what a multi-worker deployment needs. Only the store's async methods
are used (``abatch``), batched so a restore is one round trip per chunk of blobs; a store without
async methods (the synchronous ``SqliteStore``) is driven through its ``batch`` in a worker thread.

``BaseStore`` values are JSON objects, so each blob is kept in two items under ``namespace``:

* ``(*namespace, "data")`` / key -> ``{"b64": <base64 of the bytes>}``, fetched only to restore;
* ``(*namespace, "index")`` / key -> ``{"size": n}``, small, used to answer ``missing`` and to list
  blobs for ``gc`` without moving their contents;
* ``(*namespace, "checkpointers")`` / sha256 of a name -> ``{"name": ...}``: the checkpointers
  whose checkpoints reference the blobs (`langchain_sandbox.checkpointing.checkpointer_names`).

The data item is written before the index item, in separate batches, so an index entry always
names a blob whose data is there. Vector indexing is disabled for both (``index=False``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item, Op, PutOp, Result, SearchOp

from langchain_sandbox.errors import (
    InvalidInputError,
    SandboxError,
    SnapshotNotFoundError,
    SnapshotStoreUnavailable,
    UnsafeArchiveError,
)
from langchain_sandbox.snapshots.manifest import is_digest
from langchain_sandbox.snapshots.store import BlobInfo, BlobStore, check_key

DEFAULT_NAMESPACE = ("langchain_sandbox", "snapshot_blobs")
_PAGE = 500


class LangGraphStoreBlobStore(BlobStore):
    """A `BlobStore` over a LangGraph ``BaseStore``.

    Args:
        store: The LangGraph store (its async methods must work, e.g. ``AsyncPostgresStore`` or a
            ``PostgresStore`` used from async code).
        namespace: Namespace prefix of the blobs; give each deployment its own if they must not
            share blobs.
    """

    def __init__(self, store: BaseStore, *, namespace: tuple[str, ...] = DEFAULT_NAMESPACE) -> None:
        if (
            not namespace
            or namespace[0] == "langgraph"
            or not all(isinstance(label, str) and label and "." not in label for label in namespace)
        ):
            raise InvalidInputError(
                f"Blob store namespace {namespace!r} must be a non-empty tuple of non-empty labels "
                "without '.', not starting with 'langgraph' (LangGraph's namespace rules)."
            )
        self.store = store
        self.namespace = tuple(namespace)
        self._data_ns = (*self.namespace, "data")
        self._index_ns = (*self.namespace, "index")
        self._checkpointers_ns = (*self.namespace, "checkpointers")

    def __repr__(self) -> str:
        return f"LangGraphStoreBlobStore({type(self.store).__name__}, namespace={self.namespace!r})"

    async def _batch(self, ops: Sequence[Op]) -> list[Result]:
        """Run ``ops`` on the store. A failure of the store itself (connection lost, database
        error) becomes a retryable [`SnapshotStoreUnavailable`][langchain_sandbox.SnapshotStoreUnavailable] naming only the error's type:
        driver messages can carry connection details that must not reach a model or a log."""
        try:
            try:
                return await self.store.abatch(ops)
            except NotImplementedError:
                return await asyncio.to_thread(self.store.batch, ops)
        except SandboxError:
            raise
        except Exception as exc:
            raise SnapshotStoreUnavailable(
                f"The snapshot store ({type(self.store).__name__}) could not be reached "
                f"({type(exc).__name__}); retrying may help."
            ) from exc

    async def get(self, key: str) -> bytes:
        return (await self.get_many([key]))[key]

    async def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        unique = list(dict.fromkeys(check_key(key) for key in keys))
        if not unique:
            return {}
        items = await self._batch([GetOp(self._data_ns, key, refresh_ttl=False) for key in unique])
        blobs: dict[str, bytes] = {}
        for key, item in zip(unique, items, strict=True):
            if not isinstance(item, Item):
                raise SnapshotNotFoundError(
                    f"Snapshot blob {key} is missing from the store namespace {self.namespace}."
                )
            blobs[key] = self._decode(key, item.value)
        return blobs

    @staticmethod
    def _decode(key: str, value: dict[str, Any]) -> bytes:
        encoded = value.get("b64")
        if not isinstance(encoded, str):
            raise UnsafeArchiveError(f"Snapshot blob {key} in the store has no 'b64' field.")
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise UnsafeArchiveError(f"Snapshot blob {key} in the store is not base64.") from None

    async def put(self, key: str, data: bytes) -> None:
        await self.put_many({key: data})

    async def replace(self, key: str, data: bytes) -> None:
        # A put overwrites the item in place: no moment without the blob.
        await self.put_many({key: data})

    async def put_many(self, blobs: Mapping[str, bytes]) -> None:
        checked = {check_key(key): data for key, data in blobs.items()}
        if not checked:
            return
        await self._batch(
            [
                PutOp(
                    self._data_ns, key, {"b64": base64.b64encode(data).decode("ascii")}, index=False
                )
                for key, data in checked.items()
            ]
        )
        await self._batch(
            [
                PutOp(self._index_ns, key, {"size": len(data)}, index=False)
                for key, data in checked.items()
            ]
        )

    async def missing(self, keys: Iterable[str]) -> set[str]:
        unique = list(dict.fromkeys(check_key(key) for key in keys))
        if not unique:
            return set()
        items = await self._batch([GetOp(self._index_ns, key, refresh_ttl=False) for key in unique])
        return {key for key, item in zip(unique, items, strict=True) if not isinstance(item, Item)}

    async def delete(self, keys: Iterable[str]) -> None:
        unique = list(dict.fromkeys(check_key(key) for key in keys))
        if not unique:
            return
        # Index first: a blob without an index entry is simply re-uploaded by the next capture.
        await self._batch([PutOp(self._index_ns, key, None) for key in unique])
        await self._batch([PutOp(self._data_ns, key, None) for key in unique])

    async def note_checkpointer(self, name: str) -> None:
        await self._batch(
            [PutOp(self._checkpointers_ns, _name_key(name), {"name": name}, index=False)]
        )

    async def checkpointers(self) -> set[str]:
        names: set[str] = set()
        async for item in self._search(self._checkpointers_ns):
            name = item.value.get("name")
            if isinstance(name, str):
                names.add(name)
        return names

    async def forget_checkpointer(self, name: str) -> None:
        await self._batch([PutOp(self._checkpointers_ns, _name_key(name), None)])

    async def _search(self, namespace: tuple[str, ...]) -> AsyncIterator[Item]:
        """Every item directly in ``namespace``, a page at a time."""
        offset = 0
        while True:
            [page] = await self._batch(
                [SearchOp(namespace, limit=_PAGE, offset=offset, refresh_ttl=False)]
            )
            if not isinstance(page, list):
                return
            for item in page:
                if isinstance(item, Item) and item.namespace == namespace:
                    yield item
            if len(page) < _PAGE:
                return
            offset += len(page)

    async def iter_blobs(self) -> AsyncIterator[BlobInfo]:
        async for item in self._search(self._index_ns):
            size = item.value.get("size")
            if is_digest(item.key) and isinstance(size, int):
                yield BlobInfo(key=item.key, size=size, modified_at=item.updated_at.timestamp())


def _name_key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


__all__ = ["DEFAULT_NAMESPACE", "LangGraphStoreBlobStore"]
