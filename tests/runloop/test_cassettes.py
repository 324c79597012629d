"""The Runloop SDK's wire format, pinned by cassettes replayed with no server running.

What the committed cassettes are: recordings of three flows against the local Runloop emulator
(``langchain_sandbox.testing.runloop_emulator``), with its address rewritten to
``http://runloop-emulator.invalid`` (a name that never resolves), named ``<flow>-emulator-sdk<v>``.
They are no evidence about the real Runloop API: they pin what this SDK version sends and how the
provider reads the emulator's answers, so an SDK upgrade that changes a request fails here, with no
emulator started. Evidence about the real API comes only from ``test_live.py`` (run with
``RUNLOOP_API_KEY``), and from a cassette recorded with ``RUNLOOP_CASSETTES=live``, named
``<flow>-live-sdk<v>``, which keeps the real host; each committed cassette of a flow is replayed.

By default (``RUNLOOP_CASSETTES`` unset or ``replay``) each cassette replays (vcrpy
``record_mode="none"``): any request the cassette does not hold fails the test, so nothing reaches
the network. To record again:

* ``RUNLOOP_CASSETTES=emulator pytest tests/runloop/test_cassettes.py`` records the emulator
  cassettes against a fresh local emulator;
* ``RUNLOOP_CASSETTES=live RUNLOOP_API_KEY=... pytest tests/runloop/test_cassettes.py`` records
  the live cassettes against the real API (the flows shut down every devbox they make).

Requests match on method, scheme, host, port, path and query (bodies hold random ids and
timeouts); the API key, request ids, ``x-stainless-*`` and user-agent headers are never written,
and request bodies over 2 kB (the worker program, uploads) are replaced by their size. The SDK
version is part of each cassette's name, so an upgrade asks for a new recording instead of
replaying stale traffic.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import runloop_api_client
import vcr

from langchain_sandbox.errors import InvalidPathError
from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

from .keys import LIVE_KEY

MODE = os.environ.get("RUNLOOP_CASSETTES", "replay")
CASSETTES = Path(__file__).parent / "cassettes"
EMULATOR_HOST = "http://runloop-emulator.invalid"
"""The address the emulator cassettes name: the emulator's own changes with every run, and the
real API's would claim a recording that never was."""
_SOURCES = ("emulator", "live")
_DROPPED_HEADERS = ("authorization", "x-request-id", "user-agent", "host", "date", "server")
_MAX_BODY = 2048


def _cassette(flow: str, source: str) -> Path:
    return CASSETTES / f"{flow}-{source}-sdk{runloop_api_client.__version__}.yaml"


def _replays(flow: str) -> pytest.MarkDecorator:
    """One test per committed recording of ``flow`` (replay), or the one being recorded."""
    if MODE in _SOURCES:
        sources = [MODE]
    else:
        # the emulator's always: missing, it fails with how to record it
        sources = [s for s in _SOURCES if s == "emulator" or _cassette(flow, s).exists()]
    return pytest.mark.parametrize("source", sources)


def _scrub_request(origin: str | None) -> Callable[[Any], Any]:
    def scrub(request: Any) -> Any:
        if origin:
            request.uri = request.uri.replace(origin, EMULATOR_HOST)
        for name in list(request.headers):
            if name.lower() in _DROPPED_HEADERS or name.lower().startswith("x-stainless"):
                del request.headers[name]
        body = request.body or b""
        if len(body) > _MAX_BODY:
            request.body = f"<{len(body)} bytes not kept>".encode()
        return request

    return scrub


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    for name in list(response["headers"]):
        if name.lower() in _DROPPED_HEADERS:
            del response["headers"][name]
    return response


