"""E2B's ``list_changes`` is one code execution (the real SDK against the emulator): the kernel
lists, compares with the host's listing (named by a token once the kernel answered it), reads the
changed regular files and dumps the variables, and lists a file exactly as ``list_files`` does."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

from langchain_sandbox.providers.base import ChangeListing, FileInfo
from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator

_MAX = 1 << 24


def _packed_request(code: str) -> dict[str, Any]:
    """The request a list_changes cell carries (base64 JSON)."""
    match = re.search(r"json\.loads\(base64\.b64decode\('([A-Za-z0-9+/=]+)'\)\)", code)
    assert match is not None
    request: dict[str, Any] = json.loads(base64.b64decode(match.group(1)))
    return request


def _applied(known: Mapping[str, FileInfo], listing: ChangeListing) -> dict[str, FileInfo]:
    updated = {path: info for path, info in known.items() if path not in listing.gone}
    updated.update((info.path, info) for info in listing.changed)
    return updated


async def test_a_capture_listing_is_one_request_carrying_a_token(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        assert (await session.run_code("x = 1")).ok
        assert (await session.run_command("printf a > a.txt && mkfifo pipe")).ok
        first = await session.list_changes({}, max_bytes=_MAX)
        known = _applied({}, first)
        assert "pipe" not in known
        assert (await session.run_command("printf bb > a.txt")).ok
        emulator.clear_requests()
        listing = await session.list_changes(
            known, max_bytes=_MAX, variables_max_bytes=_MAX, since=first.cursor
        )
        [request] = emulator.requests
        assert request.route == "jupyter execute"
        assert sorted(_packed_request(request.body["code"])) == [
            "max_bytes",
            "max_file_bytes",
            "mode_mask",
            "mtime_unit_ns",
            "since",  # the token, not the listing
        ]
        assert [info.path for info in listing.changed] == ["a.txt"]
        assert dict(listing.contents) == {"a.txt": b"bb"}
        assert listing.variables is not None
        assert listing.variables.saved == ("x",)


async def test_a_new_kernel_gets_the_listing_itself(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        assert (await session.run_command("printf a > a.txt")).ok
        first = await session.list_changes({}, max_bytes=_MAX)
        known = _applied({}, first)
        forget = (
            "import sys\n"
            "for _name in [n for n in sys.modules if 'guest_changes' in n]:\n"
            "    del sys.modules[_name]\n"
        )
        assert (await session.run_code(forget)).ok
        assert (await session.run_command("printf b > b.txt")).ok
        emulator.clear_requests()
        listing = await session.list_changes(known, max_bytes=_MAX, since=first.cursor)
        assert [request.route for request in emulator.requests] == ["jupyter execute"] * 2
        assert [info.path for info in listing.changed] == ["b.txt"]


async def test_list_files_leaves_fifos_out_and_lists_what_list_changes_lists(
    provider: E2BProvider,
) -> None:
    async with await provider.create() as session:
        made = await session.run_command(
            "mkfifo pipe && printf x > f && chmod 4755 f && mkdir d && ln -s f d/link"
            " && touch -d '2020-01-01 00:00:00.1234565' f"
        )
        assert made.ok, made.render()
        listed = {info.path: info for info in await session.list_files(".", recursive=True)}
        assert "pipe" not in listed
        assert listed["f"].mode == 0o755  # as envd reports it: Go's FileMode.Perm()
        assert listed["f"].mtime_ns % 1000 == 0  # microseconds, as the SDK's datetime has them
        changes = await session.list_changes({}, max_bytes=_MAX)
        assert {info.path: info for info in changes.changed} == listed


async def test_large_changed_files_come_one_line_each_and_over_the_cap_not_at_all(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        made = await session.run_command(
            "head -c 3000000 /dev/urandom > three.bin && head -c 5000000 /dev/urandom > five.bin"
            " && printf small > small.txt"
        )
        assert made.ok, made.render()
        assert (await session.run_code("x = 'kept'")).ok
        emulator.clear_requests()
        listing = await session.list_changes({}, max_bytes=_MAX, variables_max_bytes=_MAX)
        assert [request.route for request in emulator.requests] == ["jupyter execute"]
        # over the 4 MB cap: listed, read by the caller
        assert {"three.bin", "five.bin", "small.txt"} <= {info.path for info in listing.changed}
        assert set(listing.contents) == {"three.bin", "small.txt"}
        read = await session.read_files(["three.bin"])
        assert listing.contents["three.bin"] == read["three.bin"]
        assert listing.variables is not None
        assert listing.variables.saved == ("x",)
