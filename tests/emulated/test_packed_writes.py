"""Many files written to a Runloop devbox or a Kubernetes pod (real SDKs against the emulators) go
as one archive the worker unpacks: one upload and one worker command per batch, whatever the
number of files, so a restore into a fresh sandbox costs the same requests for 50 files as for
500. What one upload per file did stays true of each file: parents made, contents exact, a new
file 0644, an existing one keeping its mode, a symlink at the path replaced (never followed), a
directory at the path refused. Request counts come from the emulators' logs; the worker's
``unpack`` is also checked on a real directory against archives the host would never make."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from emulated_providers import Emulator, emulated_provider

from langchain_sandbox.errors import InvalidPathError
from langchain_sandbox.providers import _file_archive
from langchain_sandbox.providers._file_archive import MIN_PACKED_FILES, pack
from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.providers.guest.unpack import unpack_files
from langchain_sandbox.providers.worker_session import WORKER_DIR
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

# Per batch: the archive's upload and the ``unpack`` command (Runloop's command is a start and a
# long-poll for its end).
_BATCH_REQUESTS = {"runloop": 3, "kubernetes": 2}
_CONTENTS = """
import hashlib, json, os
found = {}
for top, dirs, names in os.walk(".", followlinks=False):
    dirs[:] = [d for d in dirs if not d.startswith(".")]
    for name in [n for n in names if not n.startswith(".")]:
        path = os.path.join(top, name)[2:]
        info = os.lstat(path)
        with open(path, "rb") as handle:
            found[path] = [hashlib.sha256(handle.read()).hexdigest(), oct(info.st_mode & 0o7777)]
print(json.dumps(found))
"""


@pytest.fixture(params=["runloop", "kubernetes"])
async def emulated(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Emulator, Provider]]:
    async with emulated_provider(request.param) as (emulator, provider):
        yield request.param, emulator, provider


def _files(count: int, prefix: str = "tree") -> dict[str, bytes]:
    """``count`` files of 100 bytes spread over nested directories."""
    return {
        f"{prefix}/d{index % 7}/e{index % 3}/f{index}.txt": f"{index:<99}\n".encode()
        for index in range(count)
    }


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _workspace(session: Session) -> dict[str, tuple[str, str]]:
    """Every regular file of the workspace (hidden ones aside): its contents' sha256, its mode."""
    result = await session.run_command(f"python3 -c {shlex.quote(_CONTENTS)}")
    assert result.ok, result.stderr
    return {path: (digest, mode) for path, (digest, mode) in json.loads(result.stdout).items()}


async def _leftover_archives(session: Session) -> str:
    listed = await session.run_command(f"ls {WORKER_DIR} | grep '^files-' || true")
    return listed.stdout.strip()


async def test_many_files_cost_one_upload_and_one_command(
    emulated: tuple[str, Emulator, Provider],
) -> None:
    name, emulator, provider = emulated
    async with await provider.create() as session:
        costs = []
        for count in (20, 200):
            files = _files(count, prefix=f"n{count}")
            emulator.clear_requests()
            await session.write_files(files)
            costs.append(len(emulator.requests))
            written = await _workspace(session)
            assert {path: written[path] for path in files} == {
                path: (_digest(data), "0o644") for path, data in files.items()
            }
        # One per file, as before, would be 20 and 200 uploads.
        assert costs == [_BATCH_REQUESTS[name]] * 2
        assert await _leftover_archives(session) == ""


