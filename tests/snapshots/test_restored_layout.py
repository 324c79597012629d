"""What a restore keeps besides contents and modes: files' modification times, hard links and
holes, on the local provider (which writes the workspace from the host); and what it says on a
provider that keeps none of them (the E2B SDK against the package's emulator).

Each check reads the restored sandbox's own ``stat`` from inside it, so it fails when the
writer drops a time, a link or a hole.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import pytest

from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.snapshots import Snapshotter
from langchain_sandbox.snapshots.store import digest

SessionFactory = Callable[[], Awaitable[Session]]

OLD_NS = 1_000_000_000_123_456_789
HOLES_NS = 1_234_567_890_500_000_000
HOLES_BYTES = 8 * 1024 * 1024

MAKE = f"""
import os
os.makedirs("d", exist_ok=True)
open("old.txt", "w").write("old")
open("d/new.txt", "w").write("new")
os.link("old.txt", "d/same.txt")
with open("holes.bin", "wb") as handle:
    handle.truncate({HOLES_BYTES})
    handle.seek({HOLES_BYTES // 2})
    handle.write(b"x")
del handle
os.utime("old.txt", ns=({OLD_NS}, {OLD_NS}))
os.utime("holes.bin", ns=({HOLES_NS}, {HOLES_NS}))
"""

STAT = """python3 -c '
import json, os
names = ["old.txt", "d/new.txt", "d/same.txt", "holes.bin"]
facts = {}
for name in names:
    st = os.stat(name)
    facts[name] = [st.st_mtime_ns, st.st_ino, st.st_nlink, st.st_blocks * 512, st.st_size]
data = open("holes.bin", "rb").read()
facts["holes"] = [data.count(b"x"), data.index(b"x")]
print(json.dumps(facts))
'"""


async def _stat(session: Session) -> dict[str, list[int]]:
    result = await session.run_command(STAT)
    assert result.ok, result.render()
    facts: dict[str, list[int]] = json.loads(result.stdout)
    return facts


async def _made(session: Session) -> dict[str, list[int]]:
    made = await session.run_code(MAKE)
    assert made.ok, made.render()
    return await _stat(session)


async def test_a_fresh_sandbox_gets_the_times_links_and_holes_back(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    first = await new_session()
    before = await _made(first)
    assert before["old.txt"][1] == before["d/same.txt"][1], "the test must start with a link"
    info = await snapshotter.capture(first)
    assert info.files == 4

    second = await new_session()
    report = await snapshotter.restore(second, info.ref)
    after = await _stat(second)
    assert report.complete, report.notices
    for name in ("old.txt", "d/new.txt", "d/same.txt", "holes.bin"):
        assert after[name][0] == before[name][0], name  # st_mtime_ns, to the nanosecond
    assert after["old.txt"][0] == OLD_NS
    assert after["holes.bin"][0] == HOLES_NS
    # One inode with two names, as captured: a write through one shows through the other.
    assert after["old.txt"][1] == after["d/same.txt"][1]
    assert after["old.txt"][2] == after["d/same.txt"][2] == 2
    assert after["d/new.txt"][2] == 1
    # The 8 MB file takes a block or two again, not 8 MB, and its byte is where it was.
    assert after["holes.bin"][4] == HOLES_BYTES
    assert after["holes.bin"][3] < 64 * 1024, after["holes.bin"]
    assert after["holes"] == [1, HOLES_BYTES // 2]

    # The next capture of the restored sandbox reads nothing and lists the same entries:
    # times, link and holes as the first capture recorded them.
    again = await snapshotter.capture(second, base=info.ref)
    assert again.bytes_read == 0
    captured = (await snapshotter.load_manifest(info.ref)).files
    assert (await snapshotter.load_manifest(again.ref)).files == captured
    # The first name in path order is the file, the other its link.
    assert (captured["d/same.txt"].link, captured["old.txt"].link) == (None, "d/same.txt")


async def test_a_rewind_makes_a_broken_link_a_link_again_and_spares_other_names(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    session = await new_session()
    before = await _made(session)
    info = await snapshotter.capture(session)
    # Break the link (a copy of the same content), and hard-link a file the snapshot has to a
    # name it does not know: rewriting that file in place would change the other name too.
    broken = await session.run_command(
        "rm d/same.txt && cp old.txt d/same.txt && printf changed > d/new.txt "
        "&& ln d/new.txt outside.txt"
    )
    assert broken.ok, broken.render()
    report = await snapshotter.restore(session, info.ref)
    after = await _stat(session)
    assert report.complete, report.notices
    assert after["old.txt"][1] == after["d/same.txt"][1]
    assert after["d/new.txt"][0] == before["d/new.txt"][0]
    listed = {entry.path for entry in await session.list_files(".", recursive=True)}
    assert "outside.txt" not in listed
    assert (await session.read_files(["d/new.txt"]))["d/new.txt"] == b"new"


async def test_a_snapshot_without_link_or_sparse_fields_still_restores(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    """A manifest written before these fields existed (format 1, entries of sha256, size, mode
    and mtime only) restores as it always did: copies, no holes, and now its times."""
    session = await new_session()
    await _made(session)
    manifest = await snapshotter.load_manifest((await snapshotter.capture(session)).ref)
    assert any(e.link for e in manifest.files.values())
    assert any(e.sparse for e in manifest.files.values())
    legacy = replace(
        manifest,
        files={p: replace(e, link=None, sparse=False) for p, e in manifest.files.items()},
    ).encode()
    assert b'"link"' not in legacy
    assert b'"sparse"' not in legacy
    ref = digest(legacy)
    await snapshotter.store.put(ref, legacy)
    fresh = await new_session()
    report = await snapshotter.restore(fresh, ref)
    after = await _stat(fresh)
    assert report.complete, report.notices
    assert after["old.txt"][0] == OLD_NS
    assert after["old.txt"][1] != after["d/same.txt"][1]
    assert after["holes.bin"][3] >= HOLES_BYTES


@pytest.fixture
async def e2b() -> AsyncIterator[Provider]:
    from langchain_sandbox.testing.e2b_emulator import emulated_e2b_provider

    async with emulated_e2b_provider() as provider:
        yield provider


async def test_a_provider_without_links_or_holes_names_them_in_the_restore(
    new_session: SessionFactory, snapshotter: Snapshotter, e2b: Provider
) -> None:
    """E2B writes through its file API: contents only. The links and holes it could not keep
    are named; the times are the provider's known limit (docs/persistence.md), not a notice."""
    local = await new_session()
    await _made(local)
    info = await snapshotter.capture(local)
    remote = await e2b.create()
    try:
        report = await snapshotter.restore(remote, info.ref)
        listed = {entry.path: entry for entry in await remote.list_files(".", recursive=True)}
    finally:
        await remote.close()
    assert "d/same.txt" in listed
    assert any(
        "1 hard link(s) came back as separate copies" in n and "old.txt (a link of d/same.txt)" in n
        for n in report.notices
    ), report.notices
    assert any(
        "1 sparse file(s) came back fully allocated" in n and "holes.bin" in n
        for n in report.notices
    ), report.notices
    assert not any("Modification times" in n for n in report.notices)


async def test_fifos_come_back_in_a_fresh_sandbox_and_stay_in_a_rewind(
    new_session: SessionFactory, snapshotter: Snapshotter
) -> None:
    session = await new_session()
    made = await session.run_command("mkdir -p run && mkfifo run/pipe top.pipe && echo x > a.txt")
    assert made.ok, made.render()
    if session.launcher.isolation == "gvisor":  # type: ignore[attr-defined]
        pytest.skip("gVisor keeps FIFOs in its own kernel: the host never sees them")
    info = await snapshotter.capture(session)
    manifest = await snapshotter.load_manifest(info.ref)
    assert manifest.fifos == ("run/pipe", "top.pipe")
    assert not info.omitted

    fresh = await new_session()
    report = await snapshotter.restore(fresh, info.ref)
    assert report.complete, report.notices
    kinds = await fresh.run_command(
        "python3 -c 'import os, stat\n"
        'for n in ["run/pipe", "top.pipe"]: print(n, stat.S_ISFIFO(os.lstat(n).st_mode))\''
    )
    assert kinds.stdout.splitlines() == ["run/pipe True", "top.pipe True"], kinds.render()
    # A pipe in use survives a rewind: it is not replaced (a reader would lose its writer).
    before = await session.run_command("stat -c %i top.pipe")
    await session.run_command("rm run/pipe && printf y > run/pipe && mkfifo extra.pipe")
    rewound = await snapshotter.restore(session, info.ref)
    assert rewound.complete, rewound.notices
    after = await session.run_command(
        "stat -c %i top.pipe && test -p run/pipe && test ! -e extra.pipe && echo ok"
    )
    assert after.stdout.splitlines() == [before.stdout.strip(), "ok"], after.render()
