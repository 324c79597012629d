"""The manifest format: canonical encoding, and refusal of every malformed or hostile manifest."""

from __future__ import annotations

import json
from typing import Any

import pytest

from langchain_sandbox.errors import UnsafeArchiveError
from langchain_sandbox.snapshots.manifest import (
    FileEntry,
    Manifest,
    SnapshotLimits,
    VariablesEntry,
)
from langchain_sandbox.snapshots.manifest_parsing import check_relative_path, parse_manifest
from langchain_sandbox.snapshots.store import digest

SHA = digest(b"hello")


def _doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": 1,
        "revision": 3,
        "created_at": 1.5,
        "parent": None,
        "files": {"a/b.txt": {"sha256": SHA, "size": 5, "mode": 0o644, "mtime_ns": 7}},
        "dirs": ["empty"],
        "omitted": {},
        "variables": None,
    }
    doc.update(overrides)
    return doc


def _bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def test_round_trip_is_canonical() -> None:
    manifest = Manifest(
        revision=2,
        created_at=10.25,
        parent=SHA,
        files={
            "z.txt": FileEntry(SHA, 5, 0o755, 1),
            "a/b.bin": FileEntry(digest(b""), 0, 0o600, 2),
        },
        dirs=("d/e",),
        omitted={"link": "symlink"},
        variables=VariablesEntry(SHA, 5, saved=("x", "y"), skipped=("conn",)),
    )
    encoded = manifest.encode()
    assert parse_manifest(encoded) == manifest
    # Same content, other insertion order: same bytes, so the same ref.
    reordered = Manifest(
        revision=2,
        created_at=10.25,
        parent=SHA,
        files=dict(reversed(list(manifest.files.items()))),
        dirs=("d/e",),
        omitted={"link": "symlink"},
        variables=manifest.variables,
    )
    assert reordered.encode() == encoded
    assert encoded.startswith(b'{"created_at":')
    assert manifest.blob_keys() == {SHA, digest(b"")}
    assert manifest.total_bytes == 5


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../etc/passwd", "'..'"),
        ("a/../../b", "'..'"),
        ("/etc/passwd", "absolute"),
        ("a\\b", "backslash"),
        ("a\x00b", "NUL"),
        ("C:evil", "drive"),
        ("./a", "'.'"),
        ("a//b", "empty"),
        ("a/", "empty"),
        ("", "non-empty"),
        ("x" * 300, "longer"),
    ],
)
def test_hostile_paths_are_refused(path: str, reason: str) -> None:
    with pytest.raises(UnsafeArchiveError, match=reason):
        check_relative_path(path)
    entry = {"sha256": SHA, "size": 5, "mode": 0o644, "mtime_ns": 7}
    with pytest.raises(UnsafeArchiveError):
        parse_manifest(_bytes(_doc(files={path: entry})))


