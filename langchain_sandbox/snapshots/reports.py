"""What the [`Snapshotter`][langchain_sandbox.Snapshotter]'s operations report: `SnapshotInfo`
for a capture, `RestoreReport` for a restore, `GcReport` for a garbage collection. Plain frozen
records, apart from the code that fills them, so a caller (the runtime, ``gc``, a test) reads them
without loading the operations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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
