"""Capturing a session's workspace and variables: the part of the
[`Snapshotter`][langchain_sandbox.Snapshotter] that writes snapshots. It asks the session what
changed since the listing it knows (``list_changes``, which may bring the changed files and the
variables with its answer), reads only files whose ``(size, mtime_ns)`` no trusted hash covers
(``_reading.py``), stores only blobs the store lacks, and re-encodes only the manifest parts that
hold a changed entry; the variables are dumped while the files are read, and blobs are stored while
the next batch is read. A capture that finds nothing changed since the base it captured returns
that base. What it learns becomes the session's knowledge (``_knowledge.py``) for the next capture
or restore.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from langchain_sandbox.errors import InvalidInputError, SnapshotNotFoundError, UnsafeArchiveError
from langchain_sandbox.providers.base import FileInfo, Session, VariablesDump
from langchain_sandbox.snapshots._knowledge import (
    Captured,
    Known,
    PartIndex,
    Seen,
    SnapshotKnowledge,
)
from langchain_sandbox.snapshots._layout import describe_reasons, mark_links
from langchain_sandbox.snapshots._listing import EMPTY as EMPTY_LISTING
from langchain_sandbox.snapshots._listing import Listing
from langchain_sandbox.snapshots._reading import digest_all, read_contents, wait_out_racy_window
from langchain_sandbox.snapshots.manifest import (
    FileEntry,
    Manifest,
    ManifestPart,
    VariablesEntry,
    encode_part,
    is_digest,
    split_paths,
)
from langchain_sandbox.snapshots.packs import build_entries, split_small, stored_hashes
from langchain_sandbox.snapshots.reports import SnapshotInfo
from langchain_sandbox.snapshots.store import digest

logger = logging.getLogger(__name__)


def _unchanged_since(
    known: Known | None,
    trusted: bool,
    base: str | None,
    files: Mapping[str, FileEntry],
    captured: Captured,
) -> Captured | None:
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


class SnapshotCapture(SnapshotKnowledge):
    """[`Snapshotter.capture`][langchain_sandbox.Snapshotter.capture] and what only it needs; a
    base of the `Snapshotter`."""

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
            horizon_ns = await wait_out_racy_window(rest, listed_at_ns)
            sizes = {path: listing.files[path].size for path in hashes}
            omitted = dict(listing.omitted)
            bytes_read = 0
            packed: dict[str, bytes] = {}
            async for contents in read_contents(
                session, bundled, rest, self.limits.batch_bytes, omitted
            ):
                bytes_read += sum(len(data) for data in contents.values())
                for path, data in contents.items():
                    if len(data) > max_file:
                        omitted[path] = f"{len(data)} bytes, over the {max_file}-byte file limit"
                        continue
                    sizes[path] = len(data)
                digests = await digest_all({p: d for p, d in contents.items() if p not in omitted})
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
            # Parts are reused only while the store is trusted to hold them (see Known).
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
            captured = Captured(
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
                # returns. When the store is not trusted (see Known) every part was encoded
                # again, and a stored copy damaged since is found and rewritten here.
                puts.append(asyncio.ensure_future(self._put_new(final, verify_stored=not trusted)))
            written = await asyncio.gather(*puts)
        except BaseException:
            await _cancel([variables_task, *puts])
            raise
        bytes_written = sum(count for count, _ in written)
        blobs_written = sum(blobs for _, blobs in written)
        self._remember_parts(session, parts)
        self._known[session] = Known(
            ref=ref,
            seen=Seen.observe(
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
                f"{len(omitted)} workspace path(s) were not captured: {describe_reasons(omitted)}."
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
        known: Known | None,
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
            views.append(Seen.of_manifest(base))
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
    files: Mapping[str, FileEntry], previous: PartIndex, same_paths: bool, rebuilt: set[str]
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


async def _cancel(tasks: Iterable[asyncio.Future[Any] | None]) -> None:
    """Cancel the capture's tasks still running and wait for them to end."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
