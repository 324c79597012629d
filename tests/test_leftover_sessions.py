"""The suite's reaper of sessions left by killed processes (`leftover_sessions`): it finds a dead
process's mounted session under the directories it is given, destroys it through the provider,
and leaves a live process's session alone."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from leftover_sessions import orphaned_sessions, reap_orphaned_sessions

from langchain_sandbox.providers.local import LocalProvider

_DIES_WITH_A_SESSION = textwrap.dedent(
    """
    import asyncio, os, sys
    from langchain_sandbox.providers.local import LocalProvider

    async def main():
        session = await LocalProvider(base_dir=sys.argv[1]).create()
        print(session.session_id, flush=True)
        os._exit(0)  # as a SIGKILL would: nothing closed, nothing unmounted

    asyncio.run(main())
    """
)


def _mounted(path: Path) -> bool:
    return os.path.ismount(path)


async def test_a_dead_processs_session_is_reaped_and_a_live_ones_kept(tmp_path: Path) -> None:
    base = tmp_path / "left"
    died = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _DIES_WITH_A_SESSION, str(base)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    dead = base / "sessions" / died.stdout.strip()
    assert _mounted(dead / "ports"), "the dead process left no mount: nothing to test"
    live_provider = LocalProvider(base_dir=tmp_path / "live")
    async with await live_provider.create() as live:
        assert orphaned_sessions(tmp_path) == {base: {dead.name}}
        assert orphaned_sessions(tmp_path / "live") == {}  # the dead one is not under this root
        await asyncio.to_thread(reap_orphaned_sessions, tmp_path)  # it runs a loop of its own
        assert not dead.exists()
        assert (await live.run_code("6 * 7")).value == "42"
        assert _mounted(Path(live.directory) / "ports")
