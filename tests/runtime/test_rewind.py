"""Going back to an earlier checkpoint of the same thread rewinds the live sandbox: only the files
that differ are written, files the checkpoint did not have are removed, the variables are those of
the checkpoint, and the result is the same, byte for byte, as a fresh restore. On the real local
provider; writes are counted, never timed."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from langchain_sandbox.core.rehydration import RehydrationEngine
from langchain_sandbox.core.thread import ThreadSandbox
from langchain_sandbox.providers.base import FileMetadata, Provider, Session
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.results import ExecutionResult
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.state import SandboxState

_VARIABLES = (
    "import json\n"
    "print(json.dumps(sorted((k, repr(v)) for k, v in globals().items()"
    " if not k.startswith('_') and k != 'json')))"
)


class _CountingHost:
    """Real local sessions; every path any of them is asked to write (plainly or as a restore) is
    recorded."""

    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self.sessions: list[Session] = []
        self.written: list[str] = []

    async def provider(self) -> Provider:
        return self._provider

    async def create(self, thread_id: str) -> Session:
        session = await self._provider.create()
        write = session.write_files
        restore = session.write_restored

        async def counted(files: Mapping[str, bytes]) -> None:
            self.written.extend(files)
            await write(files)

        async def counted_restore(
            files: Mapping[str, bytes], metadata: Mapping[str, FileMetadata]
        ) -> list[str]:
            self.written.extend(files)
            return await restore(files, metadata)

        session.write_files = counted  # type: ignore[method-assign]
        session.write_restored = counted_restore  # type: ignore[method-assign]
        self.sessions.append(session)
        return session

    async def close(self, session: Session) -> None:
        await session.close()

    def close_soon(self, session: Session) -> None:
        raise AssertionError("no call is cancelled here")


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[LocalProvider]:
    local = LocalProvider(base_dir=tmp_path / "sandboxes")
    yield local
    await local.aclose()


async def _state(session: Session) -> tuple[dict[str, str], set[str], str]:
    """Files (path -> sha256), directories, and the user's variables, of a session."""
    listing = await session.list_files(".", recursive=True)
    paths = [info.path for info in listing if info.kind == "file"]
    contents = await session.read_files(paths)
    files = {path: hashlib.sha256(data).hexdigest() for path, data in contents.items()}
    dirs = {info.path for info in listing if info.kind == "dir"}
    variables = (await session.run_code(_VARIABLES)).stdout
    return files, dirs, variables


class _Steps:
    """Calls of one thread through a rehydration engine over real local sessions; each call
    keeps the record and notices it returned."""

    def __init__(self, host: _CountingHost, snapshotter: Snapshotter) -> None:
        self.engine = RehydrationEngine(host, snapshotter=snapshotter, persist="every_call")
        self.thread = ThreadSandbox("t")
        self.record: SandboxState = {}
        self.notices: list[str] = []

    async def __call__(self, code: str, record: SandboxState | None = None) -> ExecutionResult:
        outcome = await self.engine.run(
            self.thread, lambda session: session.run_code(code), record=record
        )
        self.record, self.notices = outcome.record, outcome.notices
        return outcome.value


async def test_a_rewind_writes_only_what_differs_and_equals_a_fresh_restore(
    provider: LocalProvider, tmp_path: Path
) -> None:
    host = _CountingHost(provider)
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs", durable=False))
    step = _Steps(host, snapshotter)

    fill = (
        "import os\n"
        "for i in range(300):\n"
        "    os.makedirs(f'd{i % 5}', exist_ok=True)\n"
        "    open(f'd{i % 5}/f{i}.txt', 'w').write(f'file {i}\\n' * 10)\n"
        "os.makedirs('empty/dir')\n"
        "a = 1\nitems = [1, 2]\n"
    )
    assert (await step(fill)).ok
    checkpoint = step.record
    later = (
        "open('d0/f0.txt', 'w').write('edited')\n"
        "open('d1/f1.txt', 'a').write('more')\n"
        "os.remove('d2/f2.txt')\n"
        "open('d3/new.txt', 'w').write('not there before')\n"
        "os.makedirs('newdir/sub')\n"
        "os.rmdir('empty/dir')\n"
        "a = 2\nitems.append(3)\nlater = 'made after the checkpoint'\n"
    )
    assert (await step(later)).ok
    host.written.clear()

    assert (await step("b = a", record=checkpoint)).ok  # time travel to the first checkpoint
    assert "The sandbox was restored from the snapshot of revision 1." in step.notices
    assert len(host.sessions) == 1, "the live sandbox is rewound, not replaced"
    # The three files that differ (two changed, one deleted since), and nothing else (the empty
    # directory comes back through a placeholder file).
    assert sorted(p for p in host.written if not p.startswith("empty/")) == [
        "d0/f0.txt",
        "d1/f1.txt",
        "d2/f2.txt",
    ]

    rewound = await _state(host.sessions[0])
    fresh = await provider.create()
    try:
        await snapshotter.restore(fresh, str(checkpoint["snapshot"]))
        await fresh.run_code("b = a")
        assert rewound == await _state(fresh)
    finally:
        await fresh.close()
    files, dirs, variables = rewound
    assert "d3/new.txt" not in files
    assert "newdir" not in dirs
    assert "empty/dir" in dirs
    assert "later" not in variables
    assert '["a", "1"]' in variables
    assert '["items", "[1, 2]"]' in variables


async def test_a_rewind_to_a_snapshot_gc_removed_starts_empty_and_says_so(
    provider: LocalProvider, tmp_path: Path
) -> None:
    """Time travel to a checkpoint whose snapshot is gone from the store (a gc that was not
    given this application's checkpointer, an operator): the live sandbox, which holds a later
    state, must not pass for the checkpoint's. The call runs in an empty sandbox, with a notice."""
    host = _CountingHost(provider)
    store = LocalDirectoryBlobStore(tmp_path / "blobs", durable=False)
    step = _Steps(host, Snapshotter(store))
    assert (await step("a = 1\nopen('a.txt', 'w').write('a')")).ok
    checkpoint = step.record
    assert (await step("later = 2\nopen('later.txt', 'w').write('l')")).ok
    await store.delete([str(checkpoint["snapshot"])])  # its manifest: the snapshot is unreadable

    result = await step("import os\nprint(sorted(globals()), os.listdir('.'))", record=checkpoint)
    assert "could not be restored from its snapshot" in " ".join(step.notices), step.notices
    assert "starts empty" in " ".join(step.notices)
    assert "later" not in result.stdout
    assert "later.txt" not in result.stdout
