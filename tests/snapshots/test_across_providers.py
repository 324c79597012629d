"""A snapshot taken on one provider restores on another: local <-> E2B and Runloop (real SDKs
against the package's emulators)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.snapshots import Snapshotter


def _emulated(name: str) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    if name == "e2b":
        from langchain_sandbox.testing.e2b_emulator import emulated_e2b_provider

        return emulated_e2b_provider
    from langchain_sandbox.testing.runloop_emulator import emulated_runloop_provider

    return emulated_runloop_provider


@pytest.fixture(params=["e2b", "runloop"])
async def remote(request: pytest.FixtureRequest) -> AsyncIterator[Provider]:
    async with _emulated(request.param)() as provider:
        yield provider


async def _files(session: Session, paths: list[str]) -> dict[str, bytes]:
    return await session.read_files(paths)


async def _modes(session: Session) -> dict[str, int]:
    return {
        info.path: info.mode & 0o777
        for info in await session.list_files(".", recursive=True)
        if info.kind == "file"
    }


async def test_local_to_remote_and_back(
    provider: Provider, remote: Provider, snapshotter: Snapshotter
) -> None:
    local = await provider.create()
    away = await remote.create()
    back = await provider.create()
    try:
        await local.write_files(
            {"src/main.py": b"print('hi')\n", "run.sh": b"#!/bin/sh\necho ok\n"}
        )
        await local.run_command("chmod 755 run.sh && mkdir -p out/empty")
        await local.run_code("import json\nconfig = {'retries': 3}\n")
        first = await snapshotter.capture(local, revision=1)

        report = await snapshotter.restore(away, first.ref)
        assert report.variables_lost == ()
        assert await _files(away, ["src/main.py", "run.sh"]) == {
            "src/main.py": b"print('hi')\n",
            "run.sh": b"#!/bin/sh\necho ok\n",
        }
        assert (await _modes(away))["run.sh"] == 0o755
        assert "out/empty" in {i.path for i in await away.list_files(".", recursive=True)}
        assert (await away.run_code("json.dumps(config)")).value == "'{\"retries\": 3}'"

        await away.write_files({"src/main.py": b"print('changed remotely')\n"})
        await away.run_code("config['retries'] = 5")
        second = await snapshotter.capture(away, base=first.ref, revision=2)
        # the variables, the manifest root and the one part holding (packing) the changed file
        assert second.blobs_written == 3

        await snapshotter.restore(back, second.ref)
        assert (await _files(back, ["src/main.py"]))[
            "src/main.py"
        ] == b"print('changed remotely')\n"
        assert (await back.run_code("config['retries']")).value == "5"
        assert (await back.run_command("./run.sh")).stdout == "ok\n"
    finally:
        for session in (local, away, back):
            await session.close()
