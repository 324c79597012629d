"""What a snapshotter knows, and the verified reads that keep it true: the part of the
[`Snapshotter`][langchain_sandbox.Snapshotter] that its capture (``capture.py``), restore
(``restore.py``) and garbage collection (``snapshotter.py``) share. Per live session it keeps the
snapshot last captured or restored there (`Known`: the listing, the entries, the manifest parts,
which hashes are trusted and when the store was last seen to hold their blobs) and the manifest
parts it validated; for the store, the blobs found corrupt (never reused). Every blob is read
through `SnapshotKnowledge._fetch_checked`, which checks size and hash and, on damage, forgets
what any session was believed to reuse. Change detection trusts ``(size, mtime_ns)`` the way
``rsync`` and ``git`` do, with a guard against "racy" entries (`Seen`, `RACY_WINDOW_NS`), and
the store is trusted to still hold what a session reuses for `STORE_RECHECK_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from langchain_sandbox.errors import InvalidInputError, SnapshotNotFoundError, UnsafeArchiveError
from langchain_sandbox.providers.base import FileInfo, Session
from langchain_sandbox.snapshots._listing import Listing
from langchain_sandbox.snapshots._rewind_plan import RewindHead, part_index
from langchain_sandbox.snapshots.local_store import LocalDirectoryBlobStore
from langchain_sandbox.snapshots.manifest import (
    FileEntry,
    Manifest,
    ManifestPart,
    SnapshotLimits,
    VariablesEntry,
    is_digest,
)
from langchain_sandbox.snapshots.manifest_parsing import parse_root
from langchain_sandbox.snapshots.store import BlobStore, digest

RACY_WINDOW_NS = 10_000_000
"""Longest filesystem timestamp tick guarded against (a jiffy at HZ=100).

