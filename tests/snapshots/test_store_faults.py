"""A damaged blob store: a base that cannot be read is dropped, a corrupt blob is found and
rewritten from the file it holds, and a restore loses only what is really gone."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

import pytest
from langgraph.store.memory import InMemoryStore

from langchain_sandbox.providers.base import Session
from langchain_sandbox.snapshots import (
    LangGraphStoreBlobStore,
    LocalDirectoryBlobStore,
    Snapshotter,
)
from langchain_sandbox.snapshots import _knowledge as snapshotter_module
from langchain_sandbox.snapshots.store import BlobStore, digest

SessionFactory = Callable[[], Awaitable[Session]]
CONTENT = b"precious " * 100


async def garble(store: BlobStore, key: str) -> None:
    """Replace a stored blob by other bytes of the same length, behind the store's back."""
    bad = bytes(len(await store.get(key)))
    if isinstance(store, LocalDirectoryBlobStore):
        (store.root / key[:2] / key[2:]).write_bytes(bad)
    else:
        assert isinstance(store, LangGraphStoreBlobStore)
        await store.store.aput(store._data_ns, key, {"b64": base64.b64encode(bad).decode()})
    assert await store.get(key) == bad


@pytest.fixture(params=["local", "langgraph"])
def any_store(request: pytest.FixtureRequest, store: LocalDirectoryBlobStore) -> BlobStore:
    return store if request.param == "local" else LangGraphStoreBlobStore(InMemoryStore())


