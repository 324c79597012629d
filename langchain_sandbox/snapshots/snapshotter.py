"""The [`Snapshotter`][langchain_sandbox.Snapshotter]: content-addressed, incremental snapshots
of a session's workspace and variables, on any provider, through the provider contract only. This
module is its facade and holds what is neither capture nor restore: the names recorded for heads
whose snapshot is written behind a call, and the garbage collection of the store (which blobs the
live snapshots need; deciding which snapshots are live is ``langchain_sandbox.gc``'s job). The
capture is in ``capture.py``, the restore in ``restore.py``, what both know of the store and of
each live session in ``_knowledge.py``, and what each returns in ``reports.py``.

API (stable; the runtime calls these): ``capture(session, *, base=None, revision=0) ->
SnapshotInfo``, ``restore(session, ref) -> RestoreReport``, ``collect_garbage(live_refs, *,
dry_run=False, grace_seconds=3600) -> GcReport``, ``load_manifest(ref)``, ``name_head`` and
``find_head``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from langchain_sandbox.errors import InvalidInputError, SnapshotNotFoundError, UnsafeArchiveError
from langchain_sandbox.snapshots.capture import SnapshotCapture
from langchain_sandbox.snapshots.manifest import Manifest, is_digest
from langchain_sandbox.snapshots.reports import GcReport
from langchain_sandbox.snapshots.restore import SnapshotRestore
from langchain_sandbox.snapshots.store import digest


class Snapshotter(SnapshotCapture, SnapshotRestore):
    """Content-addressed, incremental snapshots of a session's workspace and variables.

    Args:
        store: Where blobs go; default a [`LocalDirectoryBlobStore`][langchain_sandbox.LocalDirectoryBlobStore] at its default path.
        limits: Bounds checked on capture and on restore.

    One snapshotter may serve many sessions at once; it remembers, per live session object, the
    hashes of the files it last captured or restored there, so the next capture reads only what
    changed even when the previous snapshot came from another session. A caller must not run code
    in a session while it is being captured or restored (the runtime holds the session's lock).
    """

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


__all__ = ["Snapshotter"]
