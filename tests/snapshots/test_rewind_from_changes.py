"""A rewind of a live session works from what changed: it compares the target's manifest with the
snapshot the session was last made equal to, part by part, adds what the session's change listing
reports, and writes only the difference; it still restores exactly the target (files, extras
removed, modes, directories, variables), on every provider, and falls back to the full restore
when the session's knowledge is not to be trusted. Calls are counted, never timed."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import pytest

from langchain_sandbox.providers.base import (
    ChangeListing,
    FileInfo,
    FileMetadata,
    Provider,
    Session,
)
from langchain_sandbox.results import ExecutionResult
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots import _knowledge as snapshotter_module

State = tuple[str, str, str]


@pytest.fixture(params=["local", "e2b", "runloop", "kubernetes"])
async def any_provider(
    request: pytest.FixtureRequest, provider: Provider
) -> AsyncIterator[Provider]:
    if request.param == "local":
        yield provider
        return
    emulated: Any
    if request.param == "e2b":
        from langchain_sandbox.testing.e2b_emulator import emulated_e2b_provider as emulated
    elif request.param == "kubernetes":
        from langchain_sandbox.testing.kubernetes_emulator import (
            emulated_kubernetes_provider as emulated,
        )
    else:
        from langchain_sandbox.testing.runloop_emulator import (
            emulated_runloop_provider as emulated,
        )
    async with emulated() as remote:
        yield remote


async def _state(session: Session) -> State:
    """Every path with its kind and permission bits, every file's sha256, and the variable
    ``counter``, each in one request (remote providers serve files one request each)."""
    paths = await session.run_command("find . -mindepth 1 -printf '%y %m %p\\n' | sort")
    sums = await session.run_command("find . -type f -exec sha256sum {} + | sort")
    assert paths.exit_code == sums.exit_code == 0
    counter = (await session.run_code("counter")).value or ""
    return paths.stdout, sums.stdout, counter


async def _shell(session: Session, command: str) -> None:
    result = await session.run_command(command)
    assert result.exit_code == 0, result.stderr


async def test_a_rewind_after_many_steps_restores_exactly_the_target(
    any_provider: Provider, snapshotter: Snapshotter
) -> None:
    session = await any_provider.create()
    try:
        await session.write_files({f"d{i % 9}/f{i:04d}.txt": os.urandom(60) for i in range(300)})
        await session.write_files({"run.sh": b"#!/bin/sh\necho ok\n"})
        await _shell(session, "chmod 755 run.sh && mkdir -p empty/dir")
        await session.run_code("counter = 1")
        refs = [(await snapshotter.capture(session, revision=1)).ref]
        expected = [await _state(session)]
        steps = [
            "echo one > d1/f0001.txt && rm d2/f0002.txt && mkdir -p new && echo x > new/y",
            "chmod 644 run.sh && rm -r empty && echo added > d4/added.txt",
            "rm -r d5 && echo was-a-dir > d5",
            "chmod 600 d6/f0006.txt && echo two >> d7/f0007.txt && rm -r new",
        ]
        for revision, command in enumerate(steps, start=2):
            await _shell(session, command)
            await session.run_code(f"counter = {revision}")
            info = await snapshotter.capture(session, base=refs[-1], revision=revision)
            refs.append(info.ref)
            expected.append(await _state(session))
        # Changes no capture saw, made by the sandbox after the last one.
        await _shell(session, "echo stray > d3/stray.txt && rm d8/f0008.txt && mkdir stray")
        await session.run_code("counter = 99")

        # Back, forward, back again: each rewind starts from what the one before left.
        for index in (0, 2, 0, 4, 1, 3):
            report = await snapshotter.restore(session, refs[index])
            assert report.complete, report.notices
            assert await _state(session) == expected[index], f"rewind to revision {index + 1}"
        # The knowledge a rewind leaves is right: a capture now reads nothing and is the target.
        again = await snapshotter.capture(session, base=refs[3], revision=9)
        assert again.bytes_read == 0
        manifest = await Snapshotter(snapshotter.store).load_manifest(again.ref)
        target = await Snapshotter(snapshotter.store).load_manifest(refs[3])
        assert {p: e.sha256 for p, e in manifest.files.items()} == {
            p: e.sha256 for p, e in target.files.items()
        }
    finally:
        await session.close()


class _CountedSession:
    """Records every call a snapshotter makes on a real session, with the paths it names (a
    restore's writes with their metadata count as writes)."""

    def __init__(self, session: Session) -> None:
        self.calls: list[str] = []
        self.written: list[str] = []
        self.commands: list[str] = []
        self.since: list[object | None] = []
        self.listed: list[str] = []
        listed, changes, read, write, restored, command = (
            session.list_files,
            session.list_changes,
            session.read_files,
            session.write_files,
            session.write_restored,
            session.run_command,
        )

        async def list_files(path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
            self.calls.append("list_files")
            self.listed.append(path + ("/**" if recursive else ""))
            return await listed(path, recursive=recursive)

        async def list_changes(
            known: Mapping[str, FileInfo], *args: Any, **kwargs: Any
        ) -> ChangeListing:
            self.calls.append("list_changes")
            self.since.append(kwargs.get("since"))
            return await changes(known, *args, **kwargs)

        async def read_files(paths: Sequence[str]) -> dict[str, bytes]:
            self.calls.append("read_files")
            return await read(paths)

        async def write_files(files: Mapping[str, bytes]) -> None:
            self.calls.append("write_files")
            self.written.extend(files)
            await write(files)

        async def write_restored(
            files: Mapping[str, bytes], metadata: Mapping[str, FileMetadata]
        ) -> list[str]:
            self.calls.append("write_files")
            self.written.extend(files)
            return await restored(files, metadata)

        async def run_command(text: str, **kwargs: Any) -> ExecutionResult:
            self.calls.append("run_command")
            self.commands.append(text)
            return await command(text, **kwargs)

        session.list_files = list_files  # type: ignore[method-assign]
        session.list_changes = list_changes  # type: ignore[method-assign]
        session.read_files = read_files  # type: ignore[method-assign]
        session.write_files = write_files  # type: ignore[method-assign]
        session.write_restored = write_restored  # type: ignore[method-assign]
        session.run_command = run_command  # type: ignore[method-assign,assignment]

    def reset(self) -> None:
        self.calls.clear()
        self.written.clear()
        self.commands.clear()
        self.since.clear()
        self.listed.clear()


def _count_lookups(store: LocalDirectoryBlobStore) -> list[str]:
    """Every key the real ``store`` is asked about from now on (its ``missing``)."""
    looked_up: list[str] = []
    missing = store.missing

    async def counted(keys: Iterable[str]) -> set[str]:
        keys = list(keys)
        looked_up.extend(keys)
        return await missing(keys)

    store.missing = counted  # type: ignore[method-assign]
    return looked_up


FILES = 3000


async def _many_files(session: Session) -> list[str]:
    paths = [f"d{i // 100:02d}/f{i:05d}.txt" for i in range(FILES)]
    await session.write_files({path: os.urandom(100) for path in paths})
    await session.run_code("counter = 1")
    return paths


async def test_a_one_file_rewind_writes_one_file_and_lists_only_what_changed(
    provider: Provider, store: LocalDirectoryBlobStore
) -> None:
    looked_up = _count_lookups(store)
    snapshotter = Snapshotter(store)
    session = await provider.create()
    try:
        counted = _CountedSession(session)
        paths = await _many_files(session)
        first = await snapshotter.capture(session, revision=1)
        await session.write_files({paths[1234]: b"changed"})
        await snapshotter.capture(session, base=first.ref, revision=2)
        counted.reset()
        looked_up.clear()

        report = await snapshotter.restore(session, first.ref)

        assert report.complete
        assert (report.files_written, report.paths_removed) == (1, 0)
        assert counted.written == [paths[1234]]
        # The workspace is compared through one change listing since the last one; after
        # writing, only the written file's directory is listed; nothing is read or chmod-ed.
        assert counted.calls == ["list_changes", "write_files", "list_files"]
        assert counted.since[0] is not None
        assert counted.listed == ["d12"]
        # The store is asked about the written file's blob and the variables, not about the
        # blobs of the files the target shares with the session's snapshot.
        assert len(looked_up) <= 3
        assert len((await session.read_files([paths[1234]]))[paths[1234]]) == 100

        # A mode the sandbox changed since is restored by one chmod of that file alone.
        await _shell(session, f"chmod 700 {paths[7]}")
        counted.reset()
        report = await snapshotter.restore(session, first.ref)
        assert report.complete
        assert counted.written == []
        assert len(counted.commands) == 1
        assert paths[7] in counted.commands[0]
        assert paths[8] not in counted.commands[0]
        modes = {i.path: i.mode & 0o777 for i in await session.list_files("d00")}
        assert modes[paths[7]] == 0o644
    finally:
        await session.close()


@pytest.mark.parametrize("drop", ["new snapshotter", "store not confirmed", "after gc"])
async def test_a_rewind_without_trusted_knowledge_takes_the_full_path(
    provider: Provider,
    store: LocalDirectoryBlobStore,
    monkeypatch: pytest.MonkeyPatch,
    drop: str,
) -> None:
    looked_up = _count_lookups(store)
    snapshotter = Snapshotter(store)
    session = await provider.create()
    try:
        paths = await _many_files(session)
        first = await snapshotter.capture(session, revision=1)
        expected = await _state(session)
        await session.write_files({paths[10]: b"changed", "extra/new.txt": b"extra"})
        await session.run_code("counter = 2")
        await snapshotter.capture(session, base=first.ref, revision=2)
        await _shell(session, f"rm {paths[20]} && mkdir -p stray/dir")
        if drop == "new snapshotter":
            snapshotter = Snapshotter(store)
        elif drop == "store not confirmed":
            monkeypatch.setattr(snapshotter_module, "STORE_RECHECK_SECONDS", 0.0)
        else:
            await snapshotter.collect_garbage([first.ref], grace_seconds=0)
        looked_up.clear()

        report = await snapshotter.restore(session, first.ref)

        assert report.complete, report.notices
        assert (report.files_written, report.paths_removed) == (2, 2)
        assert await _state(session) == expected
        # The full path: every blob of the snapshot is looked up in the store again (its
        # parts, which pack the small files, and the variables), not the few of a scoped rewind.
        needed = (await Snapshotter(store).load_manifest(first.ref)).blob_keys()
        assert len(needed) > 3
        assert set(looked_up) >= needed
    finally:
        await session.close()


async def test_a_rewind_gives_modes_back_as_a_restore_into_a_new_sandbox(
    provider: Provider, snapshotter: Snapshotter
) -> None:
    """A group-writable file far from the one that changed (in a manifest part the target shares
    with the session's snapshot) still comes back with the safe mode, and is named, as in a
    restore into a new sandbox."""
    session = await provider.create()
    fresh = await provider.create()
    try:
        paths = await _many_files(session)
        await _shell(session, f"chmod 664 {paths[5]} && chmod 755 {paths[6]}")
        first = await snapshotter.capture(session, revision=1)
        await session.write_files({paths[2900]: b"after"})
        await snapshotter.capture(session, base=first.ref, revision=2)

        rewind = await snapshotter.restore(session, first.ref)
        restore = await snapshotter.restore(fresh, first.ref)

        assert await _state(session) == await _state(fresh)
        modes = {i.path: i.mode & 0o777 for i in await session.list_files("d00")}
        assert modes[paths[5]] == 0o644
        assert modes[paths[6]] == 0o755
        assert rewind.notices == restore.notices
        assert any(paths[5] in notice for notice in rewind.notices)
    finally:
        with contextlib.suppress(Exception):
            await fresh.close()
        await session.close()
