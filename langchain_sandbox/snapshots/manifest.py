"""The snapshot manifest: what one revision of a workspace contains, and how it is checked.

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

A manifest read back from a store is untrusted input: `parse_manifest` refuses anything a
restore could not apply safely (the path and size rules below) with
[`UnsafeArchiveError`][langchain_sandbox.UnsafeArchiveError], before a single byte reaches a session.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_sandbox.errors import UnsafeArchiveError
from langchain_sandbox.workspace import MAX_PATH_DEPTH

FORMAT = 2
"""Version of the manifest format captures write (split into parts); format 1 is still read."""

_READABLE_FORMATS = (1, 2)

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
_WINDOWS_DRIVE = re.compile(r"[A-Za-z]:")
_MAX_PATH_CHARS = 4096
_MAX_NAME_CHARS = 255
_MAX_NOTE_CHARS = 500


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


def check_relative_path(path: object, *, what: str = "path") -> str:
    """Return ``path`` if it is a plain workspace-relative POSIX path, else raise.

    The rules are lexical and strict, because the manifest is untrusted: no empty, ``.`` or ``..``
    component (refused, never normalised away), no absolute path, no Windows drive, no backslash,
    no NUL, no over-long name.

    Raises:
        UnsafeArchiveError: naming the path and the rule it breaks.
    """
    if not isinstance(path, str) or not path:
        raise UnsafeArchiveError(f"Snapshot {what} {path!r} is not a non-empty string.")
    reason: str | None = None
    if "\x00" in path:
        reason = "contains a NUL byte"
    elif "\\" in path:
        reason = "contains a backslash (snapshot paths are POSIX)"
    elif path.startswith("/"):
        reason = "is absolute"
    elif _WINDOWS_DRIVE.match(path):
        reason = "starts with a drive letter"
    elif len(path) > _MAX_PATH_CHARS:
        reason = f"is longer than {_MAX_PATH_CHARS} characters"
    elif path.count("/") >= MAX_PATH_DEPTH:
        reason = f"is nested deeper than {MAX_PATH_DEPTH} directories"
    else:
        for part in path.split("/"):
            if part in ("", ".", ".."):
                reason = f"has a {part or 'empty'!r} component"
                break
            if len(part) > _MAX_NAME_CHARS:
                reason = f"has a name longer than {_MAX_NAME_CHARS} characters"
                break
    if reason is not None:
        raise UnsafeArchiveError(f"Snapshot {what} {path!r} {reason}; refusing to restore it.")
    return path


def parse_manifest(data: bytes, limits: SnapshotLimits | None = None) -> Manifest:
    """Decode and validate a one-blob (format 1) manifest read from a store.

    Everything a restore relies on is checked here, so a manifest that parses can be applied:
    known format, exact fields and types, path rules (`check_relative_path`), no duplicate
    path (JSON keys included), no path below a file, counts and sizes within ``limits``. A split
    (format 2) manifest needs its parts: read it with `parse_root` and
    `ManifestRoot.assemble` ([`Snapshotter.load_manifest`][langchain_sandbox.Snapshotter.load_manifest] does both).

    Raises:
        UnsafeArchiveError: the bytes are not a valid manifest; the message says why.
    """
    root = parse_root(data, limits)
    if root.parts:
        raise UnsafeArchiveError(
            "Snapshot manifest is split into parts; load it with Snapshotter.load_manifest."
        )
    return root.manifest


@dataclass(frozen=True)
class ManifestRoot:
    """A stored manifest as first read: complete for format 1; for format 2 everything but the
    file entries, which are in `parts` (see `assemble`).

    Attributes:
        manifest: The manifest (without its files when ``parts`` is not empty).
        parts: The part blobs to fetch, in order.
    """

    manifest: Manifest
    parts: tuple[ManifestPart, ...] = ()

    def assemble(
        self,
        part_data: Mapping[str, bytes],
        limits: SnapshotLimits | None = None,
        parsed: Mapping[str, Sequence[tuple[str, FileEntry]]] | None = None,
    ) -> Manifest:
        """The whole manifest, from the bytes of every part (the caller has checked each against
        its key). Each part is validated like a format 1 file list, and across parts: paths in
        strictly increasing order (so none twice), counts as the root says, totals within
        ``limits``, no path below a file. A part missing from ``part_data`` (its blob is gone or
        corrupt) is left out, with the files it lists.

        ``parsed`` holds, by key, the entries of parts already validated (a rewind reuses those
        its session holds): such a part is not decoded again, only checked across parts.

        Raises:
            UnsafeArchiveError: a part is malformed or does not match the root.
        """
        if not self.parts:
            return self.manifest
        limits = limits or SnapshotLimits()
        parsed = parsed or {}
        files: dict[str, FileEntry] = {}
        total = 0
        previous = ""
        for part in self.parts:
            chunk = parsed.get(part.sha256)
            if chunk is not None:
                if len(chunk) != part.files or chunk[0][0] <= previous:
                    raise UnsafeArchiveError(
                        f"Snapshot manifest part {part.sha256} does not fit where its root puts it."
                    )
                files.update(chunk)
                total += sum(entry.size for _, entry in chunk)
                previous = chunk[-1][0]
                if len(files) > limits.max_files or total > limits.max_total_bytes:
                    raise UnsafeArchiveError(
                        f"Snapshot holds more than {limits.max_files} files or "
                        f"{limits.max_total_bytes} bytes (SnapshotLimits)."
                    )
                continue
            data = part_data.get(part.sha256)
            if data is None:
                continue
            if len(data) != part.size or len(data) > limits.max_manifest_bytes:
                raise UnsafeArchiveError(
                    f"Snapshot manifest part {part.sha256} has the wrong size."
                )
            document = _load_json(data, "manifest part")
            doc = _exact_object(document, "part", required={"format", "files"}, optional=set())
            if doc["format"] != FORMAT or isinstance(doc["format"], bool):
                raise UnsafeArchiveError(
                    f"Snapshot manifest part {part.sha256} has a wrong format."
                )
            files_doc = _exact_object(doc["files"], "part files", required=set(), optional=None)
            if len(files_doc) != part.files or not files_doc:
                raise UnsafeArchiveError(
                    f"Snapshot manifest part {part.sha256} does not hold the files its root says."
                )
            for path in files_doc:
                if not isinstance(path, str) or path <= previous:
                    raise UnsafeArchiveError(
                        f"Snapshot manifest part {part.sha256} lists {path!r} out of order."
                    )
                previous = path
            total = _add_files(files, files_doc, total, limits)
        _check_tree(files, self.manifest.dirs, self.manifest.fifos)
        return replace(self.manifest, files=files, parts=self.parts)


def parse_root(data: bytes, limits: SnapshotLimits | None = None) -> ManifestRoot:
    """Decode and validate the manifest blob a ref names, in either format (see
    `parse_manifest` for what is checked; a format 2 root's files are checked by
    `ManifestRoot.assemble`).

    Raises:
        UnsafeArchiveError: the bytes are not a valid manifest; the message says why.
    """
    limits = limits or SnapshotLimits()
    if len(data) > limits.max_manifest_bytes:
        raise UnsafeArchiveError(
            f"Snapshot manifest is {len(data)} bytes, over the limit of "
            f"{limits.max_manifest_bytes} (SnapshotLimits.max_manifest_bytes)."
        )
    document = _load_json(data, "manifest")
    doc = _exact_object(
        document, "manifest", required={"format"}, optional=_ONE_BLOB_KEYS | _SPLIT_KEYS | {"fifos"}
    )
    version = doc["format"]
    if version not in _READABLE_FORMATS or isinstance(version, bool):
        raise UnsafeArchiveError(
            f"Snapshot manifest has format {version!r}; this version reads formats "
            f"{', '.join(str(v) for v in _READABLE_FORMATS)}."
        )
    keys = _ONE_BLOB_KEYS if version == 1 else _SPLIT_KEYS
    _exact_object(doc, "manifest", required=keys, optional={"fifos"})
    files_doc = {}
    parts: tuple[ManifestPart, ...] = ()
    if version == 1:
        files_doc = _exact_object(doc["files"], "files", required=set(), optional=None)
        file_count = len(files_doc)
    else:
        parts = _parts(doc["parts"], limits)
        file_count = sum(part.files for part in parts)
    dirs_doc = doc["dirs"]
    omitted_doc = _exact_object(doc["omitted"], "omitted", required=set(), optional=None)
    if not isinstance(dirs_doc, list):
        raise UnsafeArchiveError("Snapshot manifest field 'dirs' is not a list.")
    count = file_count + len(dirs_doc)
    if count > limits.max_files or len(omitted_doc) > limits.max_files:
        raise UnsafeArchiveError(
            f"Snapshot lists {count} files and directories, over the limit of "
            f"{limits.max_files} (SnapshotLimits.max_files)."
        )

    files: dict[str, FileEntry] = {}
    _add_files(files, files_doc, 0, limits)
    dirs: list[str] = []
    for path in dirs_doc:
        check_relative_path(path, what="directory")
        dirs.append(path)
    if len(set(dirs)) != len(dirs):
        raise UnsafeArchiveError("Snapshot lists a directory twice.")
    fifos = _fifos(doc.get("fifos", []), dirs, limits)
    if not parts:
        _check_tree(files, dirs, fifos)
    omitted: dict[str, str] = {}
    for path, note in omitted_doc.items():
        check_relative_path(path)
        if not isinstance(note, str) or len(note) > _MAX_NOTE_CHARS:
            raise UnsafeArchiveError(f"Snapshot note for {path!r} is not a short string.")
        omitted[path] = note

    manifest = Manifest(
        revision=_integer(doc["revision"], "revision", minimum=0),
        created_at=_number(doc["created_at"], "created_at"),
        parent=None if doc["parent"] is None else _digest(doc["parent"], "parent"),
        files=files,
        dirs=tuple(dirs),
        omitted=omitted,
        variables=_variables_entry(doc["variables"], limits),
        fifos=fifos,
    )
    return ManifestRoot(manifest, parts)


def _fifos(value: object, dirs: Sequence[str], limits: SnapshotLimits) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > limits.max_files:
        raise UnsafeArchiveError("Snapshot manifest field 'fifos' is not a list.")
    fifos = tuple(check_relative_path(path, what="FIFO") for path in value)
    if len(set(fifos)) != len(fifos) or set(fifos) & set(dirs):
        raise UnsafeArchiveError("Snapshot lists a FIFO twice, or as a directory.")
    return fifos


def _load_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_nan)
    except (ValueError, RecursionError) as exc:
        raise UnsafeArchiveError(f"Snapshot {what} is not valid JSON: {exc}") from None


def _parts(value: object, limits: SnapshotLimits) -> tuple[ManifestPart, ...]:
    if not isinstance(value, list) or len(value) > limits.max_files:
        raise UnsafeArchiveError("Snapshot manifest field 'parts' is not a list of parts.")
    parts: list[ManifestPart] = []
    for index, part_doc in enumerate(value):
        doc = _exact_object(
            part_doc, f"part {index}", required={"sha256", "size", "files"}, optional=set()
        )
        parts.append(
            ManifestPart(
                sha256=_digest(doc["sha256"], f"parts[{index}].sha256"),
                size=_integer(doc["size"], f"parts[{index}].size", minimum=0),
                files=_integer(doc["files"], f"parts[{index}].files", minimum=1),
            )
        )
    return tuple(parts)


def _add_files(
    files: dict[str, FileEntry], files_doc: Mapping[str, Any], total: int, limits: SnapshotLimits
) -> int:
    """Validate ``files_doc`` into ``files``; return the running total of file bytes."""
    for path, entry_doc in files_doc.items():
        check_relative_path(path)
        if path in files:
            raise UnsafeArchiveError(f"Snapshot lists the file {path!r} twice.")
        entry = _file_entry(path, entry_doc, limits)
        total += entry.size
        if total > limits.max_total_bytes:
            raise UnsafeArchiveError(
                f"Snapshot holds more than {limits.max_total_bytes} bytes of files "
                "(SnapshotLimits.max_total_bytes)."
            )
        if len(files) >= limits.max_files:
            raise UnsafeArchiveError(
                f"Snapshot lists more than {limits.max_files} files (SnapshotLimits.max_files)."
            )
        files[path] = entry
    return total


def _check_tree(
    files: Mapping[str, FileEntry], dirs: Sequence[str], fifos: Sequence[str] = ()
) -> None:
    """No path is both a file and a directory (or a FIFO), and none lies below a file or FIFO."""
    leaves = {*files, *fifos}
    if len(leaves) != len(files) + len(fifos):
        raise UnsafeArchiveError("Snapshot lists a path as a file and a FIFO.")
    for path in dirs:
        if path in files:
            raise UnsafeArchiveError(f"Snapshot path {path!r} is listed as a file and a directory.")
    for path in [*files, *dirs, *fifos]:
        parent = path.rpartition("/")[0]
        while parent:
            if parent in leaves:
                raise UnsafeArchiveError(
                    f"Snapshot path {path!r} lies below the file {parent!r}; refusing to restore it."
                )
            parent = parent.rpartition("/")[0]


def is_digest(value: object) -> bool:
    """Whether ``value`` is a lowercase hex sha256 digest (the form of every blob key and ref)."""
    return isinstance(value, str) and _HEX_DIGEST.fullmatch(value) is not None


_COMMON_KEYS = {"format", "revision", "created_at", "parent", "dirs", "omitted", "variables"}
_ONE_BLOB_KEYS = _COMMON_KEYS | {"files"}
_SPLIT_KEYS = _COMMON_KEYS | {"parts"}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_nan(constant: str) -> Any:
    raise ValueError(f"non-finite number {constant}")


def _exact_object(
    value: object, what: str, *, required: set[str], optional: set[str] | None
) -> dict[str, Any]:
    """``value`` as a dict with exactly the ``required`` keys plus some ``optional`` ones
    (``optional=None``: any keys)."""
    if not isinstance(value, dict):
        raise UnsafeArchiveError(f"Snapshot manifest field {what!r} is not an object.")
    missing = required - value.keys()
    if missing:
        raise UnsafeArchiveError(f"Snapshot {what} lacks {', '.join(sorted(missing))}.")
    if optional is not None:
        unknown = value.keys() - required - optional
        if unknown:
            raise UnsafeArchiveError(
                f"Snapshot {what} has unknown fields {', '.join(sorted(unknown))}."
            )
    return value


def _integer(
    value: object, what: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UnsafeArchiveError(f"Snapshot field {what!r} is not an integer.")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise UnsafeArchiveError(f"Snapshot field {what!r} is out of range: {value}.")
    return value


def _number(value: object, what: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise UnsafeArchiveError(f"Snapshot field {what!r} is not a number.")
    return float(value)


def _digest(value: object, what: str) -> str:
    if not is_digest(value):
        raise UnsafeArchiveError(f"Snapshot field {what!r} is not a sha256 hex digest.")
    return str(value)


def _file_entry(path: str, value: object, limits: SnapshotLimits) -> FileEntry:
    doc = _exact_object(
        value,
        f"entry {path!r}",
        required={"sha256", "size", "mode", "mtime_ns"},
        optional={"link", "sparse", "data"},
    )
    size = _integer(doc["size"], f"{path}.size", minimum=0)
    if size > limits.max_file_bytes:
        raise UnsafeArchiveError(
            f"Snapshot file {path!r} is {size} bytes, over the limit of {limits.max_file_bytes} "
            "(SnapshotLimits.max_file_bytes)."
        )
    sha256 = _digest(doc["sha256"], f"{path}.sha256")
    return FileEntry(
        sha256=sha256,
        size=size,
        mode=_integer(doc["mode"], f"{path}.mode", minimum=0, maximum=0o7777),
        mtime_ns=_integer(doc["mtime_ns"], f"{path}.mtime_ns"),
        link=_link(doc.get("link"), path),
        sparse=_flag(doc.get("sparse", False), f"{path}.sparse"),
        data=_packed_data(doc.get("data"), path, sha256, size),
    )


def _packed_data(value: object, path: str, sha256: str, size: int) -> bytes | None:
    """The bytes of a packed file, verified against its entry: the part's own hash only says
    the part is the one its root named, not that the entry's hash is the content's."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > (PACKED_MAX_BYTES + 2) // 3 * 4:
        raise UnsafeArchiveError(f"Snapshot field '{path}.data' is not a small file's base64.")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise UnsafeArchiveError(f"Snapshot field '{path}.data' is not base64.") from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise UnsafeArchiveError(
            f"Snapshot file {path!r} packed in its manifest part does not match its sha256."
        )
    return data