A rewrite of the same size within one timestamp tick keeps the mtime, so a file's hash is
trusted only if its content was read (or written, by a restore) at least this long after its
mtime. A capture whose changed files were modified just before it waits out the rest of that
window before reading them, and a restore waits it out once after writing, so neither has to
read those files again next time. A provider whose listing reveals coarser timestamps (whole
seconds, say) gets a window of that resolution instead, without the wait: recently changed
files are simply read again next time (`racy_window`)."""

STORE_RECHECK_SECONDS = 300.0
"""How long a capture trusts, without asking the store, that the blobs of the snapshot last
captured or restored in the same session are still there (``gc`` keeps the blobs of every
snapshot a checkpoint names, and keeps everything younger than its grace period, an hour by
default; this bounds what a ``gc`` run with a shorter grace, in another process, could remove
under a live session)."""

_FETCH_CHUNK_BYTES = 4 * 1024 * 1024
_ASSEMBLY_BATCH_BYTES = 16 * 1024 * 1024
# Entries of decoded manifest parts a snapshotter keeps (about 100 bytes each).
_PARSED_PART_ENTRIES = 200_000

T = TypeVar("T")


@dataclass(frozen=True)
class Seen:
    """The files of a workspace whose content hash is trusted while their size and mtime stay
    as they were observed.

    A hash is trusted when the content was read (by a capture) or written (by a restore) at least
    the racy window after the file's mtime: a same-size rewrite within one timestamp tick keeps
    the mtime, so a hash taken closer to it says nothing about the file's content now.

    Attributes:
        files: path -> (size, mtime_ns, sha256) of the trusted files.
        window_ns: The racy window: `RACY_WINDOW_NS`, or the timestamp resolution the
            observed mtimes reveal if that is coarser.
    """

    files: Mapping[str, tuple[int, int, str]]
    window_ns: int = RACY_WINDOW_NS

    @classmethod
    def observe(
        cls,
        files: Mapping[str, tuple[int, int, str]],
        horizon_ns: int,
        early: Mapping[str, int] | None = None,
        *,
        since: Seen | None = None,
        forget: Iterable[str] = (),
    ) -> Seen:
        """``since`` without the paths in ``forget``, plus those of ``files`` observed far enough
        after their mtime: at ``horizon_ns`` (a capture read the contents after it; a restore
        wrote them before it and listed them after it), or at ``early[path]`` for files whose
        contents came with the listing (read during its request, after it was sent)."""
        window = racy_window(mtime for _, mtime, _ in files.values())
        kept = dict(since.files) if since is not None else {}
        if since is not None:
            window = min(window, since.window_ns)
        for path in forget:
            kept.pop(path, None)
        early = early or {}
        for path, seen in files.items():
            if seen[1] + window <= early.get(path, horizon_ns):
                kept[path] = seen
        return cls(kept, window)

    @classmethod
    def of_manifest(cls, manifest: Manifest) -> Seen:
        return cls.observe(
            {p: (e.size, e.mtime_ns, e.sha256) for p, e in manifest.files.items()},
            int(manifest.created_at * 1e9),
        )

    def hash_of(self, info: FileInfo) -> str | None:
        """The content hash of ``info`` if its size and mtime say it has not changed since."""
        seen = self.files.get(info.path)
        if seen is None or (info.size, info.mtime_ns) != seen[:2]:
            return None
        return seen[2]


PartIndex = Mapping[str, tuple[tuple[tuple[str, FileEntry], ...], ManifestPart]]
"""First path of a manifest part -> (its entries, the part): what a capture may reuse."""


@dataclass(frozen=True)
class Captured:
    """The revision of a captured snapshot and its contents besides the files."""

    revision: int
    dirs: tuple[str, ...]
    omitted: Mapping[str, str]
    variables: VariablesEntry | None
    fifos: tuple[str, ...] = ()


@dataclass(frozen=True)
class Known:
    """What a snapshotter knows of one live session's workspace: the snapshot it last captured
    or restored there.

    Invariant: ``entries`` names only files of ``listing``, and every trusted file of ``seen`` has
    its entry there; a capture rebuilds the entries of the paths that changed and of the files
    it reads, and keeps every other entry as it is.

    Attributes:
        ref: That snapshot.
        seen: The files whose hash is trusted (size, mtime, hash).
        listing: The workspace as listed then (what the next capture's listing is compared with).
        entries: The snapshot's file entries.
        parts: Its manifest parts, by first path.
        confirmed_ns: Host time at which the store was last seen to hold every blob named here.
        captured: For a snapshot this snapshotter captured (not restored): its revision and
            what it holds besides the files (empty dirs, omitted paths, variables), so a
            capture that finds all of it unchanged can return ``ref`` instead of writing a copy.
        head: After a rewind: the snapshot the workspace was made equal to, with its parts,
            for the next rewind to compare with (see ``_rewind_plan.py``).
    """

    ref: str
    seen: Seen
    listing: Listing
    entries: Mapping[str, FileEntry]
    parts: PartIndex
    confirmed_ns: int
    captured: Captured | None = None
    head: RewindHead | None = None

    def trusted(self, base: str | None) -> bool:
        """Whether a capture against ``base`` may reuse these blobs without asking the store."""
        fresh = time.time_ns() - self.confirmed_ns < STORE_RECHECK_SECONDS * 1e9
        return fresh and base in (None, self.ref)


def racy_window(mtimes: Iterable[int]) -> int:
    """`RACY_WINDOW_NS`, widened to the timestamp resolution the mtimes reveal (a provider
    that reports whole seconds gets a one-second window)."""
    resolution = 1_000_000_000
    for mtime in mtimes:
        while resolution > 1 and mtime % resolution:
            resolution //= 10
        if resolution == 1:
            break
    return max(RACY_WINDOW_NS, resolution)


class SnapshotKnowledge:
    """The base of the [`Snapshotter`][langchain_sandbox.Snapshotter]: the state it keeps, and
    the reads of the store its capture, restore and garbage collection share."""

    def __init__(
        self, store: BlobStore | None = None, *, limits: SnapshotLimits | None = None
    ) -> None:
        self.store: BlobStore = store if store is not None else LocalDirectoryBlobStore()
        self.limits = limits or SnapshotLimits()
        self._known: weakref.WeakKeyDictionary[Session, Known] = weakref.WeakKeyDictionary()
        # Blobs found corrupt: never reused; the next capture that has their content rewrites them.
        self._corrupt: set[str] = set()
        # Per live session, validated manifest parts by key, oldest first (see _remember_parts).
        self._parsed: weakref.WeakKeyDictionary[
            Session, dict[str, tuple[tuple[str, FileEntry], ...]]
        ] = weakref.WeakKeyDictionary()

    async def load_manifest(self, ref: str) -> Manifest:
        """Fetch, verify and parse the manifest of ``ref`` (its parts too, for format 2).

        Raises:
            InvalidInputError: ``ref`` is not a sha256 hex digest.
            SnapshotNotFoundError: the store has no such snapshot (or one of its parts).
            UnsafeArchiveError: the manifest or a part does not match its hash or is malformed.
        """
        manifest, bad_parts = await self._load_readable(ref)
        await self._raise_for(bad_parts)
        return manifest

    async def _load_readable(
        self, ref: str, session: Session | None = None
    ) -> tuple[Manifest, dict[str, int]]:
        """The manifest of ``ref`` with the files of every part that could be read, and the
        parts that could not (missing or corrupt), each with how many files it lists. What a
        restore restores and gc keeps: one bad part costs its own files, not the snapshot.
        Parts of snapshots ``session`` captured or restored lately are taken as they were
        validated then (see :meth:`_remember_parts`), not fetched and decoded again.

        Raises:
            InvalidInputError, SnapshotNotFoundError, UnsafeArchiveError: as
                `load_manifest`, for the root.
        """
        if not is_digest(ref):
            raise InvalidInputError(f"Snapshot ref {ref!r} is not a sha256 hex digest.")
        data = await self.store.get(ref)
        _verify(ref, data, None)
        root = parse_root(data, self.limits)
        if not root.parts:
            return root.manifest, {}
        held = self._parsed.get(session, {}) if session is not None else {}
        parsed = {key: held[key] for key in held.keys() - self._corrupt}
        # A restore plans over the entries in several passes, each of which would build every
        # entry again from columns (about 10x a dict pass), and it already holds a listing of
        # the workspace, an object per path: it takes a dict, in which held parts are copied in C.
        assembly = root.assembler(self.limits, parsed, compact=session is None)
        unread: dict[str, int] = {}

        # Parts are fetched a batch at a time and decoded into the assembly's columns, so the
        # bytes of at most one batch are held at once, whatever the size of the manifest.
        def fetched_bytes(part: ManifestPart) -> int:
            return 0 if part.sha256 in parsed else part.size

        for batch in batches(list(root.parts), fetched_bytes, _ASSEMBLY_BATCH_BYTES):
            wanted = {part.sha256: part.size for part in batch if part.sha256 not in parsed}
            blobs, bad = await self._fetch_checked(wanted) if wanted else ({}, set())
            for part in batch:
                if part.sha256 in bad:
                    unread[part.sha256] = part.files
                assembly.add(part, blobs.get(part.sha256))
        manifest = assembly.finish()
        if session is not None and not unread:
            self._remember_parts(session, part_index(manifest, parsed).values())
        return manifest, unread

    def _remember_parts(
        self,
        session: Session,
        parts: Iterable[tuple[tuple[tuple[str, FileEntry], ...], ManifestPart]],
    ) -> None:
        """Keep, for ``session``, the entries of the validated manifest parts of a snapshot it
        captured or restored, so a rewind to another snapshot sharing them decodes only the parts
        that differ; the oldest go past a budget."""
        held = self._parsed.setdefault(session, {})
        for chunk, part in parts:
            held.pop(part.sha256, None)
            held[part.sha256] = chunk
        entries = sum(len(chunk) for chunk in held.values())
        while entries > _PARSED_PART_ENTRIES:
            entries -= len(held.pop(next(iter(held))))

    async def _fetch_verified(self, sizes: Mapping[str, int]) -> dict[str, bytes]:
        """Fetch blobs and check each against its size and hash; raise on a bad one.

        Raises:
            SnapshotNotFoundError: a blob is missing.
            UnsafeArchiveError: a blob does not match its size or hash.
        """
        blobs, bad = await self._fetch_checked(sizes)
        await self._raise_for(bad)
        return blobs

    async def _raise_for(self, bad: Iterable[str]) -> None:
        """Raise for the first of the ``bad`` blobs, if any: the store's own error for a missing
        one, [`UnsafeArchiveError`][langchain_sandbox.UnsafeArchiveError] for one that does not match its hash."""
        key = min(bad, default=None)
        if key is not None:
            await self.store.get(key)
            raise _corrupt_blob(key)

    async def _fetch_checked(self, sizes: Mapping[str, int]) -> tuple[dict[str, bytes], set[str]]:
        """Fetch blobs and check each against its size and hash; return the good ones and the
        keys of those missing or corrupt.

        Chunks are fetched and hashed concurrently, so reading one chunk overlaps hashing
        another (hashlib and file reads both release the GIL).
        """
        gate = asyncio.Semaphore((os.cpu_count() or 1) + 1)

        async def fetch(chunk: list[tuple[str, int]]) -> dict[str, bytes]:
            keys = [key for key, _ in chunk]
            async with gate:
                try:
                    blobs = await self.store.get_many(keys)
                except SnapshotNotFoundError:
                    # Deleted since it was looked up: find out which, keep the others.
                    blobs = {}
                    for key in keys:
                        with contextlib.suppress(SnapshotNotFoundError):
                            blobs[key] = await self.store.get(key)
                digests = await asyncio.to_thread(lambda: {k: digest(d) for k, d in blobs.items()})
            return {
                key: data
                for key, data in blobs.items()
                if len(data) == sizes[key] and digests[key] == key
            }

        chunks = list(batches(list(sizes.items()), by_size, _FETCH_CHUNK_BYTES))
        fetched = await asyncio.gather(*(fetch(chunk) for chunk in chunks))
        good = {key: data for blobs in fetched for key, data in blobs.items()}
        corrupt = {key for key in sizes if key not in good}
        if corrupt:
            # The store is damaged: what any session was believed to reuse is checked again at
            # its next capture, and these blobs are never reused.
            self._known.clear()
            self._corrupt |= corrupt
        return good, corrupt


def _verify(key: str, data: bytes, size: int | None) -> None:
    if (size is not None and len(data) != size) or digest(data) != key:
        raise _corrupt_blob(key)


def _corrupt_blob(key: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"Snapshot blob {key} does not match its hash; the snapshot store is corrupt or was "
        "tampered with. Nothing was restored from it."
    )


def by_size(pair: tuple[str, int]) -> int:
    return pair[1]


def batches(
    items: Sequence[T], size_of: Callable[[T], int], max_bytes: int, max_items: int | None = None
) -> Iterator[list[T]]:
    """Consecutive groups of ``items`` of at most ``max_bytes`` (a bigger item goes alone) and
    at most ``max_items`` each."""
    batch: list[T] = []
    total = 0
    for item in items:
        size = size_of(item)
        if batch and (total + size > max_bytes or len(batch) == max_items):
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += size
    if batch:
        yield batch
