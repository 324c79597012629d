"""Against the real Runloop API: run only when ``RUNLOOP_API_KEY`` is set (``-m live_runloop``).

Every devbox and snapshot made here is shut down or deleted in ``finally`` blocks, so a failing
test does not leave paid resources behind.
"""

from __future__ import annotations

import pytest

from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.runloop import RunloopProvider

from .keys import LIVE_KEY

pytestmark = [
    pytest.mark.live_runloop,
    pytest.mark.skipif(not LIVE_KEY, reason="needs RUNLOOP_API_KEY (a real Runloop account)"),
    pytest.mark.timeout(900),
]


async def test_live_session_code_files_pause_and_snapshot() -> None:
    provider = RunloopProvider(api_key=LIVE_KEY)
    session = await provider.create(SessionSpec(metadata={"thread_id": "live-test"}))
    copy = None
    snapshot_id = None
    try:
        assert (await session.run_code("x = 20\nx + 22")).value == "42"
        command = await session.run_command("echo $HOME; exit 4")
        assert (command.stdout, command.exit_code) == ("/home/user\n", 4)
        await session.write_files({"live/a.txt": b"alpha"})
        assert await session.read_files(["live/a.txt"]) == {"live/a.txt": b"alpha"}
        listed = await provider.list_sessions({"thread_id": "live-test"})
        assert session.session_id in {r["session_id"] for r in listed}

        await session.pause()
        again = await provider.attach(session.record)
        assert again is not None
        assert (await again.run_code("x")).value == "20"

        snapshot_id = await again.snapshot_disk()
        copy = await provider.create_from_snapshot(snapshot_id)
        assert await copy.read_files(["live/a.txt"]) == {"live/a.txt": b"alpha"}
        assert (await copy.run_code("x + 1")).value == "21"
    finally:
        await session.close()
        if copy is not None:
            await copy.close()
        if snapshot_id is not None:
            await provider.sdk().api.devboxes.disk_snapshots.delete(snapshot_id)
        await provider.aclose()
    assert await provider.attach(session.record) is None