def _link(value: object, path: str) -> str | None:
    """A hard link's target: a path under the same rules as every snapshot path (a restore
    links it only if the snapshot has it as a file of the same content)."""
    if value is None:
        return None
    if not isinstance(value, str) or value == path:
        raise UnsafeArchiveError(f"Snapshot field '{path}.link' is not another path.")
    check_relative_path(value)
    return value


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise UnsafeArchiveError(f"Snapshot field {what!r} is not a boolean.")
    return value


def _variables_entry(value: object, limits: SnapshotLimits) -> VariablesEntry | None:
    if value is None:
        return None
    doc = _exact_object(
        value, "variables", required={"sha256", "size", "saved", "skipped"}, optional=set()
    )
    size = _integer(doc["size"], "variables.size", minimum=0, maximum=limits.max_file_bytes)
    names: dict[str, tuple[str, ...]] = {}
    for key in ("saved", "skipped"):
        listed = doc[key]
        if (
            not isinstance(listed, list)
            or len(listed) > limits.max_files
            or not all(isinstance(name, str) and name.isidentifier() for name in listed)
        ):
            raise UnsafeArchiveError(f"Snapshot variables.{key} is not a list of Python names.")
        names[key] = tuple(listed)
    return VariablesEntry(
        sha256=_digest(doc["sha256"], "variables.sha256"),
        size=size,
        saved=names["saved"],
        skipped=names["skipped"],
    )


__all__ = [
    "FORMAT",
    "PACKED_MAX_BYTES",
    "PART_MAX_FILES",
    "PART_TARGET_FILES",
    "FileEntry",
    "Manifest",
    "ManifestPart",
    "ManifestRoot",
    "SnapshotLimits",
    "VariablesEntry",
    "check_relative_path",
    "encode_part",
    "is_digest",
    "parse_manifest",
    "parse_root",
    "split_paths",
]
