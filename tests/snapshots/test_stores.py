"""The blob stores: one behaviour, checked on the local directory and on real LangGraph stores."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore

from langchain_sandbox.errors import (
    InvalidInputError,
    ProviderUnavailableError,
    SandboxError,
    SnapshotNotFoundError,
    UnsafeArchiveError,
)
from langchain_sandbox.snapshots.langgraph_store import LangGraphStoreBlobStore
from langchain_sandbox.snapshots.local_store import (
    HOME_ENV,
    LocalDirectoryBlobStore,
    default_blob_dir,
)
from langchain_sandbox.snapshots.store import BlobStore, digest


@pytest.fixture(params=["local", "memory", "sqlite", "sqlite-sync"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "local":
        yield LocalDirectoryBlobStore(tmp_path / "blobs")
    elif request.param == "memory":
        yield LangGraphStoreBlobStore(InMemoryStore())
    elif request.param == "sqlite-sync":
        # A store without async methods: driven through its sync batch in a thread.
        from langgraph.store.sqlite import SqliteStore

        with SqliteStore.from_conn_string(str(tmp_path / "sync.db")) as sync_store:
            sync_store.setup()
            yield LangGraphStoreBlobStore(sync_store)
    else:
        from langgraph.store.sqlite.aio import AsyncSqliteStore

        async with AsyncSqliteStore.from_conn_string(str(tmp_path / "store.db")) as sqlite_store:
            await sqlite_store.setup()
            yield LangGraphStoreBlobStore(sqlite_store, namespace=("tests", "blobs"))


async def test_put_get_missing_delete_and_list(store: BlobStore) -> None:
    blobs = {digest(data): data for data in (b"one", b"two", bytes(range(256)) * 1000)}
    keys = list(blobs)
    assert await store.missing(keys) == set(keys)
    await store.put(keys[0], blobs[keys[0]])
    await store.put_many({k: blobs[k] for k in keys[1:]})
    await store.put(keys[0], blobs[keys[0]])  # a second put of the same blob is harmless
    assert await store.missing(keys) == set()
    assert await store.get(keys[2]) == blobs[keys[2]]
    assert await store.get_many(keys) == blobs

    listed = {info.key: info.size async for info in store.iter_blobs()}
    assert listed == {k: len(v) for k, v in blobs.items()}

    await store.delete([keys[0], digest(b"never stored")])
    assert await store.missing(keys) == {keys[0]}
    with pytest.raises(SnapshotNotFoundError, match=keys[0]):
        await store.get(keys[0])
    with pytest.raises(SnapshotNotFoundError):
        await store.get_many(keys)
    assert {info.key async for info in store.iter_blobs()} == set(keys[1:])


@pytest.mark.parametrize("key", ["../../etc/passwd", "ab/cd", "A" * 64, "0" * 63, "", "x.y"])
async def test_keys_that_are_not_digests_are_refused(store: BlobStore, key: str) -> None:
    with pytest.raises(InvalidInputError, match="not a lowercase sha256"):
        await store.put(key, b"data")
    with pytest.raises(InvalidInputError):
        await store.get(key)
    with pytest.raises(InvalidInputError):
        await store.missing([key])


async def test_local_store_is_private_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = LocalDirectoryBlobStore(tmp_path / "deep" / "blobs")
    data = b"secret workspace content"
    await store.put(digest(data), data)
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700
    blob_path = store.root / digest(data)[:2] / digest(data)[2:]
    assert stat.S_IMODE(os.stat(blob_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(blob_path.parent).st_mode) == 0o700
    assert [p.name for p in blob_path.parent.iterdir()] == [blob_path.name]
    # A leftover temporary file of an interrupted write is not a blob.
    (blob_path.parent / ".tmp-abandoned").write_bytes(b"partial")
    assert [info.key async for info in store.iter_blobs()] == [digest(data)]


def test_default_location_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    assert default_blob_dir() == tmp_path / "home" / "blobs"
    monkeypatch.delenv(HOME_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_blob_dir() == tmp_path / "xdg" / "langchain-sandbox" / "blobs"


async def test_base_store_value_that_is_not_base64_is_refused() -> None:
    backing = InMemoryStore()
    store = LangGraphStoreBlobStore(backing, namespace=("t",))
    key = digest(b"x")
    await backing.aput(("t", "data"), key, {"b64": "%%% not base64 %%%"})
    with pytest.raises(UnsafeArchiveError, match="not base64"):
        await store.get(key)


async def test_base_store_lists_many_blobs_across_pages() -> None:
    store = LangGraphStoreBlobStore(InMemoryStore())
    blobs = {digest(str(i).encode()): str(i).encode() for i in range(1234)}
    await store.put_many(blobs)
    assert {info.key async for info in store.iter_blobs()} == set(blobs)


async def test_local_store_failures_are_typed_and_do_not_name_host_paths(tmp_path: Path) -> None:
    store = LocalDirectoryBlobStore(tmp_path / "blobs")
    key = digest(b"data")
    # A file where the blob's fan-out directory must go: the write cannot succeed. (The store
    # makes its root at its first write; here the test makes it first.)
    store.root.mkdir(parents=True, exist_ok=True)
    (store.root / key[:2]).write_bytes(b"in the way")
    with pytest.raises(SandboxError) as caught:
        await store.put(key, b"data")
    assert not caught.value.retryable
    assert str(tmp_path) not in str(caught.value)
    with pytest.raises(SnapshotNotFoundError) as missing:
        await store.get(digest(b"other"))
    assert str(tmp_path) not in str(missing.value)


async def test_base_store_failures_become_retryable_errors(tmp_path: Path) -> None:
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    async with AsyncSqliteStore.from_conn_string(str(tmp_path / "s.db")) as sqlite_store:
        await sqlite_store.setup()
        store = LangGraphStoreBlobStore(sqlite_store)
    # The connection is closed now, as after a database restart.
    with pytest.raises(ProviderUnavailableError, match="AsyncSqliteStore") as caught:
        await store.missing([digest(b"x")])
    assert caught.value.retryable
    assert str(tmp_path) not in str(caught.value)


@pytest.mark.parametrize("namespace", [(), ("a.b",), ("langgraph", "x"), ("ok", "")])
def test_base_store_namespace_follows_langgraph_rules(namespace: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInputError, match="namespace"):
        LangGraphStoreBlobStore(InMemoryStore(), namespace=namespace)
