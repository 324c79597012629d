"""Capture, restore and garbage-collect workspace snapshots, on any provider.

The [`Snapshotter`][langchain_sandbox.Snapshotter] talks to a session only through the provider contract
(``list_files``, ``list_changes``, ``read_files``, ``write_files``, ``remove_files``,
``dump_variables``, ``load_variables``; ``run_command`` only to restore file modes), so one
implementation serves the local, E2B and Runloop providers alike.

API (stable; the runtime calls these):

``capture(session, *, base=None, revision=0) -> SnapshotInfo``
    Snapshot the workspace and the picklable variables. Files whose ``(size, mtime_ns)`` match the
    ``base`` snapshot (or what this snapshotter last saw in the same session) are not read again;
    only blobs the store lacks are written. Returns the ref to keep in the graph record.

    The cost follows what changed: the snapshotter keeps, per live session, the entries and
    manifest parts of the snapshot it last captured or restored there, so a file unchanged since
    costs no read, no hash and no store lookup, and only the manifest parts holding a changed entry
    are encoded and written (see ``manifest.py``). That knowledge of the store is re-checked, with
    one batched ``missing`` over every reused blob, when it is older than
    `STORE_RECHECK_SECONDS`, when ``base`` is another snapshot, after a blob failed
    verification and after this snapshotter collected garbage.
``restore(session, ref) -> RestoreReport``
    Validate the snapshot (manifest and every blob it needs) *before* touching the session, then
    make the workspace equal to it (write what differs, remove what is not in it, restore modes)
    and load the variables. ``RestoreReport.notices`` are messages for the model. Into a session
    this snapshotter knows (a rewind), the workspace is compared through the session's change
    listing since the last one, and only blobs not confirmed for that session are looked up.
``collect_garbage(live_refs, *, dry_run=False, grace_seconds=3600) -> GcReport``
    Delete every blob no live snapshot needs (manifests, file contents, variables), except blobs
    younger than the grace period, which a capture running right now may still be referencing.

Change detection trusts ``(size, mtime_ns)`` the way ``rsync`` and ``git`` do, with a guard
against "racy" entries (a rewrite of the same size within one filesystem timestamp tick keeps the
mtime): a file's hash is trusted only if its content was read (or written, by a restore) at least
`RACY_WINDOW_NS` after its mtime. A capture whose changed files were modified just before it
waits out the rest of that window (at most `RACY_WINDOW_NS`) before reading them, and a
restore waits it out once after writing, so neither has to read those files again next time. A
provider whose listing reveals coarser timestamps (whole seconds, say) gets a window of that
resolution instead, without the wait: recently changed files are simply read again next time.

Why one module over 500 lines: capture, restore and garbage collection of one snapshot format
share its verification and the store's access paths; the format itself is in ``manifest.py``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import os
import shlex
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_sandbox.errors import (
    InvalidInputError,
    SnapshotNotFoundError,
    UnsafeArchiveError,
)
from langchain_sandbox.providers.base import FileInfo, Session, VariablesDump
from langchain_sandbox.providers.guest_facts import variable_names, variable_reasons
from langchain_sandbox.snapshots._layout import (
    describe_paths,
    inode_of,
    layout_notices,
    links_to_make,
    mark_links,
    metadata_of,
)
from langchain_sandbox.snapshots._listing import EMPTY as EMPTY_LISTING
from langchain_sandbox.snapshots._listing import Listing, portable, safe_mode
from langchain_sandbox.snapshots._rewind_plan import (
    RewindHead,
    RewindScope,
    head_of,
    listed_after,
    part_index,
    relist,
    rewound_entries,
    rewound_parts,
    scope_of,
    unconfirmed,
)
from langchain_sandbox.snapshots.local_store import LocalDirectoryBlobStore
from langchain_sandbox.snapshots.manifest import (
    FileEntry,
    Manifest,
    ManifestPart,
    SnapshotLimits,
    VariablesEntry,
    encode_part,
    is_digest,
    parse_root,
    split_paths,
)
from langchain_sandbox.snapshots.packs import (
    blob_sizes,
    build_entries,
    contents_of,
    split_small,
    stored_hashes,
)
from langchain_sandbox.snapshots.store import BlobStore, digest

logger = logging.getLogger(__name__)

RACY_WINDOW_NS = 10_000_000
"""Longest filesystem timestamp tick guarded against (a jiffy at HZ=100); see the module docs."""

STORE_RECHECK_SECONDS = 300.0
"""How long a capture trusts, without asking the store, that the blobs of the snapshot last
captured or restored in the same session are still there (``gc`` keeps the blobs of every
snapshot a checkpoint names, and keeps everything younger than its grace period, an hour by
default; this bounds what a ``gc`` run with a shorter grace, in another process, could remove
under a live session)."""

_DIR_PLACEHOLDER = ".langchain-sandbox-keep"
_HASH_IN_THREAD_BYTES = 1024 * 1024
_FETCH_CHUNK_BYTES = 4 * 1024 * 1024
# Files per read during a capture: many small files are read in batches this size, so reading
# the next batch overlaps hashing and storing this one.
_READ_BATCH_FILES = 1000
_MAX_COMMAND_CHARS = 64 * 1024
# Entries of decoded manifest parts a snapshotter keeps (about 100 bytes each).
_PARSED_PART_ENTRIES = 200_000

T = TypeVar("T")


@dataclass(frozen=True)
class SnapshotInfo:
    """What [`Snapshotter.capture`][langchain_sandbox.Snapshotter.capture] did.

    Attributes:
        ref: The snapshot's reference (sha256 of its manifest); store it in the graph record.
            Equal to ``parent`` when nothing changed since that base was captured by this
            snapshotter in this session: then nothing was written.
        revision: The revision recorded in the manifest (the base's, when ``ref`` is the base).
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
    """What [`Snapshotter.restore`][langchain_sandbox.Snapshotter.restore] did.

    Attributes:
        ref: The snapshot restored.
        revision: Its revision.
        files_written: Files written (those that differed or were missing).
        bytes_written: Their total size.
        files_unchanged: Files that already had the snapshot's content.
        paths_removed: Workspace paths removed because the snapshot does not have them.
        variables_restored: Names of the variables loaded back.
        variables_lost: Names that could not be restored (skipped at capture or failed to load).
        files_lost: Files of the snapshot that could not be restored because their blob is
            missing from the store or does not match its hash (everything else was restored).
        files_unlisted: Files of the snapshot that could not be restored because the manifest
            part listing them is missing or corrupt (so their names are unknown).
        notices: Messages for the model ("restored the workspace to revision N; ...").
        complete: Whether the workspace and the variables are all the snapshot held, and the
            snapshot all the workspace held (nothing lost, omitted or left in place): the
            notices then say only that the restore happened.
    """

    ref: str
    revision: int
    files_written: int
    bytes_written: int
    files_unchanged: int
    paths_removed: int
    variables_restored: tuple[str, ...] = ()
    variables_lost: tuple[str, ...] = ()
    files_lost: tuple[str, ...] = ()
    files_unlisted: int = 0
    notices: tuple[str, ...] = ()
    complete: bool = False


@dataclass(frozen=True)
class GcReport:
    """What [`Snapshotter.collect_garbage`][langchain_sandbox.Snapshotter.collect_garbage] deleted (or, with ``dry_run``, would delete).

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
        abandoned_writes: Leftovers of puts whose writer died (a local store's ``.tmp-*``
            files), removed (or to remove).
        abandoned_bytes: Their total size.
    """

    dry_run: bool
    live_refs: int
    missing_refs: tuple[str, ...]
    reachable_blobs: int
    kept_recent: int
    deleted_blobs: int
    deleted_bytes: int
    abandoned_writes: int = 0
    abandoned_bytes: int = 0


@dataclass(frozen=True)
class _Seen:
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
        since: _Seen | None = None,
        forget: Iterable[str] = (),
    ) -> _Seen:
        """``since`` without the paths in ``forget``, plus those of ``files`` observed far enough
        after their mtime: at ``horizon_ns`` (a capture read the contents after it; a restore
        wrote them before it and listed them after it), or at ``early[path]`` for files whose
        contents came with the listing (read during its request, after it was sent)."""
        window = _racy_window(mtime for _, mtime, _ in files.values())
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
        return seen[2]