async def test_a_large_call_is_several_archives_and_a_large_file_one_upload(
    emulated: tuple[str, Emulator, Provider], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, emulator, provider = emulated
    monkeypatch.setattr(_file_archive, "ARCHIVE_BYTES", 1000)  # 10 files of 100 bytes each
    files = _files(30)
    files["large.bin"] = os.urandom(_file_archive.PACKED_FILE_BYTES + 1)
    async with await provider.create() as session:
        emulator.clear_requests()
        await session.write_files(files)
        # three archives, then the large file's own upload (at the top: no ``mkdir -p``)
        assert len(emulator.requests) == 3 * _BATCH_REQUESTS[name] + 1
        written = await _workspace(session)
        assert {path: written[path][0] for path in files} == {
            path: _digest(data) for path, data in files.items()
        }


async def test_a_symlink_at_a_path_is_replaced_and_its_target_never_written(
    emulated: tuple[str, Emulator, Provider],
) -> None:
    _, _, provider = emulated
    async with await provider.create() as session:
        setup = await session.run_command(
            "mkdir -p /tmp/outside && echo secret > /tmp/outside/target"
            " && ln -s /tmp/outside/target link && ln -s /tmp/outside linked_dir"
            " && echo old > kept && chmod 600 kept"
        )
        assert setup.ok, setup.stderr
        files = {"link": b"new link\n", "linked_dir": b"was a link\n", "kept": b"new kept\n"}
        assert len(files) >= MIN_PACKED_FILES
        await session.write_files(files)

        assert await _workspace(session) == {
            "link": (_digest(b"new link\n"), "0o644"),
            "linked_dir": (_digest(b"was a link\n"), "0o644"),
            # rewritten in place, as an upload does: the file keeps its mode
            "kept": (_digest(b"new kept\n"), "0o600"),
        }
        outside = await session.run_command("cat /tmp/outside/target && ls /tmp/outside")
        assert outside.stdout == "secret\ntarget\n"


async def test_a_directory_at_a_path_is_refused_by_name_and_the_archive_removed(
    emulated: tuple[str, Emulator, Provider],
) -> None:
    _, _, provider = emulated
    async with await provider.create() as session:
        assert (await session.run_command("mkdir -p taken/inner && touch taken/inner/x")).ok
        files = {"a.txt": b"a", "taken": b"not a directory", "z.txt": b"z"}
        with pytest.raises(InvalidPathError, match=r"'/home/user/taken'.* is a directory"):
            await session.write_files(files)
        listed = await session.run_command("find taken | sort")
        assert listed.stdout.split() == ["taken", "taken/inner", "taken/inner/x"]
        assert await _leftover_archives(session) == ""
        # The session is still usable, and a later batch goes through.
        await session.write_files({"b/1": b"1", "b/2": b"2", "b/3": b"3"})
        assert await session.read_files(["b/3"]) == {"b/3": b"3"}


async def _restore_cost(
    emulator: Emulator, provider: Provider, snapshotter: Snapshotter, count: int
) -> tuple[int, bool]:
    """Requests of a restore of ``count`` files into a fresh session, and whether the restored
    workspace equals the captured one."""
    files = _files(count)
    async with await provider.create() as source:
        await source.write_files(files)
        await source.run_command("chmod 755 tree/d0/e0/f0.txt")
        captured = await _workspace(source)
        snapshot = await snapshotter.capture(source, revision=1)
    async with await provider.create() as fresh:
        emulator.clear_requests()
        report = await snapshotter.restore(fresh, snapshot.ref)
        cost = len(emulator.requests)
        assert report.files_written == count
        return cost, await _workspace(fresh) == captured


async def test_a_restore_costs_the_same_requests_for_50_files_as_for_500(
    emulated: tuple[str, Emulator, Provider], tmp_path: Path
) -> None:
    _, emulator, provider = emulated
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs", durable=False))
    small, small_equal = await _restore_cost(emulator, provider, snapshotter, 50)
    large, large_equal = await _restore_cost(emulator, provider, snapshotter, 500)
    assert small_equal
    assert large_equal
    assert small == large
    assert large < 50  # file by file, the upload requests alone were 500


# ---- the worker's side, on a real directory ------------------------------------------------


def _archive(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for member, data in members:
            member.size = len(data) if member.isreg() else 0
            archive.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return buffer.getvalue()


def _unpacked(tmp_path: Path, archive: bytes) -> tuple[dict[str, Any], Path]:
    root = tmp_path / "workspace"
    root.mkdir(exist_ok=True)
    path = tmp_path / "files.tar"
    path.write_bytes(archive)
    answer = unpack_files(str(path), str(root))
    assert not path.exists()  # deleted whatever happened
    return answer, root


@pytest.mark.parametrize(
    "name", ["/etc/evil", "../evil", "a/../../evil", "./a", "a//b", ".."], ids=repr
)
def test_unpack_refuses_names_outside_the_root(tmp_path: Path, name: str) -> None:
    answer, root = _unpacked(
        tmp_path, _archive([(tarfile.TarInfo("ok.txt"), b"ok"), (tarfile.TarInfo(name), b"x")])
    )
    assert answer == {"written": 1, "refused": 1, "why": "name"}
    assert not (tmp_path / "evil").exists()
    assert sorted(os.listdir(root)) == ["ok.txt"]


@pytest.mark.parametrize(
    "kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE]
)
def test_unpack_refuses_members_that_are_not_regular_files(tmp_path: Path, kind: bytes) -> None:
    member = tarfile.TarInfo("link")
    member.type = kind
    member.linkname = "/etc/passwd"
    answer, root = _unpacked(tmp_path, _archive([(member, b""), (tarfile.TarInfo("after"), b"")]))
    assert answer == {"written": 0, "refused": 0, "why": "member"}
    assert os.listdir(root) == []


def test_unpack_writes_what_the_host_packs_and_replaces_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    (tmp_path / "target").write_bytes(b"secret")
    (root / "a").mkdir()
    (root / "a" / "link").symlink_to(tmp_path / "target")
    files = {"/home/user/a/link": b"replaced", "/home/user/a/b/c.txt": b"c", "/home/user/top": b""}
    answer, _ = _unpacked(tmp_path, pack(files, sorted(files)))
    assert answer == {"written": 3}
    assert not (root / "a" / "link").is_symlink()
    assert (root / "a" / "link").read_bytes() == b"replaced"
    assert (root / "a" / "b" / "c.txt").read_bytes() == b"c"
    assert (root / "top").read_bytes() == b""
    assert (tmp_path / "target").read_bytes() == b"secret"


def test_unpack_refuses_a_parent_that_is_a_file(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "plain").write_bytes(b"")
    answer, _ = _unpacked(tmp_path, _archive([(tarfile.TarInfo("plain/x"), b"x")]))
    assert answer == {"written": 0, "refused": 0, "why": "parent"}
    assert (root / "plain").read_bytes() == b""
