"""``Session.list_changes``, held against every provider: what differs from the caller's listing
(new, modified, mode-only, replaced by a directory, removed), FIFOs never blocking (listed as
FIFOs where the provider makes them again on a restore, left out elsewhere),
bundled contents only of regular files and within ``max_bytes``, and the variables dump exactly
when asked of a provider that ``lists_variables`` (from ``dump_variables`` on one that does not),
the same variables, loadable elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from langchain_sandbox.providers.base import ChangeListing, FileInfo, Provider, Session

_BIG = 1 << 20


def _applied(known: Mapping[str, FileInfo], listing: ChangeListing) -> dict[str, FileInfo]:
    """``known`` brought up to date with ``listing``: the workspace's whole listing now."""
    updated = {path: info for path, info in known.items() if path not in listing.gone}
    updated.update((info.path, info) for info in listing.changed)
    return updated


def _check_contents(listing: ChangeListing, max_bytes: int) -> None:
    regular = {info.path for info in listing.changed if info.kind == "file"}
    assert set(listing.contents) <= regular
    assert sum(len(data) for data in listing.contents.values()) <= max_bytes


async def _changes(
    session: Session, known: Mapping[str, FileInfo], since: object | None = None
) -> ChangeListing:
    # A FIFO in the workspace must not block the listing: a bound, never a figure.
    listing = await asyncio.wait_for(
        session.list_changes(known, max_bytes=_BIG, since=since), timeout=120
    )
    _check_contents(listing, _BIG)
    return listing


def _in_gvisor(session: Session) -> bool:
    launcher = getattr(session, "launcher", None)
    return getattr(launcher, "isolation", None) == "gvisor"


async def test_list_changes_reports_what_differs_from_the_known_listing(
    provider: Provider,
) -> None:
    async with await provider.create() as session:
        # what a new sandbox's workspace holds already (the local one: its packages directory)
        fresh = {info.path for info in await session.list_files(".", recursive=True)}
        setup = await session.run_command(
            "mkdir d && printf a > d/a.txt && printf b > b.txt && printf c > c.txt"
            " && printf r > replaced && ln -s b.txt link"
        )
        assert setup.ok, setup.render()
        first = await _changes(session, {})
        assert first.gone == ()
        known = _applied({}, first)
        assert set(known) - fresh == {"d", "d/a.txt", "b.txt", "c.txt", "replaced", "link"}
        # The same entries list_files reports, mtimes included: an unchanged file stays equal.
        assert known == {info.path: info for info in await session.list_files(".", recursive=True)}
        for path, data in first.contents.items():
            assert (await session.read_files([path]))[path] == data

        unchanged = await _changes(session, known, first.cursor)
        assert (unchanged.changed, unchanged.gone, dict(unchanged.contents)) == ((), (), {})

        changed = await session.run_command(
            "sleep 0.1 && printf bb > b.txt && chmod 600 c.txt && rm replaced && mkdir replaced"
            " && rm d/a.txt && printf n > new.txt && mkfifo pipe"
        )
        assert changed.ok, changed.render()
        second = await _changes(session, known, unchanged.cursor)
        by_path = {info.path: info for info in second.changed}
        # The FIFO is listed, as a FIFO, by a provider that can make it again on a restore
        # (the local one, whose host sees it: not under gVisor); the others leave it out.
        fifo = {"pipe"} if session.keeps_file_metadata and not _in_gvisor(session) else set()
        assert set(by_path) == {"b.txt", "c.txt", "replaced", "new.txt", "d", *fifo}
        if fifo:
            assert (by_path["pipe"].kind, by_path["pipe"].size) == ("fifo", 0)
        assert second.gone == ("d/a.txt",)
        assert (by_path["b.txt"].size, by_path["b.txt"].kind) == (2, "file")
        assert by_path["c.txt"].mode == 0o600
        assert by_path["c.txt"].mtime_ns == known["c.txt"].mtime_ns  # only its mode changed
        assert by_path["replaced"].kind == "dir"
        expected = {"b.txt": b"bb", "c.txt": b"c", "new.txt": b"n"}
        bundled = dict(second.contents)
        # A provider that bundles nothing (the local one: the caller reads the workspace directly)
        # or, within max_bytes, everything; either way the caller gets the same bytes.
        assert set(bundled) in (set(), set(expected))
        unbundled = sorted(set(expected) - set(bundled))
        read = await session.read_files(unbundled) if unbundled else {}
        assert {**bundled, **read} == expected

        after = _applied(known, second)
        # with the cursor of the listing ``after`` was completed with, and without one
        for since in (second.cursor, None):
            settled = await _changes(session, after, since)
            assert (settled.changed, settled.gone) == ((), ())


async def test_bundled_contents_stay_within_max_bytes(provider: Provider) -> None:
    async with await provider.create() as session:
        made = await session.run_command("printf 12345 > five && printf 1234567890 > ten")
        assert made.ok, made.render()
        for max_bytes in (1, 5, 14, 15):
            listing = await session.list_changes({}, max_bytes=max_bytes)
            _check_contents(listing, max_bytes)
            assert {"five", "ten"} <= {info.path for info in listing.changed}


async def test_variables_come_with_the_listing_only_when_asked(provider: Provider) -> None:
    async with await provider.create() as session:
        ran = await session.run_code("x = 41\nsquares = [i * i for i in range(5)]")
        assert ran.ok, ran.render()
        names = "sorted(globals())"
        before = (await session.run_code(names)).value
        plain = await session.list_changes({}, max_bytes=_BIG)
        assert plain.variables is None
        asked = await session.list_changes({}, max_bytes=_BIG, variables_max_bytes=_BIG)
        # the listing left no name of its own among the user's globals
        assert (await session.run_code(names)).value == before
        if session.lists_variables:
            dump = asked.variables
            assert dump is not None
        else:
            # Its listing never carries them (the snapshotter dumps them apart): the same
            # variables must come the other way, and move as well.
            assert asked.variables is None
            dump = await session.dump_variables(max_bytes=_BIG)
        assert set(dump.saved) == {"x", "squares"}
        assert dump.skipped == ()
    async with await provider.create() as target:
        assert await target.load_variables(dump.data) == {}
        result = await target.run_code("x + 1, squares[-1]")
        assert result.value == "(42, 16)"
