"""Against the real E2B API. Run only when ``E2B_API_KEY`` is set; everything made is killed.

E2B_API_KEY=e2b_... .venv/bin/pytest -m live_e2b tests/e2b/test_live.py
"""

from __future__ import annotations

import json

import pytest

from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.e2b import E2BProvider

# conftest.py skips these unless E2B_API_KEY was set when it was imported.
pytestmark = [pytest.mark.live_e2b, pytest.mark.timeout(600)]


@pytest.fixture
def live_provider(live_e2b_key: str, monkeypatch: pytest.MonkeyPatch) -> E2BProvider:
    # The emulator's settings must not redirect a live run.
    for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    return E2BProvider(api_key=live_e2b_key, lease_seconds=120)


async def test_live_session_code_files_pause_attach_and_gc(live_provider: E2BProvider) -> None:
    tag = {"thread_id": "langchain-sandbox-live-test"}
    session = await live_provider.create(SessionSpec(metadata=tag, network=False))
    try:
        assert (await session.run_code("x = 6 * 7\nx")).value == "42"
        command = await session.run_command("echo $HOME; exit 3")
        assert (command.stdout, command.exit_code) == ("/home/user\n", 3)
        await session.write_files({"live/a.txt": b"live"})
        assert await session.read_files(["live/a.txt"]) == {"live/a.txt": b"live"}
        assert [r["session_id"] for r in await live_provider.list_sessions(tag)] == [
            session.session_id
        ]
        await session.pause()
        attached = await live_provider.attach(json.loads(json.dumps(session.record)))
        assert attached is not None
        assert (await attached.run_code("x + 1")).value == "43"
        timed = await attached.run_code("import time\ntime.sleep(60)", timeout=3)
        assert timed.timed_out
        assert (await attached.run_code("x")).value == "42"
    finally:
        await live_provider.destroy(session.record)
    assert await live_provider.attach(session.record) is None
