"""Workspace files of a local session, read and written host-side without following symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from langchain_sandbox.errors import InvalidInputError, InvalidPathError
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession


async def test_write_read_list_remove(session: LocalSession) -> None:
    await session.write_files({"d/e/f.bin": b"\x00\x01", "top.txt": "héllo".encode()})
    assert await session.read_files(["d/e/f.bin", "/home/user/top.txt"]) == {
        "d/e/f.bin": b"\x00\x01",
        "/home/user/top.txt": "héllo".encode(),
    }
    inside = await session.run_code("open('d/e/f.bin', 'rb').read()")
    assert inside.value == repr(b"\x00\x01")
    await session.run_command("ln -s top.txt link; mkdir -p empty; chmod 600 top.txt")
    listing = {info.path: info for info in await session.list_files(recursive=True)}
    assert listing["d"].kind == "dir"
    assert listing["d/e/f.bin"].size == 2
    assert listing["link"].kind == "symlink"
    assert listing["top.txt"].mode == 0o600
    assert listing["top.txt"].mtime_ns > 0
    shallow = {info.path for info in await session.list_files("d")}
    assert shallow == {"d/e"}
    assert [i.path for i in await session.list_files("top.txt")] == ["top.txt"]
    await session.remove_files(["d", "link", "never-existed"])
    after = {info.path for info in await session.list_files(recursive=True)}
    assert "d" not in after
    assert "link" not in after
    assert "top.txt" in after


@pytest.mark.parametrize(
    "path", ["../x", "a/../../x", "/etc/passwd", "/home/user/../x", "", "a\x00b"]
)
async def test_lexical_escapes_are_refused(session: LocalSession, path: str) -> None:
    with pytest.raises(InvalidPathError):
        await session.write_files({path: b"x"})
    with pytest.raises(InvalidPathError):
        await session.read_files([path])


async def test_symlinks_made_inside_never_lead_out(session: LocalSession, tmp_path: Path) -> None:
    outside = tmp_path / "host-secret.txt"
    outside.write_text("host secret")
    # The sandbox cannot see the host path, but the link's target is resolved host-side if
    # the host ever followed it: that is exactly what must not happen.
    await session.run_command(
        f"ln -s {outside} secret-link; ln -s /etc/shadow shadow; ln -s / rootdir; "
        f"mkdir real; ln -s {outside.parent} parent-link"
    )
    for path in ("secret-link", "shadow", "rootdir/etc/passwd", "parent-link/host-secret.txt"):
        with pytest.raises(InvalidPathError):
            await session.read_files([path])
        with pytest.raises(InvalidPathError):
            await session.write_files({path: b"overwritten"})
    # Listing a symlink shows the link itself, never what it points to.
    listed = await session.list_files("parent-link", recursive=True)
    assert [(i.path, i.kind) for i in listed] == [("parent-link", "symlink")]
    with pytest.raises(InvalidPathError):
        await session.remove_files(["parent-link/host-secret.txt"])
    await session.remove_files(["parent-link"])
    assert outside.read_text() == "host secret"
    assert outside.parent.is_dir()


async def test_fifos_and_directories_are_not_files(session: LocalSession) -> None:
    await session.run_command("mkfifo pipe; mkdir dir")
    with pytest.raises(InvalidPathError):
        await session.read_files(["pipe"])
    with pytest.raises(InvalidPathError):
        await session.write_files({"pipe": b"x"})
    with pytest.raises(InvalidPathError):
        await session.read_files(["dir"])
    with pytest.raises(InvalidPathError):
        await session.read_files(["missing.txt"])


async def test_reads_are_capped(provider: LocalProvider) -> None:
    async with await provider.create(SessionSpec(limits=Limits(max_file_bytes=1000))) as session:
        await session.write_files({"big.bin": b"x" * 1001, "ok.bin": b"x" * 1000})
        assert len((await session.read_files(["ok.bin"]))["ok.bin"]) == 1000
        with pytest.raises(InvalidInputError):
            await session.read_files(["big.bin"])


async def test_recursive_listing_of_a_large_workspace(session: LocalSession) -> None:
    files = {f"data/part-{i // 10}/file-{i}.bin": os.urandom(64) for i in range(100)}
    await session.write_files(files)
    await session.run_command("head -c 100000000 /dev/zero > data/big.bin")
    listing = await session.list_files("data", recursive=True)
    paths = {info.path for info in listing if info.kind == "file"}
    assert paths == {*files, "data/big.bin"}
    assert next(i for i in listing if i.path == "data/big.bin").size == 100_000_000
