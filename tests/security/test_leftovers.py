"""Class 10: what one call leaves behind must not break the next, nor mislead the host.

Forked children of ``run_code`` outlived their call (250 sleepers broke the next command), FIFOs
and sockets were listed as files (now a FIFO is listed as a FIFO, a socket not at all), a forged negative ``dropped`` rendered nonsense, and asyncio
logged "Future exception was never retrieved".
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from pathlib import Path

import pytest

from langchain_sandbox.errors import InvalidPathError
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

_HANG = 120.0

_SLEEPERS = """
import os, time
for _ in range(COUNT):
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)
"""

_COUNT_PROCESSES = "import os\nsum(name.isdigit() for name in os.listdir('/proc'))"


async def test_forked_children_end_with_their_call(provider: LocalProvider) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=60.0, max_processes=64)))
    try:
        before = await session.run_code(_COUNT_PROCESSES)
        for _ in range(3):
            # 50 sleepers per call: three calls would pass the 64-process limit if they stayed.
            made = await session.run_code(_SLEEPERS.replace("COUNT", "50"))
            assert made.ok, made.render()
        after = await session.run_code(_COUNT_PROCESSES)
        assert after.value == before.value
        command = await session.run_command("for i in 1 2 3; do sleep 0 & done; wait; echo ok")
        assert command.stdout.strip() == "ok", command.render()
        # A service started in a session of its own outlives the call, as documented.
        service = await session.run_code(
            "import subprocess\n"
            "server = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
            "server.pid"
        )
        alive = await session.run_code(f"import os\nos.kill({service.value}, 0)\n'alive'")
        assert alive.value == "'alive'", alive.render()
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_fifos_are_listed_as_fifos_and_sockets_left_out_of_listings_and_snapshots(
    provider: LocalProvider, tmp_path: Path
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    try:
        made = await session.run_code(
            "import os, socket\n"
            "os.mkfifo('/home/user/pipe')\n"
            "server = socket.socket(socket.AF_UNIX)\n"
            "server.bind('/home/user/sock')\n"
            "open('/home/user/plain.txt', 'w').write('x')"
        )
        assert made.ok, made.render()
        listing = await session.list_files(".", recursive=True)
        kinds = {info.path: info.kind for info in listing if not info.path.startswith(".")}
        gvisor = session.launcher.isolation == "gvisor"
        # A FIFO is listed as one (a restore makes it again; nothing reads it); a socket never.
        expected = {"plain.txt": "file"} if gvisor else {"plain.txt": "file", "pipe": "fifo"}
        assert kinds == expected
        if gvisor:
            # gVisor keeps FIFOs and sockets in its own kernel: the host never sees them.
            assert not await asyncio.to_thread(os.path.lexists, f"{session.workspace_dir}/pipe")
            with pytest.raises(InvalidPathError, match="does not exist"):
                await session.list_files("pipe")
        else:
            assert [(i.path, i.kind, i.size) for i in await session.list_files("pipe")] == [
                ("pipe", "fifo", 0)
            ]
            assert await session.list_files("sock") == []
        snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
        info = await asyncio.wait_for(snapshotter.capture(session), _HANG)
        manifest = await snapshotter.load_manifest(info.ref)
        assert set(manifest.files) == {"plain.txt"}
        assert manifest.fifos == (() if gvisor else ("pipe",))
        assert not {"pipe", "sock"} & set(manifest.omitted)
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_a_forged_negative_dropped_count_kills_the_worker(provider: LocalProvider) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    try:
        forge = (
            "import json, os, sys\n"
            "frame = sys._getframe()\n"
            "while 'request_id' not in frame.f_locals:\n"
            "    frame = frame.f_back\n"
            "events = frame.f_locals['self'].events\n"
            "events.send({'ev': 'done', 'id': frame.f_locals['request_id'],\n"
            "             'dropped': {'stdout': -5000}})\n"
        )
        # The worker's real reply follows the forged one before the fence's: a second reply.
        result = await session.run_code(forge)
        assert result.error is not None
        assert result.error.value.startswith(
            "the host killed the Python worker: it sent a second reply to one request"
        )
        assert result.omitted_bytes == 0
        assert (await session.run_code("'fine'")).value == "'fine'"
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_a_killed_call_logs_no_unretrieved_future(
    provider: LocalProvider, caplog: pytest.LogCaptureFixture
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    gc.collect()  # what earlier tests left for the collector is not this test's to judge
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            stuck = await asyncio.wait_for(
                session.run_code(
                    "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "while True:\n    pass",
                    timeout=0.5,
                ),
                _HANG,
            )
            assert stuck.timed_out
            assert (await session.run_code("1")).value == "1"
            gc.collect()
            await asyncio.sleep(0)
        assert "Future exception was never retrieved" not in caplog.text
    finally:
        await asyncio.wait_for(session.close(), _HANG)