@contextlib.asynccontextmanager
async def _recorded(flow: str, source: str) -> AsyncIterator[RunloopProvider]:
    """A provider whose traffic is replayed from (or recorded into) the flow's cassette."""
    path = _cassette(flow, source)
    async with contextlib.AsyncExitStack() as stack:
        origin: str | None = None
        if MODE == "replay":
            if not path.exists():
                pytest.fail(f"{path.name} is missing; record it (see this module's docstring)")
            host = EMULATOR_HOST if source == "emulator" else None  # live: the SDK's default
            provider = RunloopProvider(api_key="cassette-key", base_url=host, retry_deadline=5.0)
        elif MODE == "emulator":
            emulator = await stack.enter_async_context(RunloopEmulator())
            origin = emulator.url
            provider = emulator.provider()
        elif MODE == "live":
            if not LIVE_KEY:
                pytest.fail("RUNLOOP_CASSETTES=live needs RUNLOOP_API_KEY")
            provider = RunloopProvider(api_key=LIVE_KEY)
        else:
            pytest.fail(f"RUNLOOP_CASSETTES must be replay, emulator or live, not {MODE!r}")
        if MODE != "replay":
            path.unlink(missing_ok=True)  # record_mode "all" would append to the old transcript
        recorder = vcr.VCR(
            record_mode="none" if MODE == "replay" else "all",
            match_on=["method", "scheme", "host", "port", "path", "query"],
            before_record_request=_scrub_request(origin),
            before_record_response=_scrub_response,
            decode_compressed_response=True,
        )
        cassette = stack.enter_context(recorder.use_cassette(str(path)))
        if MODE == "replay" and source == "emulator":
            elsewhere = [r.uri for r in cassette.requests if not r.uri.startswith(EMULATOR_HOST)]
            assert not elsewhere, f"an emulator cassette names another host: {elsewhere[:3]}"
        try:
            yield provider
        finally:
            await provider.aclose()
        if MODE == "replay":
            unplayed = [
                r.uri for i, r in enumerate(cassette.requests) if not cassette.play_counts[i]
            ]
            assert not unplayed, f"recorded requests the flow did not make: {unplayed}"


async def _flow(name: str, source: str, body: Callable[[RunloopProvider], Awaitable[None]]) -> None:
    async with _recorded(name, source) as provider:
        await body(provider)


@_replays("python_commands_files")
async def test_python_commands_and_files(source: str) -> None:
    async def flow(provider: RunloopProvider) -> None:
        async with await provider.create(SessionSpec(metadata={"thread_id": "c-1"})) as session:
            assert (await session.run_code("x = 21\nprint('set')")).stdout == "set\n"
            assert (await session.run_code("x * 2")).value == "42"
            command = await session.run_command("echo hi; exit 3")
            assert (command.stdout, command.exit_code) == ("hi\n", 3)
            await session.write_files({"data/a.txt": b"alpha"})
            assert await session.read_files(["data/a.txt"]) == {"data/a.txt": b"alpha"}
            listing = {info.path for info in await session.list_files(".", recursive=True)}
            assert {"data", "data/a.txt"} <= listing
            with pytest.raises(InvalidPathError):
                await session.read_files(["missing.txt"])

    await _flow("python_commands_files", source, flow)


@_replays("pause_attach")
async def test_pause_and_attach(source: str) -> None:
    async def flow(provider: RunloopProvider) -> None:
        session = await provider.create()
        try:
            await session.run_code("kept = [1, 2]")
            await session.pause()
            again = await provider.attach(session.record)
            assert again is not None
            assert (await again.run_code("kept + [3]")).value == "[1, 2, 3]"
        finally:
            await session.close()
        assert await provider.attach(session.record) is None

    await _flow("pause_attach", source, flow)


@_replays("disk_snapshot")
async def test_disk_snapshot_and_a_devbox_from_it(source: str) -> None:
    async def flow(provider: RunloopProvider) -> None:
        async with await provider.create() as source:
            await source.write_files({"state.txt": b"v1"})
            snapshot_id = await source.snapshot_disk()
            async with await provider.create_from_snapshot(snapshot_id) as copy:
                assert await copy.read_files(["state.txt"]) == {"state.txt": b"v1"}

    await _flow("disk_snapshot", source, flow)
