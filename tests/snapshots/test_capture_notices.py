"""What a capture says about the paths it leaves out is true: a FIFO a provider lists as a file
is not reported as vanished, and an unportable name is shown so the model can tell which it is."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.snapshots import Snapshotter


@pytest.fixture
async def runloop(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Provider]:
    # Runloop's list_files (its real SDK against the package's emulator) lists a FIFO as a
    # regular file; its own list_changes does not list FIFOs, so the provider-neutral one, which
    # compares list_files on the host, stands for a provider that does.
    from langchain_sandbox.providers.runloop.provider import RunloopSession
    from langchain_sandbox.testing.runloop_emulator import emulated_runloop_provider

    monkeypatch.setattr(RunloopSession, "list_changes", Session.list_changes)
    monkeypatch.setattr(RunloopSession, "lists_variables", False)
    async with emulated_runloop_provider() as provider:
        yield provider


async def test_a_fifo_listed_as_a_file_is_reported_as_unreadable_not_vanished(
    runloop: Provider, snapshotter: Snapshotter
) -> None:
    session = await runloop.create()
    try:
        assert (await session.run_command("mkfifo pipe && echo hi > plain.txt")).ok
        assert {"pipe", "plain.txt"} <= {i.path for i in await session.list_files(".")}
        info = await snapshotter.capture(session)
    finally:
        await session.close()
    assert info.files == 1
    assert info.omitted == {
        "pipe": "could not be read: not a regular file (a FIFO, socket or device) or not readable"
    }
    assert not any("vanished" in notice for notice in info.notices)


@pytest.mark.parametrize("name", ["e2b", "runloop"])
async def test_an_unportable_name_on_a_remote_sandbox_is_named_not_fatal(
    name: str, snapshotter: Snapshotter
) -> None:
    if name == "e2b":
        from langchain_sandbox.testing.e2b_emulator import emulated_e2b_provider as emulated
    else:
        from langchain_sandbox.testing.runloop_emulator import (
            emulated_runloop_provider as emulated,
        )
    async with emulated() as provider:
        session = await provider.create()
        try:
            assert (await session.run_command("printf x > 'back\\slash' && echo hi > a.txt")).ok
            info = await snapshotter.capture(session)
        finally:
            await session.close()
    assert info.files == 1
    assert list(info.omitted) == ["back%5Cslash"]
    assert "contains a backslash" in info.omitted["back%5Cslash"]
