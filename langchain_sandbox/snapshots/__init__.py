"""Workspace snapshots: content-addressed, incremental, safe to restore.

A snapshot is a manifest (canonical JSON listing every file's sha256, size, mode and mtime, the
empty directories, the paths left out and the variables blob) stored as a blob; the manifest's
sha256 is the snapshot's *ref*, the string the graph record keeps. File contents are blobs keyed
by their sha256, so a step that changes one file stores one file, and snapshots of many threads
share whatever content they have in common.

```python
from langchain_sandbox.snapshots import Snapshotter, LocalDirectoryBlobStore

snapshotter = Snapshotter(LocalDirectoryBlobStore("/var/lib/my-agent/blobs"))
info = await snapshotter.capture(session, base=previous_ref, revision=7)   # -> info.ref
report = await snapshotter.restore(fresh_session, info.ref)                # report.notices
await snapshotter.collect_garbage(refs_in_checkpoints, dry_run=True)
```

See ``docs/snapshots.md`` for the format, the guarantees and the limits. Writing a blob store:
subclass `BlobStore`; `check_key` and `digest` are the key rules every store
keeps.
"""

from __future__ import annotations

from langchain_sandbox.snapshots.langgraph_store import LangGraphStoreBlobStore
from langchain_sandbox.snapshots.local_store import LocalDirectoryBlobStore, default_blob_dir
from langchain_sandbox.snapshots.manifest import FileEntry, Manifest, SnapshotLimits, VariablesEntry
from langchain_sandbox.snapshots.manifest_parsing import parse_manifest
from langchain_sandbox.snapshots.reports import GcReport, RestoreReport, SnapshotInfo
from langchain_sandbox.snapshots.snapshotter import Snapshotter
from langchain_sandbox.snapshots.store import BlobInfo, BlobStore, check_key, digest

__all__ = [
    "BlobInfo",
    "BlobStore",
    "FileEntry",
    "GcReport",
    "LangGraphStoreBlobStore",
    "LocalDirectoryBlobStore",
    "Manifest",
    "RestoreReport",
    "SnapshotInfo",
    "SnapshotLimits",
    "Snapshotter",
    "VariablesEntry",
    "check_key",
    "default_blob_dir",
    "digest",
    "parse_manifest",
]
