"""Hostile or broken manifests are refused before anything is written, and the session stays
usable; a blob that is missing or does not match its hash costs its own file, never the rest."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox.errors import (
    InvalidInputError,
    SnapshotNotFoundError,
    UnsafeArchiveError,
)
from langchain_sandbox.providers.base import Session
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots.store import digest

SessionFactory = Callable[[], Awaitable[Session]]
GOOD = b"good"


def manifest_doc(files: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "revision": 1,
        "created_at": 0.0,
        "parent": None,
        "files": files,
        "dirs": [],
        "omitted": {},
        "variables": None,
        **extra,
    }


def entry(size: int = len(GOOD), sha: str = digest(GOOD)) -> dict[str, Any]:
    return {"sha256": sha, "size": size, "mode": 0o644, "mtime_ns": 0}


async def put_manifest(store: LocalDirectoryBlobStore, data: bytes | dict[str, Any]) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    await store.put(digest(raw), raw)
    return digest(raw)


def million_files() -> bytes:
    one = json.dumps(entry())
    files = ",".join(f'"f{i}":{one}' for i in range(1_000_000))
    return (
        '{"format":1,"revision":0,"created_at":0,"parent":null,"dirs":[],"omitted":{},'
        f'"variables":null,"files":{{{files}}}}}'
    ).encode()


HOSTILE: dict[str, tuple[bytes | dict[str, Any], str]] = {
    "dotdot": (manifest_doc({"../../escaped.txt": entry()}), "'..' component"),
    "dotdot-inside": (manifest_doc({"a/../../escaped.txt": entry()}), "'..' component"),
    "absolute": (manifest_doc({"/tmp/escaped.txt": entry()}), "is absolute"),
    "absolute-workspace": (manifest_doc({"/home/user/escaped.txt": entry()}), "is absolute"),
    "backslash": (manifest_doc({"..\\escaped.txt": entry()}), "backslash"),
    "file-below-file": (
        manifest_doc({"a": entry(), "a/escaped.txt": entry()}),
        "below the file 'a'",
    ),
    "ten-gigabytes": (manifest_doc({"huge.bin": entry(size=10 * 1024**3)}), "max_file_bytes"),
    "a-million-files": (million_files(), "max_manifest_bytes"),
    "not-json": (b"\x00\x01 definitely not a manifest", "not valid JSON"),
    "unknown-format": (manifest_doc({}, format=99), "format 99"),
}


@pytest.fixture
async def session(new_session: SessionFactory) -> Session:
    session = await new_session()
    await session.write_files({"sentinel.txt": b"untouched", "dir/keep.txt": b"kept"})
    return session


async def assert_untouched_and_usable(session: Session, tmp_path: Path) -> None:
    listing = await session.list_files(".", recursive=True)
    assert {"dir", "dir/keep.txt", "sentinel.txt"} <= {info.path for info in listing}
    assert {info.path for info in listing} <= {"dir", "dir/keep.txt", "sentinel.txt", ".packages"}
    assert await session.read_files(["sentinel.txt"]) == {"sentinel.txt": b"untouched"}
    assert (await session.run_code("6 * 7")).value == "42"
    assert not escaped_files(tmp_path)


def escaped_files(tmp_path: Path) -> list[Path]:
    """Files a hostile snapshot tried to plant, anywhere under the test's directory."""
    return list(tmp_path.rglob("escaped.txt"))


@pytest.mark.parametrize("case", list(HOSTILE))
async def test_hostile_manifest_is_refused_and_nothing_is_written(
    case: str,
    session: Session,
    store: LocalDirectoryBlobStore,
    snapshotter: Snapshotter,
    tmp_path: Path,
) -> None:
    data, message = HOSTILE[case]
    await store.put(digest(GOOD), GOOD)
    ref = await put_manifest(store, data)
    with pytest.raises(UnsafeArchiveError, match=message):
        await snapshotter.restore(session, ref)
    await assert_untouched_and_usable(session, tmp_path)


async def test_blob_that_does_not_match_its_hash_costs_only_its_file(
    session: Session, store: LocalDirectoryBlobStore, snapshotter: Snapshotter, tmp_path: Path
) -> None:
    # A store that returns other bytes (same length) under the key of GOOD.
    await store.put(digest(GOOD), b"evil")
    await store.put(digest(b"fine"), b"fine")
    ref = await put_manifest(
        store, manifest_doc({"fine.txt": entry(sha=digest(b"fine")), "escaped.txt": entry()})
    )
    report = await snapshotter.restore(session, ref)
    # The bad bytes never reach the session; everything else of the snapshot does.
    assert report.files_lost == ("escaped.txt",)
    assert not escaped_files(tmp_path)
    listing = {info.path for info in await session.list_files(".", recursive=True)}
    assert listing - {".packages"} == {"fine.txt"}
    assert await session.read_files(["fine.txt"]) == {"fine.txt": b"fine"}
    assert "Restored the workspace to revision 1 (1 of 2 files, 4 bytes)." in report.notices
    assert any(
        "1 file(s) could not be restored because their stored copy is missing or corrupt: "
        "escaped.txt." in notice
        for notice in report.notices
    )
    assert (await session.run_code("6 * 7")).value == "42"


async def test_manifest_that_does_not_match_its_ref_is_refused(
    session: Session, store: LocalDirectoryBlobStore, snapshotter: Snapshotter, tmp_path: Path
) -> None:
    await store.put(digest(GOOD), GOOD)
    genuine = json.dumps(manifest_doc({"escaped.txt": entry()})).encode()
    await store.put(digest(b"another manifest"), genuine)
    with pytest.raises(UnsafeArchiveError, match="does not match its hash"):
        await snapshotter.restore(session, digest(b"another manifest"))
    await assert_untouched_and_usable(session, tmp_path)


async def test_missing_blobs_cost_their_files_and_missing_snapshots_are_not_found(
    session: Session,
    new_session: SessionFactory,
    store: LocalDirectoryBlobStore,
    snapshotter: Snapshotter,
    tmp_path: Path,
) -> None:
    await store.put(digest(b"fine"), b"fine")
    ref = await put_manifest(
        store, manifest_doc({"fine.txt": entry(sha=digest(b"fine")), "escaped.txt": entry()})
    )
    # A new session: a missing blob costs its file, never the rest of the snapshot.
    fresh = await new_session()
    report = await snapshotter.restore(fresh, ref)
    assert report.files_lost == ("escaped.txt",)
    assert await fresh.read_files(["fine.txt"]) == {"fine.txt": b"fine"}
    assert not escaped_files(tmp_path)
    with pytest.raises(SnapshotNotFoundError):
        await snapshotter.restore(session, digest(b"no such snapshot"))
    with pytest.raises(InvalidInputError, match="not a sha256"):
        await snapshotter.restore(session, "../../etc/passwd")
    await assert_untouched_and_usable(session, tmp_path)
