"""Restoring a snapshot into a session: the part of the
[`Snapshotter`][langchain_sandbox.Snapshotter] that makes a workspace and its variables equal to a
snapshot. Nothing is written before the manifest and every blob the restore needs have been
found and checked against their hashes; a blob that is missing or damaged costs its own file (or
the variables), named in the report, never the rest. Into a session this snapshotter knows (a
rewind), the workspace is compared through the session's change listing and only the paths that
can differ are planned for (``_rewind_plan.py``); modes, times, hard links and named pipes come
back through ``_layout.py``. What the restore leaves becomes the session's knowledge
(``_knowledge.py``), so the next capture reads nothing it wrote.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet

from langchain_sandbox.providers.base import FileInfo, Session
from langchain_sandbox.providers.guest_facts import variable_names, variable_reasons
from langchain_sandbox.snapshots._knowledge import (
    RACY_WINDOW_NS,
    Known,
    Seen,
    SnapshotKnowledge,
    batches,
    by_size,
)
from langchain_sandbox.snapshots._layout import (
    describe_paths,
    describe_reasons,
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
    has_ancestor_in,
    head_of,
    listed_after,
    part_index,
    plan_restore,
    relist,
    rewound_entries,
    rewound_parts,
    scope_of,
    unconfirmed,
)
from langchain_sandbox.snapshots.manifest import FileEntry, Manifest
from langchain_sandbox.snapshots.packs import blob_sizes, contents_of
from langchain_sandbox.snapshots.reports import RestoreReport

_DIR_PLACEHOLDER = ".langchain-sandbox-keep"
_MAX_COMMAND_CHARS = 64 * 1024


class SnapshotRestore(SnapshotKnowledge):
    """[`Snapshotter.restore`][langchain_sandbox.Snapshotter.restore] and what only it needs; a
    base of the `Snapshotter`."""

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
        views = [Seen.of_manifest(plan)]
        if known is not None:
            views.insert(0, known.seen)

        def unchanged(info: FileInfo, entry: FileEntry) -> bool:
            return any(view.hash_of(info) == entry.sha256 for view in views)

        removals, writes, make_dirs = plan_restore(plan, listing, unchanged)
        # A name the sandbox allows but the session API refuses (a backslash, say) cannot be
        # removed through it; it is left in place and reported rather than failing the restore.
        stuck = {path: "could not be removed" for path in removals if not portable(path)}
        removals = [path for path in removals if path not in stuck]
        needed = blob_sizes(manifest, writes)
        if manifest.variables is not None:
            needed[manifest.variables.sha256] = manifest.variables.size
        # Every blob is looked up, not only those to write: a capture after this restore reuses
        # the others without asking the store (see Known). Those the store was last seen to
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
            for batch in batches(list(present.items()), by_size, self.limits.batch_bytes):
                bad |= (await self._fetch_checked(dict(batch)))[1]
        lost_files = {path for path in writes if blob_sizes(manifest, [path]).keys() & bad}
        writes = [path for path in writes if path not in lost_files]
        # What the session holds at a lost path is not the snapshot's content: it goes too.
        doomed = set(removals)
        existing = {path for path, info in listing.items() if info.kind == "file"}
        removals += sorted(
            path for path in lost_files if path in existing and not has_ancestor_in(path, doomed)
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
            for batch in batches(
                [(path, manifest.files[path].size) for path in paths],
                by_size,
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
        seen = Seen.observe(
            observed,
            horizon_ns,
            since=None if scope is None or known is None else known.seen,
            forget=() if scope is None else scope.paths,
        )
        # The entries of the files as they are now (a restore gives written files new mtimes);
        # the others are read by the next capture (see Known).
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
        self._known[session] = Known(
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
                f"{len(stuck)} path(s) not in the snapshot were left in place: {describe_reasons(stuck)}."
            )
        if manifest.omitted:
            notices.append(
                f"{len(manifest.omitted)} path(s) were not part of the snapshot and are not "
                f"restored: {describe_reasons(manifest.omitted)}."
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
        known: Known | None,
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


def _confirmed_blobs(known: Known | None) -> set[str]:
    """The blobs the store was last seen to hold for a session, while that is still trusted
    (see :meth:`Known.trusted`): its snapshot, the manifest parts and file contents known."""
    if known is None or not known.trusted(None):
        return set()
    blobs = {known.ref, *(entry.sha256 for entry in known.entries.values())}
    blobs.update(part.sha256 for _, part in known.parts.values())
    if known.captured is not None and known.captured.variables is not None:
        blobs.add(known.captured.variables.sha256)
    return blobs


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
    return batches(paths, lambda path: len(shlex.quote(path)) + 1, _MAX_COMMAND_CHARS)


def _human_bytes(count: int) -> str:
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
