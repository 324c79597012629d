"""Reading a stored manifest back (``manifest.py`` has the format): the bytes are untrusted
input, so `parse_root` and `ManifestRoot.assemble` (or `parse_manifest`, for a one-blob manifest)
refuse anything a restore could not apply safely with
[`UnsafeArchiveError`][langchain_sandbox.UnsafeArchiveError], before a single byte reaches a
session: a known format, exact fields and types, the path rules of `check_relative_path`, no
duplicate path (JSON keys included), no path below a file, counts and sizes within the
`SnapshotLimits`, and each packed file checked against its entry's sha256.

Over 500 lines because `ManifestAssembly` (parts taken a batch at a time, into columns) uses
the same private checks as the root and the one-blob list; apart, one would import the other's
private helpers both ways.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_sandbox.core.workspace import MAX_PATH_DEPTH
from langchain_sandbox.errors import UnsafeArchiveError
from langchain_sandbox.snapshots._compact_files import CompactFilesBuilder
from langchain_sandbox.snapshots.manifest import (
    FORMAT,
    PACKED_MAX_BYTES,
    FileEntry,
    Manifest,
    ManifestPart,
    SnapshotLimits,
    VariablesEntry,
    is_digest,
)

_READABLE_FORMATS = (1, 2)

_WINDOWS_DRIVE = re.compile(r"[A-Za-z]:")
_MAX_PATH_CHARS = 4096
_MAX_NAME_CHARS = 255
_MAX_NOTE_CHARS = 500


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
        its key): `assembler` fed every part in order. A part missing from ``part_data`` (its
        blob is gone or corrupt) is left out, with the files it lists.

        Raises:
            UnsafeArchiveError: a part is malformed or does not match the root.
        """
        assembly = self.assembler(limits, parsed)
        for part in self.parts:
            assembly.add(part, part_data.get(part.sha256))
        return assembly.finish()

    def assembler(
        self,
        limits: SnapshotLimits | None = None,
        parsed: Mapping[str, Sequence[tuple[str, FileEntry]]] | None = None,
        *,
        compact: bool = True,
    ) -> ManifestAssembly:
        """An assembly of this manifest's files that takes its parts one at a time, in order,
        so a caller holds the bytes of a batch of parts at once, never of all of them.

        ``parsed`` holds, by key, the entries of parts already validated (a rewind reuses those
        its session holds): such a part is not decoded again, only checked across parts.
        ``compact``: the files are held in columns (`CompactFiles`), else in a ``dict``.
        """
        return ManifestAssembly(self, limits or SnapshotLimits(), parsed or {}, compact=compact)


class ManifestAssembly:
    """The files of a format 2 manifest, gathered part by part into columns
    (`CompactFiles`, about a third of the memory of a ``dict`` of entries). Each part is
    validated like a format 1 file list, and across parts: paths in strictly increasing order
    (so none twice), counts as the root says, totals within the limits, no path below a file."""

    def __init__(
        self,
        root: ManifestRoot,
        limits: SnapshotLimits,
        parsed: Mapping[str, Sequence[tuple[str, FileEntry]]],
        *,
        compact: bool = True,
    ) -> None:
        self._root = root
        self._limits = limits
        self._parsed = parsed
        self._columns = CompactFilesBuilder() if compact else None
        self._files: dict[str, FileEntry] = {}
        self._total = 0
        self._previous = ""

    def add(self, part: ManifestPart, data: bytes | None) -> None:
        """Add the files of ``part`` (the next in the root's order) from its bytes, or from the
        entries ``parsed`` holds for it; ``data=None`` and not held: the part could not be read
        and its files are left out.

        Raises:
            UnsafeArchiveError: the part is malformed or does not fit where its root puts it.
        """
        chunk = self._parsed.get(part.sha256)
        if chunk is not None:
            if len(chunk) != part.files or chunk[0][0] <= self._previous:
                raise UnsafeArchiveError(
                    f"Snapshot manifest part {part.sha256} does not fit where its root puts it."
                )
            if self._columns is None:
                self._files.update(chunk)
                self._check_totals(sum(entry.size for _, entry in chunk))
            else:
                for path, entry in chunk:
                    self._append(path, entry)
            self._previous = chunk[-1][0]
            return
        if data is None:
            return
        if len(data) != part.size or len(data) > self._limits.max_manifest_bytes:
            raise UnsafeArchiveError(f"Snapshot manifest part {part.sha256} has the wrong size.")
        document = _load_json(data, "manifest part")
        doc = _exact_object(document, "part", required={"format", "files"}, optional=set())
        if doc["format"] != FORMAT or isinstance(doc["format"], bool):
            raise UnsafeArchiveError(f"Snapshot manifest part {part.sha256} has a wrong format.")
        files_doc = _exact_object(doc["files"], "part files", required=set(), optional=None)
        if len(files_doc) != part.files or not files_doc:
            raise UnsafeArchiveError(
                f"Snapshot manifest part {part.sha256} does not hold the files its root says."
            )
        for path, entry_doc in files_doc.items():
            if not isinstance(path, str) or path <= self._previous:
                raise UnsafeArchiveError(
                    f"Snapshot manifest part {part.sha256} lists {path!r} out of order."
                )
            self._previous = path
            check_relative_path(path)
            self._append(path, _file_entry(path, entry_doc, self._limits))

    def _append(self, path: str, entry: FileEntry) -> None:
        if self._columns is None:
            self._files[path] = entry
        else:
            self._columns.append(path, entry)
        self._check_totals(entry.size)

    def _check_totals(self, added_bytes: int) -> None:
        limits = self._limits
        self._total += added_bytes
        count = len(self._files) if self._columns is None else len(self._columns)
        if count > limits.max_files or self._total > limits.max_total_bytes:
            raise UnsafeArchiveError(
                f"Snapshot holds more than {limits.max_files} files or "
                f"{limits.max_total_bytes} bytes (SnapshotLimits)."
            )

    def finish(self) -> Manifest:
        """The manifest with the files of the parts added.

        Raises:
            UnsafeArchiveError: a path lies below a file, or is both a file and a directory.
        """
        root = self._root
        files = self._files if self._columns is None else self._columns.build()
        _check_tree(files, root.manifest.dirs, root.manifest.fifos)
        return replace(root.manifest, files=files, parts=root.parts)


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
    """No path is both a file and a directory (or a FIFO), and none lies below a file or FIFO.

    Each parent directory is looked up once (``clear`` holds those found not to be a file, and
    so are all of theirs): a workspace has far fewer directories than files, and ``files`` may
    be a `CompactFiles`, where a lookup is a binary search."""
    fifo_set = set(fifos)
    if any(path in files for path in fifo_set):
        raise UnsafeArchiveError("Snapshot lists a path as a file and a FIFO.")
    for path in dirs:
        if path in files:
            raise UnsafeArchiveError(f"Snapshot path {path!r} is listed as a file and a directory.")
    clear: set[str] = set()
    for path in itertools.chain(files, dirs, fifos):
        parent = path.rpartition("/")[0]
        while parent and parent not in clear:
            if parent in fifo_set or parent in files:
                raise UnsafeArchiveError(
                    f"Snapshot path {path!r} lies below the file {parent!r}; refusing to restore it."
                )
            clear.add(parent)
            parent = parent.rpartition("/")[0]


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
        mtime_ns=_integer(doc["mtime_ns"], f"{path}.mtime_ns", minimum=-(2**63), maximum=2**63 - 1),
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
    "ManifestAssembly",
    "ManifestRoot",
    "check_relative_path",
    "parse_manifest",
    "parse_root",
]
