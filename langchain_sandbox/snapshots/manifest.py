"""The snapshot manifest: what one revision of a workspace contains, and how it is written.

A manifest is canonical JSON (sorted keys, no spaces), so the same workspace gives the same bytes,
and it is stored as a blob like any file: the sha256 of those bytes is the snapshot's *ref*.

Format 2 (written today) splits the file list into *parts*, each a blob of its own, so a step that
changes one file of 100,000 rewrites one part of a few hundred entries and a small root, not the
whole list. Part boundaries depend only on the paths (`split_paths`), so an unchanged stretch
of the workspace keeps its part, and its blob, from one revision to the next:

```json
{"format": 2, "revision": 7, "created_at": 1764460000.5, "parent": "<ref> | null",
 "parts": [{"sha256": "...", "size": 31022, "files": 240}, ...],
 "dirs": ["empty/dir"],
 "fifos": ["run/pipe"],
 "omitted": {"link": "symlink (not captured)"},
 "variables": {"sha256": "...", "size": 812, "saved": ["df", "x"], "skipped": ["conn"]} | null}
```

A part is ``{"files": {"data/a.csv": {"sha256": "...", "size": 120, "mode": 420, "mtime_ns": ...}},
"format": 2}``, its paths sorted, every path of a part after every path of the part before it.
``fifos`` (named pipes, recreated empty) is left out when there are none. An entry may also carry ``"link": "<path>"`` (a hard link of that file) and ``"sparse": true``
(it had holes); both are left out when unset, so entries written before they existed still read.
A small file (at most `PACKED_MAX_BYTES`) carries its bytes in the part, ``"data": "<base64>"``,
instead of a blob of its own (see `langchain_sandbox.snapshots.packs`); an entry without
``data`` names a blob, as every entry did before.
Format 1 (one blob, the ``files`` object in place of ``parts``) is still read, and
`Manifest.encode` still writes it.

A manifest read back from a store is untrusted input: ``manifest_parsing.py`` reads it back and
refuses anything a restore could not apply safely.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMAT = 2
"""Version of the manifest format captures write (split into parts); format 1 is still read."""

PART_TARGET_FILES = 128
"""Average number of files per manifest part: a boundary follows a path whose CRC-32 is a
multiple of this, so boundaries move only where paths are added or removed."""

PART_MAX_FILES = 512
"""A part is cut here whatever the paths say (bounds one part's size)."""

PACKED_MAX_BYTES = 512
"""Files up to this size are packed into the manifest part that lists them, not stored as a
blob of their own: a blob is a file (or a row) whose fixed cost (a 4 KiB block, an inode)
dwarfs a small file's bytes, while in a part such a file costs its base64 (4/3 of its size)."""

_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SnapshotLimits:
    """Bounds on what a snapshot may hold; checked when capturing and again when restoring.

    Attributes:
        max_files: Files plus directories in one snapshot.
        max_file_bytes: Largest single file (and largest variables blob). Larger files are left
            out of a capture with a notice; a manifest that lists one is refused on restore.
        max_total_bytes: Sum of the file sizes of one snapshot.
        max_manifest_bytes: Largest manifest accepted (refused before it is parsed).
        batch_bytes: How many bytes of files one ``read_files`` / ``write_files`` call carries.
        restore_memory_bytes: A restore that writes at most this many bytes fetches and verifies
            every blob once, in memory, before writing; a larger one verifies in a first pass and
            fetches again (verifying again) while writing, so memory stays bounded.
    """

    max_files: int = 1_000_000
    max_file_bytes: int = 1024 * 1024 * 1024
    max_total_bytes: int = 8 * 1024 * 1024 * 1024
    max_manifest_bytes: int = 64 * 1024 * 1024
    batch_bytes: int = 64 * 1024 * 1024
    restore_memory_bytes: int = 512 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One regular file of a snapshot: its content's blob and the metadata restored with it.

    Attributes:
        sha256: Its content's blob.
        size: Its length in bytes.
        mode: Its permission bits when captured.
        mtime_ns: Its modification time when captured.
        link: The path this file was a hard link of (the first, in path order, of the paths
            sharing its inode; that path's own ``link`` is ``None``), or ``None``.
        sparse: It had holes (took fewer blocks than its size) when captured.
        data: Its bytes, for a file packed into its manifest part (at most
            `PACKED_MAX_BYTES`, checked against ``sha256`` when the part is read); ``None``:
            they are the blob ``sha256``.
    """

    sha256: str
    size: int
    mode: int
    mtime_ns: int
    link: str | None = None
    sparse: bool = False
    data: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class VariablesEntry:
    """The Python globals captured with the workspace (see `VariablesDump`)."""

    sha256: str
    size: int
    saved: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class ManifestPart:
    """One part of a split (format 2) manifest, as its root lists it.

    Attributes:
        sha256: The part blob's key.
        size: Its length in bytes.
        files: How many file entries it holds.
    """

    sha256: str
    size: int
    files: int


@dataclass(frozen=True)
class Manifest:
    """One revision of a workspace. Build it, `encode` it, store the bytes; the hash is the ref.

    Attributes:
        revision: The sandbox revision this snapshot captures (the graph record's counter).
        created_at: Host time of the capture, in seconds since the epoch.
        parent: Ref of the snapshot this one was captured against, if any (informational: a
            snapshot never needs its parent to be restored).
        files: Workspace-relative POSIX path -> file entry.
        dirs: Directories that hold no file (other directories follow from the file paths).
        fifos: Named pipes (FIFOs), recreated empty by a restore where the provider can.
        omitted: Paths that exist in the workspace but were not captured, with the reason.
        variables: The variables blob, or ``None`` when the provider has no variables.
        parts: The part blobs the file list was read from (a format 2 manifest loaded from a
            store); empty for format 1 and for a manifest built in memory. Not compared.
    """

    revision: int = 0
    created_at: float = 0.0
    parent: str | None = None
    files: Mapping[str, FileEntry] = field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    omitted: Mapping[str, str] = field(default_factory=dict)
    variables: VariablesEntry | None = None
    parts: tuple[ManifestPart, ...] = field(default=(), compare=False)
    fifos: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        """Sum of the sizes of the files."""
        return sum(entry.size for entry in self.files.values())

    def blob_keys(self) -> set[str]:
        """Every blob this snapshot needs besides its root: the contents of files not packed
        into a part, the variables and the manifest parts it was read from. Garbage collection
        keeps exactly these (plus the ref)."""
        keys = {entry.sha256 for entry in self.files.values() if entry.data is None}
        keys.update(part.sha256 for part in self.parts)
        if self.variables is not None:
            keys.add(self.variables.sha256)
        return keys

    def encode(self) -> bytes:
        """The canonical JSON bytes of this manifest in format 1, one blob holding every file
        entry (equal manifests give equal bytes). Captures write `encode_root` instead."""
        return _canonical(
            {**self._header(1), "files": {path: _entry_doc(e) for path, e in self.files.items()}}
        )

    def encode_root(self, parts: Sequence[ManifestPart]) -> bytes:
        """The canonical JSON bytes of this manifest's format 2 root, naming ``parts`` (the blobs
        of `encode_part` over `split_paths` of the files, in order)."""
        return _canonical(
            {
                **self._header(FORMAT),
                "parts": [
                    {"sha256": part.sha256, "size": part.size, "files": part.files}
                    for part in parts
                ],
            }
        )

    def _header(self, format_version: int) -> dict[str, Any]:
        # Written only when there are some, so a snapshot without has the bytes it always had.
        fifos = {"fifos": sorted(self.fifos)} if self.fifos else {}
        return {
            **fifos,
            "format": format_version,
            "revision": self.revision,
            "created_at": self.created_at,
            "parent": self.parent,
            "dirs": sorted(self.dirs),
            "omitted": dict(self.omitted),
            "variables": None
            if self.variables is None
            else {
                "sha256": self.variables.sha256,
                "size": self.variables.size,
                "saved": list(self.variables.saved),
                "skipped": list(self.variables.skipped),
            },
        }


def split_paths(paths: Sequence[str]) -> list[Sequence[str]]:
    """Sorted ``paths`` cut into the runs that make the parts of a format 2 manifest.

    A run ends after a path whose CRC-32 is a multiple of `PART_TARGET_FILES` (or after
    `PART_MAX_FILES` paths): a boundary depends on one path only, so adding or removing a
    file changes its own part and leaves every other part, and its blob, as it was.
    """
    runs: list[Sequence[str]] = []
    start = 0
    for index, path in enumerate(paths):
        length = index + 1 - start
        boundary = zlib.crc32(path.encode("utf-8", "surrogateescape")) % PART_TARGET_FILES == 0
        if boundary or length >= PART_MAX_FILES:
            runs.append(paths[start : index + 1])
            start = index + 1
    if start < len(paths):
        runs.append(paths[start:])
    return runs


def encode_part(entries: Iterable[tuple[str, FileEntry]]) -> bytes:
    """The canonical bytes of one manifest part holding ``entries`` (path order)."""
    return _canonical({"format": FORMAT, "files": {path: _entry_doc(e) for path, e in entries}})


def _entry_doc(entry: FileEntry) -> dict[str, int | str | bool]:
    doc: dict[str, int | str | bool] = {
        "sha256": entry.sha256,
        "size": entry.size,
        "mode": entry.mode,
        "mtime_ns": entry.mtime_ns,
    }
    if entry.data is not None:
        doc["data"] = base64.b64encode(entry.data).decode("ascii")
    # Written only when set, so an entry without them has the bytes it always had.
    if entry.link is not None:
        doc["link"] = entry.link
    if entry.sparse:
        doc["sparse"] = True
    return doc


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def is_digest(value: object) -> bool:
    """Whether ``value`` is a lowercase hex sha256 digest (the form of every blob key and ref)."""
    return isinstance(value, str) and _HEX_DIGEST.fullmatch(value) is not None


__all__ = [
    "FORMAT",
    "PACKED_MAX_BYTES",
    "PART_MAX_FILES",
    "PART_TARGET_FILES",
    "FileEntry",
    "Manifest",
    "ManifestPart",
    "SnapshotLimits",
    "VariablesEntry",
    "encode_part",
    "is_digest",
    "split_paths",
]
