"""The local provider's ``list_changes``: what it reports, applied to the caller's listing, is
the workspace exactly as a full listing shows it, whatever sandboxed code did in between.

The snapshotter trusts this to capture only what changed, so a change it failed to report would be
silently missing from every later snapshot. Each round below runs random file operations inside a
real sandbox (including the ones that keep a file's mtime: ``touch -d``, ``cp -p``, renames, whole
directories moved) and compares.
"""

from __future__ import annotations

import random
import shlex

import pytest

from langchain_sandbox.providers.base import ChangeListing, FileInfo
from langchain_sandbox.providers.local import LocalSession
from langchain_sandbox.providers.local import _tree_walk as _files

ROUNDS = 40
STEP_TIMEOUT = 2.0


def _apply(known: dict[str, FileInfo], changes: ChangeListing) -> dict[str, FileInfo]:
    after = dict(known)
    for path in changes.gone:
        after.pop(path, None)
    for info in changes.changed:
        after[info.path] = info
    return after


def _operations(rng: random.Random, files: list[str], dirs: list[str]) -> list[str]:
    """A few shell commands over the workspace's current files and directories."""
    name = f"n{rng.randrange(10**6)}"
    place = rng.choice(["", *dirs]) if dirs else ""
    new = f"{place}/{name}" if place else name
    file = rng.choice(files) if files else new
    folder = rng.choice(dirs) if dirs else new
    q = shlex.quote
    choices = [
        f"printf 'new %s' {q(name)} > {q(new)}",
        f"printf more >> {q(file)}",
        f"printf 'same size' > {q(file)}.tmp && mv {q(file)}.tmp {q(file)}",
        f"chmod {rng.choice(['600', '644', '755'])} {q(file)}",
        f"rm -f {q(file)}",
        f"mkdir -p {q(new)}/inner && printf x > {q(new)}/inner/f",
        f"rm -rf {q(folder)}",
        f"mv {q(file)} {q(new)}",
        f"mv {q(folder)} {q(new)}",
        f"ln -s /etc/passwd {q(new)}",
        f"mkfifo {q(new)}",
        f"touch -d '2001-02-03 04:05:06' {q(file)}",
        f"cp -p {q(file)} {q(new)}",
        f"ln {q(file)} {q(new)}",
        f"rm -f {q(file)} && mkdir {q(file)}",
        f"printf 'x' > {q(file)} && touch -r /etc/hostname {q(file)}",
        f"chmod 700 {q(folder)}",
    ]
    return [rng.choice(choices) for _ in range(rng.randint(1, 4))]


@pytest.fixture(params=["find", "python walk"])
def comparison(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which way the session compares: ``find``'s ctime filter (used from a size on, here from
    the first entry) or the walk in Python."""
    threshold = 0 if request.param == "find" else 10**9
    monkeypatch.setattr(_files, "_FIND_FROM_ENTRIES", threshold)
    return str(request.param)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_reported_changes_rebuild_the_full_listing(
    session: LocalSession, seed: int, comparison: str
) -> None:
    rng = random.Random(seed)
    setup = " && ".join(
        f"mkdir -p d{i}/sub && printf {i} > d{i}/f{i} && printf {i} > d{i}/sub/g{i}"
        for i in range(4)
    )
    await session.run_command(setup)
    known: dict[str, FileInfo] = {}
    cursor = None
    for round_ in range(ROUNDS):
        changes = await session.list_changes(known, max_bytes=1 << 20, since=cursor)
        known, cursor = _apply(known, changes), changes.cursor
        full = {info.path: info for info in await session.list_files(".", recursive=True)}
        assert known == full, f"round {round_}: reported changes differ from a full listing"
        files = sorted(p for p, i in full.items() if i.kind == "file")
        dirs = sorted(p for p, i in full.items() if i.kind == "dir")
        for command in _operations(rng, files, dirs):
            # A write into a FIFO blocks until the step's timeout: 2 s, not the session's 30.
            # Whatever a stopped step left is still what the next listing must report.
            await session.run_command(command + " 2>/dev/null; true", timeout=STEP_TIMEOUT)


async def test_an_unchanged_workspace_reports_nothing_without_walking_it_in_python(
    session: LocalSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_files, "_FIND_FROM_ENTRIES", 0)
    await session.run_command("mkdir -p a/b && printf 1 > a/b/c && printf 2 > top")
    first = await session.list_changes({}, max_bytes=0)
    known = _apply({}, first)
    assert {"a", "a/b", "a/b/c", "top"} <= set(known)
    walks: list[object] = []
    walk = _files._Scan.walk
    monkeypatch.setattr(
        _files._Scan, "walk", lambda self, *a, **k: walks.append(self) or walk(self, *a, **k)
    )
    again = await session.list_changes(known, max_bytes=0, since=first.cursor)
    assert again.changed == ()
    assert again.gone == ()
    # With the cursor, find's ctime filter did the comparing; without it, Python walks it all.
    assert walks == []
    await session.list_changes(known, max_bytes=0)
    assert len(walks) == 1
