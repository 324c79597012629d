"""Small files packed into the manifest part that lists them, instead of one blob each.

A blob is one file of a `LocalDirectoryBlobStore` (a 4 KiB block and an inode at least) or one
row of a LangGraph store: for a 100-byte file that fixed cost is forty times its bytes (1 MiB of
100-byte files took 42 MiB on disk). A file of at most `PACKED_MAX_BYTES` therefore travels in
its manifest part, as the base64 ``data`` of its entry (see ``manifest.py``): the part is its
pack. What that keeps, with no new kind of object in any store:

* content addressing: the entry still names the content's sha256 (a rewind compares it, a
  capture reuses it), and the part is a blob named by its own sha256;
* verification on read: a part is checked against its key when it is fetched, and each packed
  file against its entry's sha256 when the part is parsed; a damaged part costs the files it
  lists, named in the restore's notices, as before;
* garbage collection: a part is kept while a live snapshot's root names it and deleted with
  the last one that does; a part is never partly live, so there is nothing to compact;
* crash safety: a part is written with the root that names it, before the capture returns
  its ref, as every part always was;
* both stores, and snapshots written before packing: an entry without ``data`` names a blob,
  and a manifest may mix both kinds.

This module holds the choices a capture and a restore make about packed files; ``capture.py``
and ``restore.py`` call it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from langchain_sandbox.snapshots._listing import Listing
from langchain_sandbox.snapshots.manifest import PACKED_MAX_BYTES, FileEntry, Manifest


def split_small(
    digests: Mapping[str, str], contents: Mapping[str, bytes]
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The files just read, as (path -> bytes of those to pack, sha256 -> bytes of the blobs
    to store)."""
    packed: dict[str, bytes] = {}
    blobs: dict[str, bytes] = {}
    for path, sha in digests.items():
        data = contents[path]
        if len(data) <= PACKED_MAX_BYTES:
            packed[path] = data
        else:
            blobs[sha] = data
    return packed, blobs


def build_entries(
    previous: Mapping[str, FileEntry],
    rebuilt: Iterable[str],
    hashes: Mapping[str, str],
    sizes: Mapping[str, int],
    listing: Listing,
    packed: Mapping[str, bytes],
    base: Manifest | None,
) -> tuple[dict[str, FileEntry], bool]:
    """The manifest's file entries, in path order: ``previous`` with the entries of the
    ``rebuilt`` paths made again (or dropped: gone, no longer a file, not read); and whether
    the set of paths is the same as in ``previous``. An entry equal to the previous one is that
    same object, so comparing manifest parts costs next to nothing.

    A rebuilt file is packed with the bytes just read (``packed``), or with those of the entry
    its hash came from (``previous`` or ``base``, same path and hash); a file known only by a
    blob stays a blob, so a snapshot of the old layout is reused as it is."""
    files = dict(previous)
    added = removed = False
    for path in rebuilt:
        info = listing.files.get(path)
        sha = hashes.get(path)
        if info is None or sha is None:
            removed = files.pop(path, None) is not None or removed
            continue
        old = files.get(path)
        data = packed.get(path)
        if data is None:
            data = _packed_bytes(sha, old, base.files.get(path) if base is not None else None)
        entry = FileEntry(
            sha, sizes[path], info.mode & 0o7777, info.mtime_ns, sparse=info.sparse, data=data
        )
        added = added or old is None
        if old != entry:
            files[path] = entry
    if added:
        files = dict(sorted(files.items()))
    return files, not (added or removed)


def _packed_bytes(sha: str, *sources: FileEntry | None) -> bytes | None:
    for entry in sources:
        if entry is not None and entry.sha256 == sha and entry.data is not None:
            return entry.data
    return None


def stored_hashes(hashes: Mapping[str, str], *sources: Mapping[str, FileEntry]) -> set[str]:
    """The hashes of ``hashes`` (path -> sha256) whose content is a blob in the store: those of
    files no entry of ``sources`` packs with that hash at that path."""
    return {
        sha
        for path, sha in hashes.items()
        if _packed_bytes(sha, *(source.get(path) for source in sources)) is None
    }


def blob_sizes(manifest: Manifest, paths: Iterable[str]) -> dict[str, int]:
    """sha256 -> size of the blobs writing ``paths`` of ``manifest`` needs (packed files need
    none)."""
    return {
        entry.sha256: entry.size for path in paths if (entry := manifest.files[path]).data is None
    }


def contents_of(
    manifest: Manifest, paths: Sequence[str], blobs: Mapping[str, bytes]
) -> dict[str, bytes]:
    """path -> bytes of ``paths``: packed ones from their entry, the others from ``blobs``."""
    contents: dict[str, bytes] = {}
    for path in paths:
        entry = manifest.files[path]
        contents[path] = entry.data if entry.data is not None else blobs[entry.sha256]
    return contents


__all__ = ["blob_sizes", "build_entries", "contents_of", "split_small", "stored_hashes"]
