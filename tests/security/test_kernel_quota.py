"""Class 11: the workspace quota must hold against what measuring from the host cannot see.

An unlinked file that is still open (``O_TMPFILE`` in ``/home/user``, its descriptor kept in a
variable) was never counted: with a 50 MB quota, 400 MB landed on the host disk. 100,000 empty
files took 101,000 host inodes and almost nothing of the byte quota. Where the host is root, the
workspace is now a file system of the quota's size and inode count, so the kernel refuses both.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
from pathlib import Path

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.providers.local._quota import unlinked_open_bytes
from langchain_sandbox.providers.local._workspace_fs import unavailable_reason
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

_HANG = 120.0
_MB = 1024 * 1024

_FILL_UNLINKED = """
import errno, os
try:
    fd = os.open('/home/user', os.O_TMPFILE | os.O_WRONLY, 0o600)
except OSError as exc:  # gVisor's file system has no O_TMPFILE: the same file, by unlink
    if exc.errno != errno.EOPNOTSUPP:
        raise
    fd = os.open('/home/user/.unlinked', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.unlink('/home/user/.unlinked')
chunk = b'x' * (1 << 20)
written, failure = 0, None
try:
    for _ in range(MEGABYTES):
        written += os.write(fd, chunk)
except OSError as exc:
    failure = exc.errno
(written, failure)
"""

_MANY_FILES = """
import os
os.makedirs('/home/user/many', exist_ok=True)
made, failure = 0, None
try:
    for index in range(COUNT):
        open(f'/home/user/many/{index}', 'x').close()
        made += 1
except OSError as exc:
    failure = exc.errno
(made, failure)
"""


def test_this_host_gives_workspaces_a_file_system_of_their_own() -> None:
    # The suite runs as root with e2fsprogs installed (.ci/bootstrap); elsewhere every test
    # below would test the measured fallback instead, so say so rather than pass vacuously.
    assert unavailable_reason() is None, unavailable_reason()


async def test_an_unlinked_open_file_cannot_pass_the_quota(provider: LocalProvider) -> None:
    quota = 50 * _MB
    session = await provider.create(SessionSpec(limits=Limits(timeout=60.0, workspace_bytes=quota)))
    try:
        result = await asyncio.wait_for(
            session.run_code(_FILL_UNLINKED.replace("MEGABYTES", "400")), _HANG
        )
        assert result.ok, result.error
        written, failure = eval(result.value or "None")  # a tuple of two ints
        assert failure in (errno.ENOSPC, errno.EDQUOT)
        assert quota <= written <= quota + 8 * _MB
        # Once the descriptor is closed the space comes back, and the session goes on working.
        freed = await session.run_code("os.close(fd)\nopen('f', 'wb').write(b'y' * (1 << 20))")
        assert freed.ok, freed.error
        assert (await session.read_files(["/home/user/f"]))["/home/user/f"] == b"y" * (1 << 20)
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_the_host_measurement_counts_unlinked_open_files(provider: LocalProvider) -> None:
    # Where the kernel cannot enforce the quota (not root), the measurement is all there is: it
    # must see what the sandbox holds open without a name. 22 MB fits the file system of a 20 MB
    # quota (its margin), so the kernel lets this one through and the measurement must speak.
    quota = 20 * _MB
    session = await provider.create(SessionSpec(limits=Limits(timeout=60.0, workspace_bytes=quota)))
    try:
        held = await asyncio.wait_for(
            session.run_code(_FILL_UNLINKED.replace("MEGABYTES", "22")), _HANG
        )
        assert held.ok, held.error
        assert eval(held.value or "None") == (22 * _MB, None)
        device = (await asyncio.to_thread(os.stat, session.workspace_dir)).st_dev
        assert unlinked_open_bytes(session.cgroup.pids(), device) >= 22 * _MB
        after = await session.run_code("'next'")
        assert any("over its quota" in notice for notice in after.notices), after.notices
        released = await session.run_code("os.close(fd)")
        assert released.ok, released.error
        assert unlinked_open_bytes(session.cgroup.pids(), device) == 0
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_the_workspace_holds_no_more_files_than_its_limit(provider: LocalProvider) -> None:
    session = await provider.create(
        SessionSpec(limits=Limits(timeout=60.0, workspace_bytes=50 * _MB, workspace_files=300))
    )
    try:
        result = await asyncio.wait_for(
            session.run_code(_MANY_FILES.replace("COUNT", "5000")), _HANG
        )
        assert result.ok, result.error
        made, failure = eval(result.value or "None")
        assert failure in (errno.ENOSPC, errno.EDQUOT)
        # ext4 rounds its inode count up to whole inode-table blocks (16 inodes of 256 bytes).
        assert 300 - 2 <= made <= 300 + 16
        removed = await session.run_command("rm -r /home/user/many && touch /home/user/again")
        assert removed.exit_code == 0, removed.stderr
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_the_host_snapshots_restores_and_removes_a_mounted_workspace(
    provider: LocalProvider, tmp_path: Path
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=60.0)))
    workspace = session.workspace_dir
    assert await asyncio.to_thread(os.path.ismount, workspace)
    try:
        await session.run_command("mkdir -p d && echo one > d/a && echo two > b")
        listing = await session.list_files(".", recursive=True)
        assert {info.path for info in listing if not info.path.startswith(".")} == {"b", "d", "d/a"}
        snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
        info = await asyncio.wait_for(snapshotter.capture(session), _HANG)
        manifest = await snapshotter.load_manifest(info.ref)
        assert {p for p in manifest.files if not p.startswith(".")} == {"b", "d/a"}
        assert not manifest.omitted
        await session.run_command("rm -r d && echo changed > b")
        await asyncio.wait_for(snapshotter.restore(session, info.ref), _HANG)
        restored = await session.run_command("cat d/a b && echo three >> d/a && cat d/a")
        assert restored.stdout == "one\ntwo\none\nthree\n", restored.stderr
    finally:
        await asyncio.wait_for(session.close(), _HANG)
    assert not await asyncio.to_thread(os.path.ismount, workspace)
    assert not await asyncio.to_thread(os.path.exists, session.directory)


_CRASHING_OWNER = """
import asyncio, os, sys
from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.local import LocalProvider

async def main():
    provider = LocalProvider(base_dir=sys.argv[1])
    session = await provider.create(SessionSpec())
    await session.run_command("echo data > kept")
    print(session.session_id, session.workspace_dir, flush=True)
    os._exit(0)  # the owner dies without closing: its mounted workspace is left behind

asyncio.run(main())
"""


async def test_a_dead_sessions_mounted_workspace_is_unmounted_and_removed(
    tmp_path: Path,
) -> None:
    base = tmp_path / "sandboxes"
    owner = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CRASHING_OWNER, str(base), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(owner.communicate(), _HANG)
    session_id, workspace = out.decode().split()
    assert await asyncio.to_thread(os.path.ismount, workspace)
    provider = LocalProvider(base_dir=base)
    try:
        records = [r for r in await provider.list_sessions() if r["session_id"] == session_id]
        assert len(records) == 1
        assert records[0]["state"]["orphaned"] is True
        assert await provider.destroy(records[0]) is True
    finally:
        await provider.aclose()
    assert not await asyncio.to_thread(os.path.ismount, workspace)
    assert not await asyncio.to_thread((base / "sessions" / session_id).exists)
