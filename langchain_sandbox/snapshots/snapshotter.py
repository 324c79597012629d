"""Capture, restore and garbage-collect workspace snapshots, on any provider.

The :class:`Snapshotter` talks to a session only through the provider contract
(``list_files``, ``read_files``, ``write_files``, ``remove_files``, ``dump_variables``,
``load_variables``; ``run_command`` only to restore file modes), so one implementation serves the
local, E2B and Runloop providers alike.

API (stable; the runtime calls these):

``capture(session, *, base=None, revision=0) -> SnapshotInfo``
    Snapshot the workspace and the picklable variables. Files whose ``(size, mtime_ns)`` match the
    ``base`` snapshot (or what this snapshotter last saw in the same session) are not read again;
    only blobs the store lacks are written. Returns the ref to keep in the graph record.
``restore(session, ref) -> RestoreReport``
    Validate the snapshot (manifest and every blob it needs) *before* touching the session, then
    make the workspace equal to it (write what differs, remove what is not in it, restore modes)
    and load the variables. ``RestoreReport.notices`` are messages for the model.
``collect_garbage(live_refs, *, dry_run=False, grace_seconds=3600) -> GcReport``
    Delete every blob no live snapshot needs (manifests, file contents, variables), except blobs
    younger than the grace period, which a capture running right now may still be referencing.

Change detection trusts ``(size, mtime_ns)`` the way ``rsync`` and ``git`` do, with a guard
against "racy" entries (a rewrite of the same size within one filesystem timestamp tick keeps the
mtime): a file's hash is trusted only if its content was read (or written, by a restore) at least
:data:`RACY_WINDOW_NS` after its mtime. A capture whose changed files were modified just before it
waits out the rest of that window (at most :data:`RACY_WINDOW_NS`) before reading them, and a
restore waits it out once after writing, so neither has to read those files again next time. A
provider whose listing reveals coarser timestamps (whole seconds, say) gets a window of that
resolution instead, without the wait: recently changed files are simply read again next time.

Why one module over 500 lines: capture, restore and garbage collection of one snapshot format
share its verification and the store's access paths; the format itself is in ``manifest.py``.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_sandbox.errors import (
    InvalidInputError,
    SnapshotNotFoundError,
    UnsafeArchiveError,
)
from langchain_sandbox.providers.base import FileInfo, Session
from langchain_sandbox.snapshots.local_store import LocalDirectoryBlobStore
from langchain_sandbox.snapshots.manifest import (
    FileEntry,
    Manifest,
    SnapshotLimits,
    VariablesEntry,
    check_relative_path,
    is_digest,
    parse_manifest,
)
from langchain_sandbox.snapshots.store import BlobStore, digest
from langchain_sandbox.workspace import MAX_PATH_DEPTH

RACY_WINDOW_NS = 10_000_000
"""Longest filesystem timestamp tick guarded against (a jiffy at HZ=100); see the module docs."""

_DIR_PLACEHOLDER = ".langchain-sandbox-keep"
_HASH_IN_THREAD_BYTES = 1024 * 1024
_FETCH_CHUNK_BYTES = 4 * 1024 * 1024
_MAX_COMMAND_CHARS = 64 * 1024
_MAX_NAMES_IN_NOTICE = 10

T = TypeVar("T")


@dataclass(frozen=True)
class SnapshotInfo:
    """What :meth:`Snapshotter.capture` did.

    Attributes:
        ref: The snapshot's reference (sha256 of its manifest); store it in the graph record.
        revision: The revision recorded in the manifest.
        parent: The ``base`` the capture was made against, if any.
        files: Files in the snapshot.
        bytes_total: Sum of their sizes.
        bytes_read: Bytes read from the session (only files that changed, or were not known).
        bytes_written: Bytes of new blobs written to the store (the manifest included).
        blobs_written: New blobs written to the store.
        variables_saved: Names of the variables captured.
        variables_skipped: Names that could not be captured (unpicklable).
        omitted: Workspace paths left out, with the reason (symlinks, files over the size limit).
        notices: The same facts as sentences, for a log or the model.
    """

    ref: str
    revision: int
    parent: str | None
    files: int
    bytes_total: int
    bytes_read: int
    bytes_written: int
    blobs_written: int
    variables_saved: tuple[str, ...] = ()
    variables_skipped: tuple[str, ...] = ()
    omitted: Mapping[str, str] = field(default_factory=dict)
    notices: tuple[str, ...] = ()


@dataclass(frozen=True)
class RestoreReport:
    """What :meth:`Snapshotter.restore` did.

    Attributes:
        ref: The snapshot restored.
        revision: Its revision.
        files_written: Files written (those that differed or were missing).
        bytes_written: Their total size.
        files_unchanged: Files that already had the snapshot's content.
        paths_removed: Workspace paths removed because the snapshot does not have them.
        variables_restored: Names of the variables loaded back.
        variables_lost: Names that could not be restored (skipped at capture or failed to load).
        notices: Messages for the model ("restored the workspace to revision N; ...").
    """

    ref: str
    revision: int
    files_written: int
    bytes_written: int
    files_unchanged: int
    paths_removed: int
    variables_restored: tuple[str, ...] = ()
    variables_lost: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()


@dataclass(frozen=True)
class GcReport:
    """What :meth:`Snapshotter.collect_garbage` deleted (or, with ``dry_run``, would delete).

    Attributes:
        dry_run: Nothing was deleted.
        live_refs: Snapshot refs given as still referenced.
        missing_refs: Live refs whose manifest is not in the store (their snapshots cannot be
            restored; worth an alert).
        reachable_blobs: Blobs the live snapshots need.
        kept_recent: Blobs no live snapshot needs, kept because they are younger than the grace
            period or needed by a snapshot that is.
        deleted_blobs: Blobs deleted (or to delete).
        deleted_bytes: Their total size.
    """

    dry_run: bool
    live_refs: int
    missing_refs: tuple[str, ...]
    reachable_blobs: int
    kept_recent: int
    deleted_blobs: int
    deleted_bytes: int


@dataclass(frozen=True)
class _Seen:
    """What a workspace's files held when they were last observed.

    Attributes:
        files: path -> (size, mtime_ns, sha256).
        horizon_ns: Host time of the observation: a capture read the contents after it; a
            restore wrote them before it and listed them after it (for a manifest: ``created_at``).
        window_ns: How much older than the horizon an mtime must be for its hash to be trusted:
            :data:`RACY_WINDOW_NS`, or the provider's timestamp resolution if that is coarser.
    """

    files: Mapping[str, tuple[int, int, str]]
    horizon_ns: int
    window_ns: int

    @classmethod
    def observe(cls, files: Mapping[str, tuple[int, int, str]], horizon_ns: int) -> _Seen:
        return cls(files, horizon_ns, _racy_window(mtime for _, mtime, _ in files.values()))

    @classmethod
    def of_manifest(cls, manifest: Manifest) -> _Seen:
        return cls.observe(
            {p: (e.size, e.mtime_ns, e.sha256) for p, e in manifest.files.items()},
            int(manifest.created_at * 1e9),
        )

    def hash_of(self, info: FileInfo) -> str | None:
        """The content hash of ``info`` if its size and mtime say it has not changed since."""
        seen = self.files.get(info.path)
        if seen is None or (info.size, info.mtime_ns) != seen[:2]:
            return None
        # Too close to the observation: a same-size rewrite within one timestamp tick would
        # keep the mtime, so the hash cannot be trusted.
        if info.mtime_ns + self.window_ns > self.horizon_ns:
            return None
        return seen[2]


def _racy_window(mtimes: Iterable[int]) -> int:
    """:data:`RACY_WINDOW_NS`, widened to the timestamp resolution the mtimes reveal (a provider
    that reports whole seconds gets a one-second window)."""
    resolution = 1_000_000_000
    for mtime in mtimes:
        while resolution > 1 and mtime % resolution:
            resolution //= 10
        if resolution == 1:
            break
    return max(RACY_WINDOW_NS, resolution)


class Snapshotter:
    """Content-addressed, incremental snapshots of a session's workspace and variables.

    Args:
        store: Where blobs go; default a :class:`LocalDirectoryBlobStore` at its default path.
        limits: Bounds checked on capture and on restore.

    One snapshotter may serve many sessions at once; it remembers, per live session object, the
    hashes of the files it last captured or restored there, so the next capture reads only what
    changed even when the previous snapshot came from another session. A caller must not run code
    in a session while it is being captured or restored (the runtime holds the session's lock).
    """

    def __init__(
        self, store: BlobStore | None = None, *, limits: SnapshotLimits | None = None
    ) -> None:
        self.store: BlobStore = store if store is not None else LocalDirectoryBlobStore()
        self.limits = limits or SnapshotLimits()
        self._seen: weakref.WeakKeyDictionary[Session, _Seen] = weakref.WeakKeyDictionary()

    async def load_manifest(self, ref: str) -> Manifest:
        """Fetch, verify and parse the manifest of ``ref``.

        Raises:
            InvalidInputError: ``ref`` is not a sha256 hex digest.
            SnapshotNotFoundError: the store has no such snapshot.
            UnsafeArchiveError: the manifest does not match its hash or is malformed.
        """
        if not is_digest(ref):
            raise InvalidInputError(f"Snapshot ref {ref!r} is not a sha256 hex digest.")
        data = await self.store.get(ref)
        _verify(ref, data, None)
        return parse_manifest(data, self.limits)

    # ------------------------------------------------------------------ capture

    async def capture(
        self, session: Session, *, base: str | None = None, revision: int = 0
    ) -> SnapshotInfo:
        """Snapshot ``session``'s workspace (and variables) and return its ref.

        Args:
            session: The live session.
            base: Ref of an earlier snapshot of this workspace, normally the one in the graph
                record; files unchanged since it are not read again. A base missing from the
                store only makes the capture slower.
            revision: The sandbox revision this snapshot captures.

        Raises:
            InvalidInputError: the workspace exceeds the limits (too many files or bytes).
        """
        if base is not None and not is_digest(base):
            raise InvalidInputError(f"Snapshot ref {base!r} is not a sha256 hex digest.")
        listed_at_ns = time.time_ns()
        listing = await session.list_files(".", recursive=True)
        max_file = min(self.limits.max_file_bytes, session.spec.limits.max_file_bytes)
        selected, dirs, omitted = _select(listing, max_file)
        self._check_capacity(selected, dirs, omitted)
        _check_quota(selected, session.spec.limits.workspace_bytes)
        hashes, to_read = await self._known_hashes(session, base, selected)

        # The variables are dumped by the sandbox's interpreter while the host reads the files,
        # and blobs are stored while the next batch is read (one batch in flight bounds memory).
        variables_task = asyncio.ensure_future(self._capture_variables(session, max_file))
        puts: list[asyncio.Future[tuple[int, int]]] = []
        try:
            horizon_ns = await _wait_out_racy_window(to_read, listed_at_ns)
            sizes = {info.path: info.size for info in selected}
            bytes_read = 0
            for batch in _batches(to_read, lambda info: info.size, self.limits.batch_bytes):
                contents = await _read_batch(session, [info.path for info in batch], omitted)
                bytes_read += sum(len(data) for data in contents.values())
                for path, data in contents.items():
                    if len(data) > max_file:
                        omitted[path] = f"{len(data)} bytes, over the {max_file}-byte file limit"
                        continue
                    sizes[path] = len(data)
                digests = await _digest_all({p: d for p, d in contents.items() if p not in omitted})
                hashes.update(digests)
                if puts:
                    await puts[-1]
                puts.append(
                    asyncio.ensure_future(self._put_new({digests[p]: contents[p] for p in digests}))
                )

            by_path = {info.path: info for info in selected}
            files = {
                path: FileEntry(
                    sha256=hashes[path],
                    size=sizes[path],
                    mode=by_path[path].mode & 0o7777,
                    mtime_ns=by_path[path].mtime_ns,
                )
                for path in sorted(hashes)
                if path not in omitted
            }
            variables, variables_blob, notices = await variables_task
            manifest = Manifest(
                revision=revision,
                created_at=horizon_ns / 1e9,
                parent=base,
                files=files,
                dirs=tuple(sorted(_empty_dirs(dirs, files, omitted))),
                omitted=dict(sorted(omitted.items())),
                variables=variables,
            )
            encoded = manifest.encode()
            ref = digest(encoded)
            final = {ref: encoded}
            if variables is not None:
                final[variables.sha256] = variables_blob
            # The manifest may land before the file blobs: nothing names it until this returns.
            puts.append(asyncio.ensure_future(self._put_new(final)))
            written = await asyncio.gather(*puts)
        except BaseException:
            pending: list[asyncio.Future[Any]] = [variables_task, *puts]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise
        bytes_written = sum(count for count, _ in written)
        blobs_written = sum(blobs for _, blobs in written)
        self._seen[session] = _Seen.observe(
            {p: (by_path[p].size, by_path[p].mtime_ns, e.sha256) for p, e in files.items()},
            horizon_ns,
        )
        if omitted:
            notices.append(
                f"{len(omitted)} workspace path(s) were not captured: {_describe(omitted)}."
            )
        return SnapshotInfo(
            ref=ref,
            revision=revision,
            parent=base,
            files=len(files),
            bytes_total=manifest.total_bytes,
            bytes_read=bytes_read,
            bytes_written=bytes_written,
            blobs_written=blobs_written,
            variables_saved=variables.saved if variables else (),
            variables_skipped=variables.skipped if variables else (),
            omitted=manifest.omitted,
            notices=tuple(notices),
        )

    async def _known_hashes(
        self, session: Session, base: str | None, selected: Sequence[FileInfo]
    ) -> tuple[dict[str, str], list[FileInfo]]:
        """Hashes of the files unchanged since this session's last capture or restore, or since
        ``base``, whose blobs the store still holds; and the files that must be read."""
        views = [view for view in [self._seen.get(session)] if view is not None]
        if base is not None:
            base_manifest = await self._load_optional(base)
            if base_manifest is not None:
                views.append(_Seen.of_manifest(base_manifest))
        hashes: dict[str, str] = {}
        for info in selected:
            known = next((h for view in views if (h := view.hash_of(info)) is not None), None)
            if known is not None:
                hashes[info.path] = known
        # A blob gone from the store (gc'd with an old snapshot) is written again from the file.
        absent = await self.store.missing(set(hashes.values()))
        hashes = {path: sha for path, sha in hashes.items() if sha not in absent}
        return hashes, [info for info in selected if info.path not in hashes]

    async def _load_optional(self, ref: str) -> Manifest | None:
        try:
            return await self.load_manifest(ref)
        except SnapshotNotFoundError:
            return None

    def _check_capacity(
        self, selected: Sequence[FileInfo], dirs: set[str], omitted: Mapping[str, str]
    ) -> None:
        count = len(selected) + len(dirs)
        total = sum(info.size for info in selected)
        if count > self.limits.max_files or len(omitted) > self.limits.max_files:
            raise InvalidInputError(
                f"The workspace has {count} files and directories; a snapshot holds at most "
                f"{self.limits.max_files} (SnapshotLimits.max_files). Delete files you do not need."
            )
        if total > self.limits.max_total_bytes:
            raise InvalidInputError(
                f"The workspace holds {total} bytes; a snapshot holds at most "
                f"{self.limits.max_total_bytes} (SnapshotLimits.max_total_bytes). "
                "Delete files you do not need."
            )

    async def _capture_variables(
        self, session: Session, max_bytes: int
    ) -> tuple[VariablesEntry | None, bytes, list[str]]:
        if not session.capabilities.variables:
            return None, b"", []
        dump = await session.dump_variables()
        if len(dump.data) > max_bytes:
            return (
                None,
                b"",
                [
                    f"Python variables were not captured: {len(dump.data)} bytes, over the "
                    f"{max_bytes}-byte limit."
                ],
            )
        entry = VariablesEntry(
            sha256=digest(dump.data),
            size=len(dump.data),
            saved=tuple(sorted(dump.saved)),
            skipped=tuple(sorted(dump.skipped)),
        )
        return entry, dump.data, []

    async def _put_new(self, blobs: Mapping[str, bytes]) -> tuple[int, int]:
        """Store the blobs the store lacks; return (bytes, count) written."""
        if not blobs:
            return 0, 0
        absent = await self.store.missing(blobs)
        new = {key: blobs[key] for key in absent}
        if new:
            await self.store.put_many(new)
        return sum(len(data) for data in new.values()), len(new)

    # ------------------------------------------------------------------ restore

    async def restore(self, session: Session, ref: str) -> RestoreReport:
        """Make ``session``'s workspace and variables equal to snapshot ``ref``.

        Nothing is written until the manifest has been validated and every blob the restore needs
        has been found in the store (and, up to ``limits.restore_memory_bytes``, fetched and
        verified against its hash). Paths go through the session's own ``write_files`` and
        ``remove_files``, which resolve them inside the workspace.

        Raises:
            InvalidInputError: ``ref`` is not a sha256 hex digest.
            SnapshotNotFoundError: the snapshot or one of its blobs is not in the store.
            UnsafeArchiveError: the manifest is malformed, breaks a path rule or a limit, or a
                blob does not match its hash. The session is left untouched (a blob found corrupt
                only during the second pass of a restore larger than the memory budget is the one
                exception, possible only if the store changes during the restore).
        """
        manifest = await self.load_manifest(ref)
        listing = await session.list_files(".", recursive=True)
        views = [_Seen.of_manifest(manifest)]
        if (session_view := self._seen.get(session)) is not None:
            views.insert(0, session_view)

        def unchanged(info: FileInfo, entry: FileEntry) -> bool:
            return any(view.hash_of(info) == entry.sha256 for view in views)

        removals, writes, make_dirs = _plan_restore(manifest, listing, unchanged)
        # A name the sandbox allows but the session API refuses (a backslash, say) cannot be
        # removed through it; it is left in place and reported rather than failing the restore.
        stuck = {path: "could not be removed" for path in removals if not _portable(path)}
        removals = [path for path in removals if path not in stuck]
        needed = {manifest.files[path].sha256: manifest.files[path].size for path in writes}
        if manifest.variables is not None:
            needed[manifest.variables.sha256] = manifest.variables.size
        absent = await self.store.missing(needed)
        if absent:
            raise SnapshotNotFoundError(
                f"Snapshot {ref} cannot be restored: {len(absent)} of its blobs are missing from "
                f"the store ({', '.join(sorted(absent)[:3])}...)."
            )
        in_memory = sum(needed.values()) <= self.limits.restore_memory_bytes
        blobs: dict[str, bytes] = {}
        if in_memory:
            blobs = await self._fetch_verified(needed)
        else:
            for batch in _batches(list(needed.items()), _second, self.limits.batch_bytes):
                await self._fetch_verified(dict(batch))

        if removals:
            await session.remove_files(removals)
        bytes_written = 0
        for batch in _batches(
            [(path, manifest.files[path].size) for path in writes], _second, self.limits.batch_bytes
        ):
            wanted = {manifest.files[path].sha256: size for path, size in batch}
            contents = blobs if in_memory else await self._fetch_verified(wanted)
            await session.write_files(
                {path: contents[manifest.files[path].sha256] for path, _ in batch}
            )
            bytes_written += sum(size for _, size in batch)
        if make_dirs:
            placeholders = [f"{path}/{_DIR_PLACEHOLDER}" for path in make_dirs]
            await session.write_files(dict.fromkeys(placeholders, b""))
            await session.remove_files(placeholders)

        notices = [
            f"Restored the workspace to revision {manifest.revision} "
            f"({len(manifest.files)} files, {_human_bytes(manifest.total_bytes)})."
        ]
        if writes or make_dirs:
            # Let the files just written leave the racy window, so they count as known below.
            await asyncio.sleep(RACY_WINDOW_NS / 1e9)
        horizon_ns = time.time_ns()
        after = {info.path: info for info in await session.list_files(".", recursive=True)}
        notices += await _restore_modes(session, manifest, after)
        self._seen[session] = _Seen.observe(
            {
                path: (info.size, info.mtime_ns, entry.sha256)
                for path, entry in manifest.files.items()
                if (info := after.get(path)) is not None and info.size == entry.size
            },
            horizon_ns,
        )
        if stuck:
            notices.append(
                f"{len(stuck)} path(s) not in the snapshot were left in place: {_describe(stuck)}."
            )
        if manifest.omitted:
            notices.append(
                f"{len(manifest.omitted)} path(s) were not part of the snapshot and are not "
                f"restored: {_describe(manifest.omitted)}."
            )
        restored, lost = await self._restore_variables(session, manifest, blobs, notices)
        return RestoreReport(
            ref=ref,
            revision=manifest.revision,
            files_written=len(writes),
            bytes_written=bytes_written,
            files_unchanged=len(manifest.files) - len(writes),
            paths_removed=len(removals),
            variables_restored=restored,
            variables_lost=lost,
            notices=tuple(notices),
        )

    async def _fetch_verified(self, sizes: Mapping[str, int]) -> dict[str, bytes]:
        """Fetch blobs and check each against its size and hash.

        Chunks are fetched and hashed concurrently, so reading one chunk overlaps hashing
        another (hashlib and file reads both release the GIL).
        """
        gate = asyncio.Semaphore((os.cpu_count() or 1) + 1)

        async def fetch(chunk: list[tuple[str, int]]) -> dict[str, bytes]:
            async with gate:
                blobs = await self.store.get_many(key for key, _ in chunk)
                digests = await asyncio.to_thread(lambda: {k: digest(d) for k, d in blobs.items()})
            for key, data in blobs.items():
                _verify(key, data, sizes[key], digests[key])
            return blobs

        chunks = list(_batches(list(sizes.items()), _second, _FETCH_CHUNK_BYTES))
        fetched = await asyncio.gather(*(fetch(chunk) for chunk in chunks))
        return {key: data for blobs in fetched for key, data in blobs.items()}

    async def _restore_variables(
        self,
        session: Session,
        manifest: Manifest,
        blobs: Mapping[str, bytes],
        notices: list[str],
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        variables = manifest.variables
        if variables is None:
            return (), ()
        if not session.capabilities.variables:
            notices.append(
                "Python variables were not restored: this sandbox provider cannot load them."
            )
            return (), variables.saved + variables.skipped
        data = blobs.get(variables.sha256)
        if data is None:
            data = (await self._fetch_verified({variables.sha256: variables.size}))[
                variables.sha256
            ]
        failed = await session.load_variables(data)
        lost = tuple(sorted({*variables.skipped, *failed}))
        restored = tuple(name for name in variables.saved if name not in set(failed))
        if lost:
            notices.append(
                f"Variables {', '.join(lost)} could not be restored (they could not be pickled "
                "or failed to load); re-create them before using them."
            )
        return restored, lost

    # ----------------------------------------------------------------------- gc

    async def collect_garbage(
        self,
        live_refs: Iterable[str],
        *,
        dry_run: bool = False,
        grace_seconds: float = 3600.0,
    ) -> GcReport:
        """Delete the blobs that no live snapshot needs.

        Args:
            live_refs: Refs of every snapshot still referenced (by any checkpoint of any thread).
                A snapshot's parent is not kept for it: it is not needed to restore it.
            dry_run: Only report what would be deleted.
            grace_seconds: Blobs written more recently are kept, and manifests among them count
                as live, so a capture that has not reached a checkpoint yet loses nothing. Make it
                longer than the longest gap between a capture and its checkpoint.
        """
        roots = list(dict.fromkeys(live_refs))
        for ref in roots:
            if not is_digest(ref):
                raise InvalidInputError(f"Snapshot ref {ref!r} is not a sha256 hex digest.")
        blobs = [info async for info in self.store.iter_blobs()]
        cutoff = time.time() - grace_seconds
        recent = {info.key for info in blobs if info.modified_at >= cutoff}
        recent_manifests = [
            info.key
            for info in blobs
            if info.key in recent and info.size <= self.limits.max_manifest_bytes
        ]
        reachable: set[str] = set()
        missing: list[str] = []
        for ref in roots:
            try:
                manifest = await self.load_manifest(ref)
            except SnapshotNotFoundError:
                missing.append(ref)
                continue
            except UnsafeArchiveError:
                # Keep what is there of a damaged live snapshot; deleting it helps no one.
                reachable.add(ref)
                continue
            reachable.add(ref)
            reachable |= manifest.blob_keys()
        protected = set(recent)
        for key in recent_manifests:
            recent_manifest = await self._recent_manifest(key)
            if recent_manifest is not None:
                protected |= recent_manifest.blob_keys()
        garbage = [
            info for info in blobs if info.key not in reachable and info.key not in protected
        ]
        if not dry_run and garbage:
            await self.store.delete(info.key for info in garbage)
        return GcReport(
            dry_run=dry_run,
            live_refs=len(roots),
            missing_refs=tuple(missing),
            reachable_blobs=sum(1 for info in blobs if info.key in reachable),
            kept_recent=sum(1 for info in blobs if info.key in protected - reachable),
            deleted_blobs=len(garbage),
            deleted_bytes=sum(info.size for info in garbage),
        )

    async def _recent_manifest(self, key: str) -> Manifest | None:
        """The manifest stored under ``key``, or ``None`` if that blob is not a manifest."""
        try:
            data = await self.store.get(key)
        except SnapshotNotFoundError:
            return None
        # Canonical manifests start with their first sorted key; file blobs almost never do.
        if not data.startswith(b'{"created_at":') or digest(data) != key:
            return None
        try:
            return parse_manifest(data, self.limits)
        except UnsafeArchiveError:
            return None


def _verify(key: str, data: bytes, size: int | None, computed: str | None = None) -> None:
    if (size is not None and len(data) != size) or (computed or digest(data)) != key:
        raise UnsafeArchiveError(
            f"Snapshot blob {key} does not match its hash; the snapshot store is corrupt or was "
            "tampered with. Nothing was restored from it."
        )


def _check_quota(selected: Sequence[FileInfo], quota: int | None) -> None:
    """Refuse to store more than the workspace may hold: sparse files count at their apparent
    size (that is what reading them gives), so a few holes cannot fill the store."""
    total = sum(info.size for info in selected)
    if quota is not None and total > quota:
        raise InvalidInputError(
            f"The workspace holds {total} bytes of files (sparse files at their apparent size), "
            f"over its quota of {quota} (Limits.workspace_bytes); no snapshot was taken. "
            "Delete files you do not need."
        )


def _select(
    listing: Sequence[FileInfo], max_file: int
) -> tuple[list[FileInfo], set[str], dict[str, str]]:
    """Split a listing into the files to capture, the directories, and the paths left out."""
    selected: list[FileInfo] = []
    dirs: set[str] = set()
    omitted: dict[str, str] = {}
    for info in listing:
        if not _portable(info.path):
            omitted[_printable(info.path)] = "name cannot be restored portably"
            continue
        if info.kind == "symlink":
            omitted[info.path] = "symlink"
        elif info.kind == "dir" and info.path.count("/") + 1 >= MAX_PATH_DEPTH:
            # Listings stop at this depth: what lies below was not seen, so it is not kept.
            omitted[info.path] = f"its contents lie deeper than {MAX_PATH_DEPTH} directories"
        elif info.kind == "dir":
            dirs.add(info.path)
        elif info.size > max_file:
            omitted[info.path] = f"{info.size} bytes, over the {max_file}-byte file limit"
        else:
            selected.append(info)
    return selected, dirs, omitted


def _portable(path: str) -> bool:
    try:
        check_relative_path(path)
    except UnsafeArchiveError:
        return False
    return True


def _printable(path: str) -> str:
    """A stand-in key for a path that breaks the rules (it must still pass them in the manifest)."""
    return "unportable-name-" + digest(path.encode("utf-8", "surrogateescape"))[:16]


def _empty_dirs(
    dirs: set[str], files: Mapping[str, FileEntry], omitted: Mapping[str, str]
) -> set[str]:
    """The directories a restore must create explicitly: those no captured path lies below."""
    implied: set[str] = set()
    for path in [*files, *dirs]:
        parent = path.rpartition("/")[0]
        while parent and parent not in implied:
            implied.add(parent)
            parent = parent.rpartition("/")[0]
    return {path for path in dirs if path not in implied and path not in omitted}


async def _wait_out_racy_window(to_read: Sequence[FileInfo], listed_at_ns: int) -> int:
    """Sleep until the files about to be read are older than the racy window (never longer than
    :data:`RACY_WINDOW_NS`, whatever the sandbox's clock says; with coarse timestamps, not at
    all: those files are read again next time instead); return the horizon of the reads."""
    if to_read and _racy_window(info.mtime_ns for info in to_read) == RACY_WINDOW_NS:
        newest = max(info.mtime_ns for info in to_read)
        wait_ns = min(newest + RACY_WINDOW_NS - time.time_ns(), RACY_WINDOW_NS)
        if wait_ns > 0:
            await asyncio.sleep(wait_ns / 1e9)
    return max(time.time_ns(), listed_at_ns)


def _second(pair: tuple[str, int]) -> int:
    return pair[1]


def _batches(items: Sequence[T], size_of: Callable[[T], int], max_bytes: int) -> Iterator[list[T]]:
    """Consecutive groups of ``items`` of at most ``max_bytes`` each (a bigger item goes alone)."""
    batch: list[T] = []
    total = 0
    for item in items:
        size = size_of(item)
        if batch and total + size > max_bytes:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += size
    if batch:
        yield batch


async def _read_batch(
    session: Session, paths: list[str], omitted: dict[str, str]
) -> dict[str, bytes]:
    """Read ``paths``; a file that vanished or cannot be read any more is noted in ``omitted``."""
    try:
        return await session.read_files(paths)
    except InvalidInputError:
        if len(paths) == 1:
            omitted[paths[0]] = "vanished or became unreadable during the capture"
            return {}
    contents: dict[str, bytes] = {}
    for path in paths:
        contents.update(await _read_batch(session, [path], omitted))
    return contents


async def _digest_all(contents: Mapping[str, bytes]) -> dict[str, str]:
    """sha256 of each value. Large batches are hashed in threads, one group per CPU (hashlib
    releases the GIL), so hashing uses every core and never blocks the event loop."""
    if sum(len(data) for data in contents.values()) < _HASH_IN_THREAD_BYTES:
        return {name: digest(data) for name, data in contents.items()}
    groups: list[list[str]] = [[] for _ in range(os.cpu_count() or 1)]
    loads = [0] * len(groups)
    for name in sorted(contents, key=lambda n: len(contents[n]), reverse=True):
        lightest = loads.index(min(loads))
        groups[lightest].append(name)
        loads[lightest] += len(contents[name])
    results = await asyncio.gather(
        *(
            asyncio.to_thread(lambda names: {n: digest(contents[n]) for n in names}, group)
            for group in groups
            if group
        )
    )
    return {name: value for result in results for name, value in result.items()}


def _plan_restore(
    manifest: Manifest,
    listing: Sequence[FileInfo],
    unchanged: Callable[[FileInfo, FileEntry], bool],
) -> tuple[list[str], list[str], list[str]]:
    """What to remove, which files to write and which empty directories to create.

    Everything in the workspace that the snapshot does not have is removed, and so is anything of
    the wrong kind (a directory where the snapshot has a file, a file where it has a directory,
    any symlink), so no write can land on or through something the sandbox left there.
    """
    wanted_dirs = set(manifest.dirs)
    for path in [*manifest.files, *manifest.dirs]:
        parent = path.rpartition("/")[0]
        while parent and parent not in wanted_dirs:
            wanted_dirs.add(parent)
            parent = parent.rpartition("/")[0]
    current = {info.path: info for info in listing}
    doomed: set[str] = set()
    for path, info in current.items():
        keep = (info.kind == "dir" and path in wanted_dirs) or (
            info.kind == "file" and path in manifest.files
        )
        if not keep:
            doomed.add(path)
    removals = sorted(path for path in doomed if not _has_ancestor_in(path, doomed))
    writes = [
        path
        for path, entry in manifest.files.items()
        if path in doomed
        or (existing := current.get(path)) is None
        or _has_ancestor_in(path, doomed)
        or not unchanged(existing, entry)
    ]
    make_dirs = [
        path
        for path in sorted(manifest.dirs)
        if path in doomed or path not in current or _has_ancestor_in(path, doomed)
    ]
    return removals, writes, make_dirs


def _has_ancestor_in(path: str, paths: set[str]) -> bool:
    parent = path.rpartition("/")[0]
    while parent:
        if parent in paths:
            return True
        parent = parent.rpartition("/")[0]
    return False


def safe_mode(mode: int) -> int:
    """The mode a restored file gets: no setuid/setgid/sticky, no group or other write, exec
    bits only if the owner had exec, and always readable and writable by the owner."""
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


async def _restore_modes(
    session: Session, manifest: Manifest, after: Mapping[str, FileInfo]
) -> list[str]:
    """chmod the files whose mode differs from the snapshot's (run inside the sandbox, with the
    sandbox's own rights, so it can do nothing the sandboxed code could not)."""
    by_mode: dict[int, list[str]] = {}
    for path, entry in manifest.files.items():
        info = after.get(path)
        wanted = safe_mode(entry.mode)
        if info is not None and info.mode & 0o7777 != wanted:
            by_mode.setdefault(wanted, []).append(path)
    if not by_mode:
        return []
    count = sum(len(paths) for paths in by_mode.values())
    if not session.capabilities.shell:
        return [f"File modes of {count} file(s) were not restored: this provider has no shell."]
    failed = 0
    for mode, paths in sorted(by_mode.items()):
        for chunk in _command_chunks(paths):
            command = f"chmod {mode:o} -- {' '.join(shlex.quote(p) for p in chunk)}"
            result = await session.run_command(command, timeout=60.0)
            if result.exit_code != 0:
                failed += len(chunk)
    if failed:
        return [f"File modes of {failed} file(s) could not be restored."]
    return []


def _command_chunks(paths: list[str]) -> Iterator[list[str]]:
    """Groups of paths whose quoted form fits in one command line."""
    return _batches(paths, lambda path: len(shlex.quote(path)) + 1, _MAX_COMMAND_CHARS)


def _describe(paths: Mapping[str, str]) -> str:
    shown = [f"{path} ({reason})" for path, reason in list(paths.items())[:_MAX_NAMES_IN_NOTICE]]
    more = len(paths) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = [
    "RACY_WINDOW_NS",
    "GcReport",
    "RestoreReport",
    "SnapshotInfo",
    "Snapshotter",
    "safe_mode",
]
