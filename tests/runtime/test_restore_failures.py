"""A restore that fails part-way: the thread goes on in a sandbox that really is empty, as the
notice says, never in one holding part of the snapshot (real local sandboxes)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from langchain_sandbox.errors import ProviderUnavailableError
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, SnapshotLimits, Snapshotter


class _OutageMidRestore(LocalDirectoryBlobStore):
    """A store that goes away during a restore: blobs fetched once are served once more (the
    first batch of the write pass), then every fetch fails, as a database restarting would."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.seen: set[str] = set()
        self.refetches = 0

    async def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        wanted = list(keys)
        if wanted and set(wanted) <= self.seen:
            self.refetches += 1
            if self.refetches > 1:
                raise ProviderUnavailableError("The snapshot store is restarting.")
        self.seen |= set(wanted)
        return await super().get_many(wanted)


def test_a_restore_that_fails_part_way_leaves_an_empty_sandbox_as_it_says(
    tmp_path: Path,
) -> None:
    files = {f"d{i % 3}/f{i}.bin": os.urandom(3000 + i) for i in range(30)}
    source = SandboxRuntime(
        "local",
        snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
        persist="every_call",
    )
    try:
        record = source.write_files("t", files).record
    finally:
        source.close()
    assert record.get("snapshot")

    # Over the memory budget the restore verifies everything first, then fetches each batch
    # again to write it: the outage hits after the first batch was written.
    store = _OutageMidRestore(tmp_path / "blobs")
    limits = SnapshotLimits(batch_bytes=10_000, restore_memory_bytes=1)
    runtime = SandboxRuntime(
        "local", snapshotter=Snapshotter(store, limits=limits), persist="every_call"
    )
    try:
        outcome = runtime.run_code("t", "import os\nprint(sorted(os.listdir('.')))", record=record)
    finally:
        runtime.close()
    assert store.refetches > 1, "the outage must hit during the restore"
    notices = " ".join(outcome.value.notices)
    assert "could not be restored from its snapshot" in notices
    assert "it starts empty" in notices
    assert outcome.value.stdout == "['.packages']\n"
