"""Class 7: what a capture costs the host follows what the workspace really holds.

Six sparse 60 MB files (32 KB on disk) became 377 MB of blobs per capture; a capture of many tiny
files reserved a ``max_file_bytes`` buffer per file. The workspace now has a quota (sparse files
count at their apparent size), ``/tmp`` a size, and reads are sized by the file.
"""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from pathlib import Path

import pytest

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

_HANG = 300.0
_MB = 1024 * 1024


def _store_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


async def test_sparse_files_cannot_fill_the_blob_store(
    provider: LocalProvider, tmp_path: Path
) -> None:
    session = await provider.create(
        SessionSpec(limits=Limits(timeout=60.0, workspace_bytes=100 * _MB))
    )
    blobs = tmp_path / "blobs"
    snapshotter = Snapshotter(LocalDirectoryBlobStore(blobs))
    try:
        made = await session.run_code(
            "for i in range(6):\n"
            "    with open(f'/home/user/sparse{i}', 'wb') as handle:\n"
            "        handle.write(bytes([i + 1]))\n"
            "        handle.truncate(60 * 1024 * 1024)\n"
        )
        assert made.ok, made.render()
        with pytest.raises(InvalidInputError, match="quota"):
            await asyncio.wait_for(snapshotter.capture(session), _HANG)
        assert await asyncio.to_thread(_store_bytes, blobs) < _MB

        # Back under the quota, the capture works and stores what is there.
        await session.run_command("rm /home/user/sparse[1-5]")
        info = await asyncio.wait_for(snapshotter.capture(session), _HANG)
        assert info.bytes_total == 60 * _MB
        assert (await session.run_code("'usable'")).value == "'usable'"
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_a_call_that_writes_past_the_quota_is_stopped(provider: LocalProvider) -> None:
    quota = 64 * _MB
    session = await provider.create(
        SessionSpec(limits=Limits(timeout=120.0, workspace_bytes=quota))
    )
    try:
        # Would write 20 GB over about 100 s if nothing stopped it.
        flood = await asyncio.wait_for(
            session.run_code(
                "import time\n"
                "with open('/home/user/flood', 'wb') as handle:\n"
                "    for _ in range(20_000):\n"
                "        handle.write(b'x' * 1024 * 1024)\n"
                "        time.sleep(0.005)\n"
            ),
            _HANG,
        )
        assert flood.error is not None
        if await asyncio.to_thread(os.path.ismount, session.workspace_dir):
            # The workspace is a file system of the quota's size: the kernel refuses first.
            assert "No space left on device" in flood.error.value
        else:
            assert "quota" in flood.error.value
        assert any("over its quota" in notice for notice in flood.notices), flood.notices
        size = await asyncio.to_thread(
            os.path.getsize, os.path.join(session.workspace_dir, "flood")
        )
        assert quota < size < 20_000 * _MB // 4
        # Deleting is allowed while over the quota; then the session works as before.
        cleaned = await session.run_command("rm /home/user/flood && echo gone")
        assert cleaned.stdout.strip() == "gone", cleaned.render()
        with pytest.raises(InvalidInputError, match="quota"):
            await session.write_files({"big.bin": b"x" * (quota + 1)})
        await session.write_files({"small.bin": b"x" * 1024})
        again = await session.run_code("len(open('/home/user/small.bin', 'rb').read())")
        assert again.value == "1024"
        assert not again.notices
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_tmp_has_the_size_the_application_sets(provider: LocalProvider) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=60.0, tmp_bytes=8 * _MB)))
    try:
        result = await session.run_command(
            "dd if=/dev/zero of=/tmp/fill bs=1M count=32 status=none; echo $?; "
            "du -k /tmp/fill | cut -f1"
        )
        status, kilobytes = result.stdout.split()
        assert status != "0"
        assert "No space left" in result.stderr
        assert int(kilobytes) <= 8 * 1024
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_capturing_many_small_files_holds_little_memory(
    provider: LocalProvider, tmp_path: Path
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=120.0)))
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    try:
        made = await session.run_code(
            "import os\n"
            "for d in range(20):\n"
            "    os.makedirs(f'/home/user/d{d}')\n"
            "    for f in range(100):\n"
            "        open(f'/home/user/d{d}/f{f}', 'w').write(f'{d}-{f}')\n"
        )
        assert made.ok, made.render()
        tracemalloc.start()
        try:
            info = await asyncio.wait_for(snapshotter.capture(session), _HANG)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert info.files == 2000
        # 2,000 files of a few bytes: the capture's Python allocations stay far below one
        # max_file_bytes buffer (64 MB), which reading used to reserve per file.
        assert peak < 16 * _MB
    finally:
        await asyncio.wait_for(session.close(), _HANG)