async def test_a_corrupt_base_is_dropped_and_the_next_capture_is_complete(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    session = await new_session()
    await session.write_files({"a.txt": CONTENT, "b.txt": b"b"})
    first = await Snapshotter(any_store).capture(session, revision=1)
    await garble(any_store, first.ref)

    # A new process: the only knowledge of the files is the (corrupt) base.
    second = await Snapshotter(any_store).capture(session, base=first.ref, revision=2)
    assert second.parent is None  # the unreadable base is not named as the parent
    assert second.bytes_read == len(CONTENT) + 1  # complete: every file read again
    fresh = await new_session()
    await Snapshotter(any_store).restore(fresh, second.ref)
    assert await fresh.read_files(["a.txt", "b.txt"]) == {"a.txt": CONTENT, "b.txt": b"b"}


async def test_a_rewritten_file_repairs_its_corrupt_blob(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    session = await new_session()
    snapshotter = Snapshotter(any_store)
    await session.write_files({"a.txt": CONTENT, "b.txt": b"b"})
    await snapshotter.capture(session, revision=1)
    await garble(any_store, digest(CONTENT))
    await session.write_files({"a.txt": CONTENT})  # same content, new mtime: read again
    info = await snapshotter.capture(session, revision=2)
    assert info.blobs_written == 3  # the repaired blob, the changed manifest part, the root
    assert await any_store.get(digest(CONTENT)) == CONTENT

    fresh = await new_session()
    report = await Snapshotter(any_store).restore(fresh, info.ref)
    assert report.files_lost == ()
    assert await fresh.read_files(["a.txt"]) == {"a.txt": CONTENT}


async def test_a_blob_a_restore_found_corrupt_is_not_reused_by_the_next_capture(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    source = await new_session()
    snapshotter = Snapshotter(any_store)
    await source.write_files({"a.txt": CONTENT, "b.txt": b"b"})
    await source.run_code("x = 7")
    first = await snapshotter.capture(source, revision=1)
    await garble(any_store, digest(CONTENT))

    fresh = await new_session()
    report = await snapshotter.restore(fresh, first.ref)
    assert report.files_lost == ("a.txt",)
    assert report.variables_restored == ("x",)
    assert await fresh.read_files(["b.txt"]) == {"b.txt": b"b"}
    assert not (await fresh.run_command("test -e a.txt")).ok

    # The source still has the file, unchanged: the next capture reads it instead of trusting
    # its cached hash, and stores a good copy.
    second = await snapshotter.capture(source, base=first.ref, revision=2)
    assert second.bytes_read >= len(CONTENT)
    other = await new_session()
    again = await Snapshotter(any_store).restore(other, second.ref)
    assert again.files_lost == ()
    assert await other.read_files(["a.txt"]) == {"a.txt": CONTENT}


async def test_a_corrupt_variables_blob_costs_the_variables_not_the_files(
    new_session: SessionFactory, any_store: BlobStore
) -> None:
    source = await new_session()
    snapshotter = Snapshotter(any_store)
    await source.write_files({"a.txt": CONTENT})
    await source.run_code("x = 7")
    info = await snapshotter.capture(source, revision=1)
    manifest = await snapshotter.load_manifest(info.ref)
    assert manifest.variables is not None
    await garble(any_store, manifest.variables.sha256)

    fresh = await new_session()
    report = await Snapshotter(any_store).restore(fresh, info.ref)
    assert await fresh.read_files(["a.txt"]) == {"a.txt": CONTENT}
    assert report.variables_lost == ("x",)
    assert any("variables were not restored" in n and "x" in n for n in report.notices)


@pytest.mark.parametrize("damaged", [0, -1])
async def test_a_corrupt_manifest_part_costs_the_files_it_lists_and_gc_keeps_the_rest(
    new_session: SessionFactory, any_store: BlobStore, damaged: int
) -> None:
    """A format 2 manifest lists its files in parts. One part is damaged: gc keeps what the
    other parts, and the root (the variables), need (only the contents no readable part names
    go); a restore brings all of that back and counts the files it could not (their names were
    in the damaged part)."""
    source = await new_session()
    snapshotter = Snapshotter(any_store)
    files = {f"f{i:03}.txt": f"file {i}".encode() for i in range(400)}
    await source.write_files(files)
    await source.run_code("x = 7")
    info = await snapshotter.capture(source, revision=1)
    parts = (await snapshotter.load_manifest(info.ref)).parts
    assert len(parts) >= 2
    await garble(any_store, parts[damaged].sha256)

    report = await Snapshotter(any_store).collect_garbage([info.ref], grace_seconds=0)
    # The files are small: their contents were packed into the parts, the damaged one
    # included, so no blob of theirs is left for gc to find unreferenced.
    assert report.deleted_blobs == 0, report

    fresh = await new_session()
    restored = await Snapshotter(any_store).restore(fresh, info.ref)
    assert restored.files_unlisted == parts[damaged].files
    assert restored.variables_restored == ("x",)
    names, start = sorted(files), sum(part.files for part in parts[: damaged % len(parts)])
    kept = names[:start] + names[start + parts[damaged].files :]
    assert await fresh.read_files(kept) == {path: files[path] for path in kept}
    assert f"{parts[damaged].files} file(s) could not be restored because the part" in " ".join(
        restored.notices
    )

    # The restored session's next snapshot is whole and names no damaged part.
    await fresh.write_files({"new.txt": b"new"})
    again = await snapshotter.capture(fresh, base=info.ref, revision=2)
    assert parts[damaged].sha256 not in {
        p.sha256 for p in (await snapshotter.load_manifest(again.ref)).parts
    }
    other = await new_session()
    await Snapshotter(any_store).restore(other, again.ref)
    expected = {**{path: files[path] for path in kept}, "new.txt": b"new"}
    assert await other.read_files(sorted(expected)) == expected


async def test_a_part_damaged_while_the_session_is_live_is_rewritten_when_the_store_is_rechecked(
    new_session: SessionFactory, any_store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Captures reuse a part they trust the store to hold without reading it; once that trust
    is due again (STORE_RECHECK_SECONDS), every part is checked and a damaged one rewritten, so
    a restore gets every file back."""
    session = await new_session()
    snapshotter = Snapshotter(any_store)
    files = {f"f{i:03}.txt": f"file {i}".encode() for i in range(300)}
    await session.write_files(files)
    first = await snapshotter.capture(session, revision=1)
    parts = (await snapshotter.load_manifest(first.ref)).parts
    await garble(any_store, parts[0].sha256)
    await session.run_code("x = 1")
    monkeypatch.setattr(snapshotter_module, "STORE_RECHECK_SECONDS", 0.0)

    second = await snapshotter.capture(session, base=first.ref, revision=2)

    fresh = await new_session()
    report = await Snapshotter(any_store).restore(fresh, second.ref)
    assert report.files_lost == ()
    assert report.files_unlisted == 0
    assert await fresh.read_files(sorted(files)) == files