_PartIndex = Mapping[str, tuple[tuple[tuple[str, FileEntry], ...], ManifestPart]]
"""First path of a manifest part -> (its entries, the part): what a capture may reuse."""


@dataclass(frozen=True)
class _Captured:
    """The revision of a captured snapshot and its contents besides the files."""

    revision: int
    dirs: tuple[str, ...]
    omitted: Mapping[str, str]
    variables: VariablesEntry | None
    fifos: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Known:
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
    seen: _Seen
    listing: Listing
    entries: Mapping[str, FileEntry]
    parts: _PartIndex
    confirmed_ns: int
    captured: _Captured | None = None
    head: RewindHead | None = None

    def trusted(self, base: str | None) -> bool:
        """Whether a capture against ``base`` may reuse these blobs without asking the store."""
        fresh = time.time_ns() - self.confirmed_ns < STORE_RECHECK_SECONDS * 1e9
        return fresh and base in (None, self.ref)


def _unchanged_since(
    known: _Known | None,
    trusted: bool,
    base: str | None,
    files: Mapping[str, FileEntry],
    captured: _Captured,
) -> _Captured | None:
    """What ``base`` holds, if ``known`` describes it as this snapshotter captured it, the store
    is trusted to still hold it, and ``files`` and everything else ``captured`` holds equal it."""
    if known is None or known.captured is None or not trusted or base != known.ref:
        return None
    before = known.captured
    same = (
        files == known.entries
        and captured.dirs == before.dirs
        and captured.fifos == before.fifos
        and captured.omitted == before.omitted
        and captured.variables == before.variables
    )
    return before if same else None