def test_links_and_holes_round_trip_and_are_left_out_when_unset() -> None:
    linked = Manifest(
        files={
            "a.txt": FileEntry(SHA, 5, 0o644, 1, sparse=True),
            "b.txt": FileEntry(SHA, 5, 0o644, 1, link="a.txt"),
            "c.txt": FileEntry(SHA, 5, 0o644, 1),
        }
    )
    encoded = linked.encode()
    assert parse_manifest(encoded) == linked
    # An entry with neither has the bytes entries had before the fields existed.
    assert b'"c.txt":{"mode":420,"mtime_ns":1,"sha256":"' + SHA.encode() + b'","size":5}' in encoded


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json at all", "not valid JSON"),
        (b"[1, 2]", "not an object"),
        (b"{}", "lacks format"),
        (_bytes(_doc(format=3)), "format 3"),
        (_bytes(_doc(format=2)), "lacks parts"),
        (_bytes(_doc(format=True)), "format True"),
        (_bytes(_doc(extra=1)), "unknown fields extra"),
        (_bytes({k: v for k, v in _doc().items() if k != "files"}), "lacks files"),
        (_bytes(_doc(revision=-1)), "out of range"),
        (_bytes(_doc(parent="../x")), "not a sha256"),
        (_bytes(_doc(dirs="a")), "not a list"),
        (_bytes(_doc(dirs=["a/b.txt"])), "file and a directory"),
        (_bytes(_doc(dirs=["e", "e"])), "directory twice"),
        (_bytes(_doc(omitted={"x": 5})), "short string"),
        (
            _bytes(_doc(files={"a": {"sha256": "00" * 32, "size": 1, "mode": 0o644}})),
            "lacks mtime_ns",
        ),
        (
            _bytes(_doc(files={"a": {"sha256": "XY", "size": 1, "mode": 0, "mtime_ns": 0}})),
            "not a sha256",
        ),
        (
            _bytes(_doc(files={"a": {"sha256": SHA, "size": 1, "mode": 0o17777, "mtime_ns": 0}})),
            "out of range",
        ),
        (
            _bytes(
                _doc(variables={"sha256": SHA, "size": 1, "saved": ["os.system"], "skipped": []})
            ),
            "Python names",
        ),
        (
            _bytes(
                _doc(
                    files={
                        "a": {"sha256": SHA, "size": 1, "mode": 0, "mtime_ns": 0, "link": "../x"}
                    }
                )
            ),
            "has a '..' component",
        ),
        (
            _bytes(
                _doc(files={"a": {"sha256": SHA, "size": 1, "mode": 0, "mtime_ns": 0, "link": "a"}})
            ),
            "not another path",
        ),
        (
            _bytes(
                _doc(files={"a": {"sha256": SHA, "size": 1, "mode": 0, "mtime_ns": 0, "sparse": 1}})
            ),
            "not a boolean",
        ),
        (b'{"format": 1, "format": 1}', "duplicate key"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (_bytes(_doc(created_at=1.0)).replace(b"1.0", b"NaN"), "not valid JSON"),
    ],
)
def test_malformed_manifests_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(UnsafeArchiveError, match=message):
        parse_manifest(data)


def test_duplicate_file_path_in_json_is_refused() -> None:
    entry = json.dumps({"sha256": SHA, "size": 5, "mode": 420, "mtime_ns": 7})
    data = _bytes(_doc(files={})).replace(
        b'"files": {}', f'"files": {{"a": {entry}, "a": {entry}}}'.encode()
    )
    with pytest.raises(UnsafeArchiveError, match="duplicate key 'a'"):
        parse_manifest(data)


def test_file_below_a_file_is_refused() -> None:
    entry = {"sha256": SHA, "size": 5, "mode": 0o644, "mtime_ns": 7}
    with pytest.raises(UnsafeArchiveError, match="below the file 'a'"):
        parse_manifest(_bytes(_doc(files={"a": entry, "a/b/c": entry}, dirs=[])))
    with pytest.raises(UnsafeArchiveError, match="below the file 'a'"):
        parse_manifest(_bytes(_doc(files={"a": entry}, dirs=["a/sub"])))


def test_size_limits_are_enforced_before_anything_is_restored() -> None:
    ten_gb = {"sha256": SHA, "size": 10 * 1024**3, "mode": 0o644, "mtime_ns": 0}
    with pytest.raises(UnsafeArchiveError, match="max_file_bytes"):
        parse_manifest(_bytes(_doc(files={"huge.bin": ten_gb})))

    limits = SnapshotLimits(max_file_bytes=100, max_total_bytes=150)
    entry = {"sha256": SHA, "size": 100, "mode": 0o644, "mtime_ns": 0}
    with pytest.raises(UnsafeArchiveError, match="max_total_bytes"):
        parse_manifest(_bytes(_doc(files={"a": entry, "b": entry})), limits)


def _manifest_with_files(count: int) -> bytes:
    entry = json.dumps({"sha256": SHA, "size": 1, "mode": 420, "mtime_ns": 0})
    files = ",".join(f'"f{i}":{entry}' for i in range(count))
    return (
        '{"format":1,"revision":0,"created_at":0,"parent":null,"dirs":[],"omitted":{},'
        f'"variables":null,"files":{{{files}}}}}'
    ).encode()


def test_a_manifest_listing_a_million_files_is_refused_before_parsing() -> None:
    with pytest.raises(UnsafeArchiveError, match="max_manifest_bytes"):
        parse_manifest(_manifest_with_files(1_000_000))


def test_a_manifest_listing_more_files_than_allowed_is_refused() -> None:
    data = _manifest_with_files(1001)
    assert len(parse_manifest(data, SnapshotLimits(max_files=1001)).files) == 1001
    with pytest.raises(UnsafeArchiveError, match="max_files"):
        parse_manifest(data, SnapshotLimits(max_files=1000))