def _racy_window(mtimes: Iterable[int]) -> int:
    """`RACY_WINDOW_NS`, widened to the timestamp resolution the mtimes reveal (a provider
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
        store: Where blobs go; default a [`LocalDirectoryBlobStore`][langchain_sandbox.LocalDirectoryBlobStore] at its default path.
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
        self._known: weakref.WeakKeyDictionary[Session, _Known] = weakref.WeakKeyDictionary()
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
        parts, bad = await self._fetch_checked(
            {part.sha256: part.size for part in root.parts if part.sha256 not in parsed}
        )
        unread = {part.sha256: part.files for part in root.parts if part.sha256 in bad}
        manifest = root.assemble(parts, self.limits, parsed)
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

    async def referenced_blobs(self, ref: str) -> set[str]:
        """Every blob snapshot ``ref`` needs: its manifest (root and parts), the file contents
        and the variables. What garbage collection must keep for a live ref.

        Raises:
            SnapshotNotFoundError, UnsafeArchiveError: as `load_manifest`.
        """
        return {ref} | (await self.load_manifest(ref)).blob_keys()

    async def name_head(self, head: str, ref: str) -> None:
        """Record that snapshot ``ref`` captures the sandbox state named ``head``.

        A snapshot written behind a call (see `rehydration`) completes
        after the checkpoint that needs it was written; that checkpoint's record names the head,
        so a resume finds the snapshot through `find_head`. The name is one small blob under
        a key derived from the head (never a digest of its contents; ``gc`` treats it as any
        unreferenced blob once its grace period is over).
        """
        if not is_digest(ref):
            raise InvalidInputError(f"Snapshot ref {ref!r} is not a sha256 hex digest.")
        await self.store.put(_head_key(head), ref.encode())

    @staticmethod
    def head_key(head: str) -> str:
        """The store key of the blob `name_head` writes for ``head`` (``gc`` keeps it while
        a checkpoint needs it)."""
        return _head_key(head)

    async def find_head(self, head: str) -> str | None:
        """The ref `name_head` recorded for ``head``, if its manifest is in the store."""
        try:
            ref = (await self.store.get(_head_key(head))).decode("ascii", "replace")
            if not is_digest(ref):
                return None
            await self.load_manifest(ref)
        except (SnapshotNotFoundError, UnsafeArchiveError):
            return None
        return ref

    # ------------------------------------------------------------------ capture

    async def capture(
        self, session: Session, *, base: str | None = None, revision: int = 0
    ) -> SnapshotInfo:
        """Snapshot ``session``'s workspace (and variables) and return its ref.

        Args:
            session: The live session.
            base: Ref of an earlier snapshot of this workspace, normally the one in the graph
                record; files unchanged since it are not read again. A base missing from the
                store, or corrupt, only makes the capture slower (and is not named as parent).
            revision: The sandbox revision this snapshot captures.

        Raises:
            InvalidInputError: the workspace exceeds the limits (too many files or bytes).
        """
        if base is not None and not is_digest(base):
            raise InvalidInputError(f"Snapshot ref {base!r} is not a sha256 hex digest.")
        max_file = min(self.limits.max_file_bytes, session.spec.limits.max_file_bytes)
        known = self._known.get(session)
        before = known.listing if known is not None else EMPTY_LISTING
        # The variables are dumped by the sandbox's interpreter while the host lists and reads
        # the files (or in the listing's own request, where the provider can), and blobs are
        # stored while the next batch is read (one batch in flight bounds memory).
        with_listing = session.lists_variables and session.capabilities.variables
        variables_task: asyncio.Future[tuple[VariablesEntry | None, bytes, list[str]]] | None = (
            None
            if with_listing
            else asyncio.ensure_future(self._capture_variables(session, max_file))
        )
        puts: list[asyncio.Future[tuple[int, int]]] = []
        try:
            listed_at_ns = time.time_ns()
            # The provider compares the workspace with the last listing where the files are,
            # and may send the changed files' contents (and the variables) with its answer.
            changes = await session.list_changes(
                before.entries,
                max_bytes=self.limits.batch_bytes,
                variables_max_bytes=max_file if with_listing else None,
                since=before.cursor,
            )
            if variables_task is None:
                variables_task = asyncio.ensure_future(
                    self._capture_variables(session, max_file, changes.variables)
                )
            listing, reshaped = before.apply(changes, max_file)
            self._check_capacity(listing)
            _check_quota(listing.file_bytes, session.spec.limits.workspace_bytes)
            trusted = known is not None and known.trusted(base)
            # A base that cannot be read (gone, or corrupt) is dropped: this capture then reads
            # what it does not know and does not name it as its parent, so one bad snapshot
            # cannot poison the next ones.
            base_manifest = None
            if base is not None and (known is None or base != known.ref):
                base_manifest = await self._readable(base)
                if base_manifest is None:
                    base = None
            stale = {info.path for info in changes.changed}.union(changes.gone)
            hashes, to_read = await self._known_hashes(
                known, trusted, base_manifest, listing, stale
            )
            bundled = {
                info.path: changes.contents[info.path]
                for info in to_read
                if info.path in changes.contents
            }
            # Bundled contents were read during the listing's request: their horizon is when it
            # was sent, and nothing waits for them (a racy one is simply sent again next time).
            rest = [info for info in to_read if info.path not in bundled]
            horizon_ns = await _wait_out_racy_window(rest, listed_at_ns)
            sizes = {path: listing.files[path].size for path in hashes}
            omitted = dict(listing.omitted)
            bytes_read = 0
            packed: dict[str, bytes] = {}
            async for contents in _contents(
                session, bundled, rest, self.limits.batch_bytes, omitted
            ):
                bytes_read += sum(len(data) for data in contents.values())
                for path, data in contents.items():
                    if len(data) > max_file:
                        omitted[path] = f"{len(data)} bytes, over the {max_file}-byte file limit"
                        continue
                    sizes[path] = len(data)
                digests = await _digest_all({p: d for p, d in contents.items() if p not in omitted})
                hashes.update(digests)
                small, blobs = split_small(digests, contents)
                packed.update(small)
                if puts:
                    await puts[-1]
                puts.append(asyncio.ensure_future(self._put_new(blobs, verify_stored=True)))

            rebuilt = stale | hashes.keys() | {info.path for info in to_read}
            previous = known.entries if known is not None else {}
            files, same_paths = build_entries(
                previous, rebuilt, hashes, sizes, listing, packed, base_manifest
            )
            rebuilt |= mark_links(files, listing.files, rebuilt)
            unread = sum(1 for info in to_read if info.path not in hashes)
            if known is not None and len(files) != len(listing.files) - unread:
                # The session's knowledge no longer adds up (a bug, never expected): start over
                # from a full listing rather than write a snapshot that misses a file.
                logger.error("snapshot knowledge of a session was inconsistent; capturing again")
                self._known.pop(session, None)
                await _cancel([variables_task, *puts])
                return await self.capture(session, base=base, revision=revision)
            # Parts are reused only while the store is trusted to hold them (see _Known).
            reusable = known.parts if known and trusted else {}
            parts, part_blobs = _encode_parts(files, reusable, same_paths, rebuilt)
            variables, variables_blob, notices = await variables_task
            omitted = dict(sorted(omitted.items()))
            empty_dirs = (
                known.captured.dirs
                if known is not None
                and known.captured is not None
                and same_paths
                and not reshaped
                and omitted == known.captured.omitted
                else tuple(sorted(_empty_dirs(listing.dirs, [*files, *listing.fifos], omitted)))
            )
            manifest = Manifest(
                revision=revision,
                created_at=(listed_at_ns if bundled else horizon_ns) / 1e9,
                parent=base,
                files=files,
                dirs=empty_dirs,
                omitted=omitted,
                variables=variables,
                fifos=tuple(sorted(listing.fifos)),
            )
            captured = _Captured(
                revision, manifest.dirs, manifest.omitted, variables, manifest.fifos
            )
            if variables is not None:
                # The dump is in hand, as a changed file's content is: a stored copy damaged
                # since it was written is found (one read of what was just dumped) and
                # rewritten. The dump this snapshotter itself stored or checked last time is
                # trusted like every other blob it reuses, until the store's trust is due.
                puts.append(
                    asyncio.ensure_future(
                        self._put_new(
                            {variables.sha256: variables_blob},
                            verify_stored=not (
                                trusted
                                and known is not None
                                and known.captured is not None
                                and known.captured.variables == variables
                            ),
                        )
                    )
                )
            unchanged = _unchanged_since(known, trusted, base, files, captured)
            if unchanged is not None and base is not None:
                # Nothing changed since the base this snapshotter captured, and the store is
                # still trusted to hold it as written: the base is this state's snapshot.
                # Writing a copy that differs only in revision, time and parent would cost a put
                # (two fsyncs on a durable local store) per call that changes nothing. (Once the
                # trust is due, a new root is written and every part checked.)
                ref, captured = base, unchanged
            else:
                encoded = manifest.encode_root([part for _, part in parts])
                ref = digest(encoded)
                final = {**part_blobs, ref: encoded}
                # The manifest may land before the file blobs: nothing names it until this
                # returns. When the store is not trusted (see _Known) every part was encoded
                # again, and a stored copy damaged since is found and rewritten here.
                puts.append(asyncio.ensure_future(self._put_new(final, verify_stored=not trusted)))
            written = await asyncio.gather(*puts)
        except BaseException:
            await _cancel([variables_task, *puts])
            raise
        bytes_written = sum(count for count, _ in written)
        blobs_written = sum(blobs for _, blobs in written)
        self._remember_parts(session, parts)
        self._known[session] = _Known(
            ref=ref,
            seen=_Seen.observe(
                {
                    path: (listing.files[path].size, listing.files[path].mtime_ns, entry.sha256)
                    for path in rebuilt
                    if (entry := files.get(path)) is not None
                },
                horizon_ns,
                dict.fromkeys(bundled, listed_at_ns),
                since=known.seen if known is not None else None,
                forget=rebuilt,
            ),
            listing=listing,
            entries=files,
            parts={chunk[0][0]: (chunk, part) for chunk, part in parts},
            confirmed_ns=known.confirmed_ns if known is not None and trusted else listed_at_ns,
            captured=captured,
        )
        if omitted:
            notices.append(
                f"{len(omitted)} workspace path(s) were not captured: {_describe(omitted)}."
            )
        return SnapshotInfo(
            ref=ref,
            revision=captured.revision,
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
        self,
        known: _Known | None,
        trusted: bool,
        base: Manifest | None,
        listing: Listing,
        stale: set[str],
    ) -> tuple[dict[str, str], list[FileInfo]]:
        """The hashes known without reading of the files whose entries a capture must rebuild,
        and the files it must read; every other file of ``listing`` keeps its entry in
        ``known`` as it is.

        A file listed as before keeps its trusted hash from this session's last capture or
        restore; a changed one (or one not trusted, or with no hash) gets it from that
        knowledge or from ``base`` if its size and mtime still match, or is read. A blob found
        corrupt is never reused: the file is read and its blob rewritten. When not ``trusted``,
        the store is asked once, batched, whether it still holds every reused blob (one gc'd
        with an old snapshot is written again from the file).
        """
        corrupt = self._corrupt
        seen = known.seen.files if known is not None else {}
        # The files without a reusable hash: those not trusted (or not hashed) before, and the
        # changed ones. The rest (nearly all, in a big workspace) are not looked at one by one.
        files = listing.files
        need = (files.keys() - seen.keys()).union(path for path in stale if path in files)
        if corrupt:
            need.update(p for p, (_, _, sha) in seen.items() if sha in corrupt and p in files)
        views = [known.seen] if known is not None else []
        if base is not None:
            views.append(_Seen.of_manifest(base))
        hashes: dict[str, str] = {}
        for path in need:
            for view in views:
                found = view.hash_of(files[path])
                if found is not None and found not in corrupt:
                    hashes[path] = found
                    break
        if not trusted:
            reused = {path: seen[path][2] for path in files if path not in need}
            sources = [known.entries] if known is not None else []
            sources += [base.files] if base is not None else []
            absent = await self.store.missing(stored_hashes({**reused, **hashes}, *sources))
            need.update(path for path, sha in reused.items() if sha in absent)
            hashes = {path: sha for path, sha in hashes.items() if sha not in absent}
        return hashes, [files[path] for path in sorted(need - hashes.keys())]

    async def _readable(self, ref: str) -> Manifest | None:
        """The manifest of ``ref``, or ``None`` if the store lacks it or it is corrupt."""
        try:
            return await self.load_manifest(ref)
        except (SnapshotNotFoundError, UnsafeArchiveError):
            return None

    def _check_capacity(self, listing: Listing) -> None:
        count = len(listing.files) + len(listing.dirs)
        total = listing.file_bytes
        if count > self.limits.max_files or len(listing.omitted) > self.limits.max_files:
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
        self, session: Session, max_bytes: int, dump: VariablesDump | None = None
    ) -> tuple[VariablesEntry | None, bytes, list[str]]:
        """The variables entry and blob of ``session`` (from ``dump`` when the listing brought
        one), and the notices for the model."""
        if not session.capabilities.variables:
            return None, b"", []
        # The sandbox leaves out what cannot be pickled, and the largest variables when the dump
        # would not fit a blob, and names them: the files are saved whatever the variables hold.
        if dump is None:
            dump = await session.dump_variables(max_bytes=max_bytes)
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
        notice = dump.notice()
        return entry, dump.data, [notice] if notice is not None else []

    async def _put_new(self, blobs: Mapping[str, bytes], *, verify_stored: bool) -> tuple[int, int]:
        """Store the blobs the store lacks, and replace those it holds corrupt; return
        (bytes, count) written.

        A blob already found corrupt is rewritten from the content in hand. With
        ``verify_stored`` (file contents just read: a file rewritten with the same bytes), every
        blob the store already has is fetched and checked against its hash first, which costs
        one read of what was just read, so a blob damaged since it was written is rewritten
        instead of being referred to again.
        """
        if not blobs:
            return 0, 0
        absent = await self.store.missing(blobs)
        new = {key: blobs[key] for key in absent}
        if new:
            await self.store.put_many(new)
        stored = [key for key in blobs if key not in absent]
        bad = {key for key in stored if key in self._corrupt}
        if verify_stored:
            unknown = {key: len(blobs[key]) for key in stored if key not in bad}
            bad |= (await self._fetch_checked(unknown))[1]
        for key in sorted(bad):
            await self.store.replace(key, blobs[key])
            self._corrupt.discard(key)
        written = [*new.values(), *(blobs[key] for key in bad)]
        return sum(len(data) for data in written), len(written)

    # ------------------------------------------------------------------ restore

    async def restore(self, session: Session, ref: str) -> RestoreReport:
        """Make ``session``'s workspace and variables equal to snapshot ``ref``.

        Nothing is written until the manifest has been validated and every blob the restore needs
        has been found in the store (and, up to ``limits.restore_memory_bytes``, fetched and
        verified against its hash). Paths go through the session's own ``write_files`` and
        ``remove_files``, which resolve them inside the workspace.

        A file whose blob is missing or does not match its hash is not written (and not left
        with other content): it is named in ``files_lost`` and in a notice, and everything else
        is restored. A damaged variables blob costs the variables the same way, and a damaged
        part of a format 2 manifest the files it lists (counted in ``files_unlisted``).

        Raises:
            InvalidInputError: ``ref`` is not a sha256 hex digest.
            SnapshotNotFoundError: the snapshot (its manifest) is not in the store.
            UnsafeArchiveError: the manifest is malformed or breaks a path rule or a limit; the
                session is left untouched. Also a blob found corrupt only during the second pass
                of a restore larger than the memory budget (possible only if the store changes
                during the restore).
        """
        known = self._known.get(session)
        manifest, unread = await self._load_readable(ref, session)
        max_file = min(self.limits.max_file_bytes, session.spec.limits.max_file_bytes)
        # The workspace as this session's last capture or restore left it, completed with what
        # changed since: a rewind lists (and plans for) what changed, not the whole workspace.
        before = known.listing if known is not None else EMPTY_LISTING
        current, touched = await relist(session, before, max_file)
        # A rewind from a head the session knows plans for the paths that can differ only.
        scope = self._rewind_scope(known, manifest, unread, current, touched)
        plan = manifest if scope is None else scope.manifest
        listing = current.entries
        if scope is not None:
            listing = {path: listing[path] for path in scope.paths if path in listing}
        views = [_Seen.of_manifest(plan)]
        if known is not None:
            views.insert(0, known.seen)

        def unchanged(info: FileInfo, entry: FileEntry) -> bool:
            return any(view.hash_of(info) == entry.sha256 for view in views)

        removals, writes, make_dirs = _plan_restore(plan, listing, unchanged)
        # A name the sandbox allows but the session API refuses (a backslash, say) cannot be
        # removed through it; it is left in place and reported rather than failing the restore.
        stuck = {path: "could not be removed" for path in removals if not portable(path)}
        removals = [path for path in removals if path not in stuck]
        needed = blob_sizes(manifest, writes)
        if manifest.variables is not None:
            needed[manifest.variables.sha256] = manifest.variables.size
        # Every blob is looked up, not only those to write: a capture after this restore reuses
        # the others without asking the store (see _Known). Those the store was last seen to
        # hold for this session, recently enough to trust (a rewind's unchanged files), are not
        # asked about again; the knowledge then dates from that check.
        checked_ns = time.time_ns()
        if scope is not None and known is not None:
            gone = await self.store.missing(unconfirmed(scope, known.entries))
            checked_ns = known.confirmed_ns
        else:
            confirmed = _confirmed_blobs(known) - self._corrupt
            gone = await self.store.missing(manifest.blob_keys() - confirmed)
            if confirmed and known is not None:
                checked_ns = known.confirmed_ns
        # A blob that is missing or does not match its hash costs its own file (or the
        # variables), never the rest of the workspace: everything else is restored, and the
        # files that could not be are named.
        in_memory = sum(needed.values()) <= self.limits.restore_memory_bytes
        blobs: dict[str, bytes] = {}
        bad = (gone & needed.keys()) | unread.keys()
        present = {key: size for key, size in needed.items() if key not in gone}
        if in_memory:
            blobs, corrupt = await self._fetch_checked(present)
            bad |= corrupt
        else:
            for batch in _batches(list(present.items()), _second, self.limits.batch_bytes):
                bad |= (await self._fetch_checked(dict(batch)))[1]
        lost_files = {path for path in writes if blob_sizes(manifest, [path]).keys() & bad}
        writes = [path for path in writes if path not in lost_files]
        # What the session holds at a lost path is not the snapshot's content: it goes too.
        doomed = set(removals)
        existing = {path for path, info in listing.items() if info.kind == "file"}
        removals += sorted(
            path for path in lost_files if path in existing and not _has_ancestor_in(path, doomed)
        )

        if removals:
            await session.remove_files(removals)
        keeps = session.keeps_file_metadata
        # Hard links are made once their targets are written; a provider that makes none
        # writes them as copies, and so does one whose link fails.
        links = links_to_make(manifest, writes) if keeps else {}
        untimed: list[str] = []

        async def write(paths: Sequence[str]) -> int:
            written = 0
            for batch in _batches(
                [(path, manifest.files[path].size) for path in paths],
                _second,
                self.limits.batch_bytes,
            ):
                paths = [path for path, _ in batch]
                wanted = blob_sizes(manifest, paths)
                contents = blobs if in_memory else await self._fetch_verified(wanted)
                files = contents_of(manifest, paths, contents)
                if keeps:
                    untimed.extend(
                        await session.write_restored(files, metadata_of(manifest, files))
                    )
                else:
                    await session.write_files(files)
                written += sum(size for _, size in batch)
            return written

        bytes_written = await write([path for path in writes if path not in links])
        unlinked = await session.link_files(links) if links else []
        bytes_written += await write(unlinked)
        make_fifos = [path for path in make_dirs if path in manifest.fifos]
        make_dirs = [path for path in make_dirs if path not in manifest.fifos]
        if make_dirs:
            placeholders = [f"{path}/{_DIR_PLACEHOLDER}" for path in make_dirs]
            await session.write_files(dict.fromkeys(placeholders, b""))
            await session.remove_files(placeholders)
        unmade = await session.make_fifos(make_fifos) if make_fifos else []

        restored_files = [e for p, e in manifest.files.items() if p not in lost_files]
        unlisted = sum(unread.values())
        notices = [
            f"Restored the workspace to revision {manifest.revision} ({len(restored_files)} "
            f"of {len(manifest.files) + unlisted} files, "
            f"{_human_bytes(sum(e.size for e in restored_files))})."
            if lost_files or unlisted
            else f"Restored the workspace to revision {manifest.revision} "
            f"({len(manifest.files)} files, {_human_bytes(manifest.total_bytes)})."
        ]
        if writes or make_dirs or make_fifos:
            # Let the files just written leave the racy window, so they count as known below.
            await asyncio.sleep(RACY_WINDOW_NS / 1e9)
        horizon_ns = time.time_ns()
        now = await listed_after(
            session,
            current,
            None if make_dirs or make_fifos else scope,
            [*removals, *writes],
            max_file,
        )
        mode_notices = await _restore_modes(session, plan, now.entries)
        notices += mode_notices
        notices += _changed_modes(plan)
        notices += layout_notices(session, manifest, writes, now.files, untimed, unlinked)
        observed = {
            path: (info.size, info.mtime_ns, entry.sha256)
            for path, entry in plan.files.items()
            if (info := now.files.get(path)) is not None
            and info.size == entry.size
            and entry.sha256 not in gone
            and entry.sha256 not in bad
        }
        seen = _Seen.observe(
            observed,
            horizon_ns,
            since=None if scope is None or known is None else known.seen,
            forget=() if scope is None else scope.paths,
        )
        # The entries of the files as they are now (a restore gives written files new mtimes);
        # the others are read by the next capture (see _Known).
        entries = {
            path: FileEntry(
                trusted[2],
                trusted[0],
                now.files[path].mode & 0o7777,
                trusted[1],
                sparse=now.files[path].sparse,
                data=plan.files[path].data if plan.files[path].sha256 == trusted[2] else None,
            )
            for path in observed
            if (trusted := seen.files.get(path)) is not None
        }
        mark_links(entries, now.files, entries)
        head = None
        if scope is not None and known is not None:
            entries = rewound_entries(known.entries, scope, entries)
            parts = rewound_parts(entries, bool(known.parts), scope)
            if not mode_notices and not unlinked:
                untrusted = frozenset(path for path in plan.files if path not in entries)
                unsafe = frozenset(
                    path for path, e in plan.files.items() if e.mode & 0o7777 != safe_mode(e.mode)
                )
                head = RewindHead(ref, scope.chunks, untrusted, unsafe)
        else:
            entries = {path: entries[path] for path in sorted(entries)}
            # A manifest missing an unreadable part's files cannot be indexed by part.
            parts = {} if unread else part_index(manifest, self._parsed.get(session, {}))
            if any(
                entries.get(path) != entry for chunk, _ in parts.values() for path, entry in chunk
            ):
                parts = {}
        self._known[session] = _Known(
            ref=ref,
            seen=seen,
            listing=now,
            entries=entries,
            parts=parts,
            confirmed_ns=checked_ns,
            head=head,
        )
        if unmade:
            notices.append(
                f"{len(unmade)} FIFO(s) (named pipes) could not be made again"
                + ("" if session.keeps_file_metadata else " (this provider makes none)")
                + f": {describe_paths(sorted(unmade))}."
            )
        if lost_files:
            notices.append(
                f"{len(lost_files)} file(s) could not be restored because their stored copy is "
                f"missing or corrupt: {describe_paths(sorted(lost_files))}. Everything else was "
                "restored; re-create those files if you need them."
            )
        if unlisted:
            notices.append(
                f"{unlisted} file(s) could not be restored because the part of the snapshot's "
                "manifest that lists them is missing or corrupt, so their names are unknown. "
                "Everything else was restored; re-create those files if you need them."
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
        restored, lost = await self._restore_variables(session, manifest, blobs, bad, notices)
        # Every notice after the first (the summary) is a caveat: something lost or left.
        complete = len(notices) == 1
        return RestoreReport(
            ref=ref,
            revision=manifest.revision,
            files_written=len(writes),
            bytes_written=bytes_written,
            files_unchanged=len(manifest.files) - len(writes) - len(lost_files),
            paths_removed=len(removals),
            variables_restored=restored,
            variables_lost=lost,
            files_lost=tuple(sorted(lost_files)),
            files_unlisted=unlisted,
            notices=tuple(notices),
            complete=complete,
        )

    def _rewind_scope(
        self,
        known: _Known | None,
        manifest: Manifest,
        unread: Mapping[str, int],
        current: Listing,
        touched: AbstractSet[str],
    ) -> RewindScope | None:
        """The paths a restore into ``session`` must plan for, when its knowledge can be
        trusted to describe the rest (see ``_rewind_plan.py``); ``None`` for a full restore."""
        if known is None or unread or self._corrupt or not known.trusted(None):
            return None
        head = head_of(known.ref, known.parts, known.head)
        if head is None:
            return None
        return scope_of(head, known.entries, known.seen.files.keys(), manifest, current, touched)

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

        chunks = list(_batches(list(sizes.items()), _second, _FETCH_CHUNK_BYTES))
        fetched = await asyncio.gather(*(fetch(chunk) for chunk in chunks))
        good = {key: data for blobs in fetched for key, data in blobs.items()}
        corrupt = {key for key in sizes if key not in good}
        if corrupt:
            # The store is damaged: what any session was believed to reuse is checked again at
            # its next capture, and these blobs are never reused.
            self._known.clear()
            self._corrupt |= corrupt
        return good, corrupt

    async def _restore_variables(
        self,
        session: Session,
        manifest: Manifest,
        blobs: Mapping[str, bytes],
        bad: set[str],
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
        if variables.sha256 in bad:
            lost = tuple(sorted({*variables.saved, *variables.skipped}))
            notices.append(
                "Python variables were not restored: their stored copy is missing or corrupt. "
                f"Re-create {', '.join(lost) or 'them'} before using them."
            )
            return (), lost
        data = blobs.get(variables.sha256)
        if data is None:
            data = (await self._fetch_verified({variables.sha256: variables.size}))[
                variables.sha256
            ]
        failed = await session.load_variables(data)
        lost = tuple(sorted({*variables.skipped, *failed}))
        restored = tuple(name for name in variables.saved if name not in failed)
        if variables.skipped:
            notices.append(
                f"Variables {variable_names(list(variables.skipped))} could not be restored: "
                "they were not "
                "saved with the snapshot (they could not be pickled, or were too large); "
                "re-create them before using them."
            )
        if failed:
            described = variable_reasons(dict(sorted(failed.items())))
            notices.append(
                f"Variables could not be restored here: {described}; re-create them before "
                "using them."
            )
        return restored, lost

    # ----------------------------------------------------------------------- gc

    async def collect_garbage(
        self,
        live_refs: Iterable[str],
        *,
        keep: Iterable[str] = (),
        dry_run: bool = False,
        grace_seconds: float = 3600.0,
    ) -> GcReport:
        """Delete the blobs that no live snapshot needs.

        Args:
            live_refs: Refs of every snapshot still referenced (by any checkpoint of any thread).
                A snapshot's parent is not kept for it: it is not needed to restore it.
            keep: Other blobs still referenced, kept as they are (records filed next to the
                snapshots, e.g. by the Deep Agents backend).
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
        reachable: set[str] = set(keep)
        missing: list[str] = []
        for ref in roots:
            try:
                # A damaged part costs its own files at a restore, not the rest: keep the rest.
                manifest, _ = await self._load_readable(ref)
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
            # A live session may have been reusing one of them.
            self._known.clear()
        abandoned, abandoned_bytes = await self.store.remove_abandoned_writes(dry_run=dry_run)
        return GcReport(
            dry_run=dry_run,
            live_refs=len(roots),
            missing_refs=tuple(missing),
            reachable_blobs=sum(1 for info in blobs if info.key in reachable),
            kept_recent=sum(1 for info in blobs if info.key in protected - reachable),
            deleted_blobs=len(garbage),
            deleted_bytes=sum(info.size for info in garbage),
            abandoned_writes=abandoned,
            abandoned_bytes=abandoned_bytes,
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
            return await self.load_manifest(key)
        except (UnsafeArchiveError, SnapshotNotFoundError):
            return None


def _head_key(head: str) -> str:
    return digest(b"langchain-sandbox head\0" + head.encode("utf-8", "surrogateescape"))


def _verify(key: str, data: bytes, size: int | None) -> None:
    if (size is not None and len(data) != size) or digest(data) != key:
        raise _corrupt_blob(key)


def _corrupt_blob(key: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"Snapshot blob {key} does not match its hash; the snapshot store is corrupt or was "
        "tampered with. Nothing was restored from it."
    )


def _check_quota(total: int, quota: int | None) -> None:
    """Refuse to store more than the workspace may hold (``total``: the listed files' sizes):
    sparse files count at their apparent size (that is what reading them gives), so a few holes
    cannot fill the store."""
    if quota is not None and total > quota:
        raise InvalidInputError(
            f"The workspace holds {total} bytes of files (sparse files at their apparent size), "
            f"over its quota of {quota} (Limits.workspace_bytes); no snapshot was taken. "
            "Delete files you do not need."
        )


def _encode_parts(
    files: Mapping[str, FileEntry], previous: _PartIndex, same_paths: bool, rebuilt: set[str]
) -> tuple[list[tuple[tuple[tuple[str, FileEntry], ...], ManifestPart]], dict[str, bytes]]:
    """The manifest parts of ``files`` (see `split_paths`), and the blobs of those not in
    ``previous``: only a part holding a changed entry is encoded again. With ``same_paths``
    (no file added or removed since ``previous``) its cuts are kept, and only the parts holding
    a ``rebuilt`` path are looked at."""
    # Per part: the paths to encode it from (None: keep the previous part as it is), and the
    # previous part that began with the same path.
    _Cached = tuple[tuple[tuple[str, FileEntry], ...], ManifestPart]
    plan: list[tuple[Sequence[str] | None, _Cached | None]]
    if same_paths and previous:
        starts = list(previous)
        dirty = {starts[bisect.bisect_right(starts, path) - 1] for path in rebuilt if path in files}
        plan = [
            ([path for path, _ in cached[0]] if start in dirty else None, cached)
            for start, cached in previous.items()
        ]
    else:
        plan = [(run, previous.get(run[0])) for run in split_paths(list(files))]
    parts: list[_Cached] = []
    blobs: dict[str, bytes] = {}
    for run, cached in plan:
        chunk = () if run is None else tuple((path, files[path]) for path in run)
        if cached is not None and (run is None or cached[0] == chunk):
            parts.append(cached)
            continue
        data = encode_part(chunk)
        part = ManifestPart(sha256=digest(data), size=len(data), files=len(chunk))
        blobs[part.sha256] = data
        parts.append((chunk, part))
    return parts, blobs


def _empty_dirs(
    dirs: AbstractSet[str], files: Iterable[str], omitted: Mapping[str, str]
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
    `RACY_WINDOW_NS`, whatever the sandbox's clock says; with coarse timestamps, not at
    all: those files are read again next time instead); return the horizon of the reads."""
    if to_read and _racy_window(info.mtime_ns for info in to_read) == RACY_WINDOW_NS:
        newest = max(info.mtime_ns for info in to_read)
        wait_ns = min(newest + RACY_WINDOW_NS - time.time_ns(), RACY_WINDOW_NS)
        if wait_ns > 0:
            await asyncio.sleep(wait_ns / 1e9)
    return max(time.time_ns(), listed_at_ns)


async def _cancel(tasks: Iterable[asyncio.Future[Any] | None]) -> None:
    """Cancel the capture's tasks still running and wait for them to end."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def _second(pair: tuple[str, int]) -> int:
    return pair[1]


def _batches(
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


async def _contents(
    session: Session,
    bundled: dict[str, bytes],
    rest: Sequence[FileInfo],
    batch_bytes: int,
    omitted: dict[str, str],
) -> AsyncIterator[dict[str, bytes]]:
    """The contents to capture, in batches: those that came with the listing, then ``rest``
    read in batches of at most ``batch_bytes`` (a file that cannot be read goes to ``omitted``)."""
    if bundled:
        yield bundled
    for batch in _batches(rest, lambda info: info.size, batch_bytes, _READ_BATCH_FILES):
        yield await _read_batch(session, [info.path for info in batch], omitted)


async def _read_batch(
    session: Session, paths: list[str], omitted: dict[str, str]
) -> dict[str, bytes]:
    """Read ``paths``; a file that vanished or cannot be read is noted in ``omitted``."""
    try:
        return await session.read_files(paths)
    except InvalidInputError:
        if len(paths) == 1:
            omitted[paths[0]] = await _unreadable(session, paths[0])
            return {}
    contents: dict[str, bytes] = {}
    for path in paths:
        contents.update(await _read_batch(session, [path], omitted))
    return contents


async def _unreadable(session: Session, path: str) -> str:
    """Why a listed file could not be read, as far as the session can tell: whether it is still
    there (a FIFO, socket or device some providers list as a file, or no permission) or gone."""
    parent = path.rpartition("/")[0] or "."
    try:
        still_there = any(info.path == path for info in await session.list_files(parent))
    except InvalidInputError:
        still_there = False
    if still_there:
        return "could not be read: not a regular file (a FIFO, socket or device) or not readable"
    return "vanished during the capture"


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


def _confirmed_blobs(known: _Known | None) -> set[str]:
    """The blobs the store was last seen to hold for a session, while that is still trusted
    (see :meth:`_Known.trusted`): its snapshot, the manifest parts and file contents known."""
    if known is None or not known.trusted(None):
        return set()
    blobs = {known.ref, *(entry.sha256 for entry in known.entries.values())}
    blobs.update(part.sha256 for _, part in known.parts.values())
    if known.captured is not None and known.captured.variables is not None:
        blobs.add(known.captured.variables.sha256)
    return blobs


def _plan_restore(
    manifest: Manifest,
    listing: Mapping[str, FileInfo],
    unchanged: Callable[[FileInfo, FileEntry], bool],
) -> tuple[list[str], list[str], list[str]]:
    """What to remove, which files to write and which empty directories to create.

    Everything in the workspace that the snapshot does not have is removed, and so is anything of
    the wrong kind (a directory where the snapshot has a file, a file where it has a directory,
    any symlink), so no write can land on or through something the sandbox left there.
    """
    wanted_dirs = set(manifest.dirs)
    for path in [*manifest.files, *manifest.dirs, *manifest.fifos]:
        parent = path.rpartition("/")[0]
        while parent and parent not in wanted_dirs:
            wanted_dirs.add(parent)
            parent = parent.rpartition("/")[0]
    current = listing
    wanted_fifos = set(manifest.fifos)
    doomed: set[str] = set()
    for path, info in current.items():
        keep = (
            (info.kind == "dir" and path in wanted_dirs)
            or (info.kind == "file" and path in manifest.files)
            or (info.kind == "fifo" and path in wanted_fifos)
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
    written = set(writes)
    # A hard link whose target is written, or that is not a link of its target now, is made
    # again (a provider that lists no inodes lists 0: its copies are left as they are).
    writes += [
        path
        for path, entry in manifest.files.items()
        if path not in written
        and entry.link is not None
        and (entry.link in written or inode_of(current, path) != inode_of(current, entry.link))
    ]
    # A file written in place would change every other name of its inode: it is replaced.
    doomed_links = {
        path for path in writes if path not in doomed and getattr(current.get(path), "links", 1) > 1
    }
    removals += sorted(path for path in doomed_links if not _has_ancestor_in(path, doomed))
    make_dirs = [
        path
        for path in sorted(manifest.dirs)
        if path in doomed or path not in current or _has_ancestor_in(path, doomed)
    ]
    make_dirs += [
        path
        for path in sorted(manifest.fifos)
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


def _changed_modes(manifest: Manifest) -> list[str]:
    """A notice naming the files that come back with another mode than they were captured
    with (`safe_mode`: no setuid/setgid/sticky bit, no group or other write, always
    owner read-write, so a read-only file comes back writable)."""
    changed = [
        f"{path} ({entry.mode & 0o7777:o} -> {safe_mode(entry.mode):o})"
        for path, entry in manifest.files.items()
        if entry.mode & 0o7777 != safe_mode(entry.mode)
    ]
    if not changed:
        return []
    return [
        f"{len(changed)} file(s) came back with another mode (setuid/setgid/sticky bits and "
        f"group/other write are dropped, read-only files are writable again): "
        f"{describe_paths(changed)}."
    ]


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
    return describe_paths([f"{path} ({reason})" for path, reason in paths.items()])


def _human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = [
    "RACY_WINDOW_NS",
    "STORE_RECHECK_SECONDS",
    "GcReport",
    "RestoreReport",
    "SnapshotInfo",
    "Snapshotter",
    "safe_mode",
]
