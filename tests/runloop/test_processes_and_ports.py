"""Background processes and ports on Runloop, through the real SDK against the emulator.

What Runloop does and the emulator plays: a process an execution leaves behind (``setsid``)
keeps running after it; suspending keeps the disk but not memory, so after a resume the
supervisor finds its processes ``lost``; shutting the devbox down ends them. A devbox has one
V2 tunnel (``enable_tunnel``); the SDK builds a port's URL from its key,
``https://{port}-{tunnel_key}.tunnel.{domain}``, and the edge routes on that host name.
"""

from __future__ import annotations

import asyncio
import re

from served_port import PAGE, SERVER, host_processes_with, start_server, wait_until_gone

from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator


async def test_a_setsid_daemon_outlives_its_execution_and_dies_with_the_devbox(
    provider: RunloopProvider,
) -> None:
    session = await provider.create()
    started = await session.run_command(
        "setsid nohup sleep 3143 >/dev/null 2>&1 </dev/null & echo $!"
    )
    alive = await session.run_command(f"kill -0 {started.stdout.strip()} && echo alive")
    assert alive.stdout == "alive\n"
    assert host_processes_with("sleep 3143") != []
    await session.close()
    assert await wait_until_gone("sleep 3143") == []


async def test_processes_and_a_tunnel_through_the_provider(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    """Devboxes with the network off: the edge reaches the port through the machine's relay."""
    session = await provider.create()
    assert (session.capabilities.processes, session.capabilities.ports) == (True, True)
    await start_server(session)
    emulator.clear_requests()
    url = await session.expose_port(8000)
    match = re.fullmatch(r"https://8000-([0-9a-f]+)\.tunnel\.127\.0\.0\.1", url)
    assert match is not None, url
    assert await session.expose_port(8000) == url  # idempotent
    # The SDK's requests: look for a tunnel, enable one (open), then read it; once.
    calls = [(r.method, r.path.rsplit("/", 1)[-1], r.json()) for r in emulator.requests]
    devbox_id = session.devbox_id
    assert calls[:3] == [
        ("GET", devbox_id, None),
        ("POST", "enable_tunnel", {"auth_mode": "open"}),
        ("GET", devbox_id, None),
    ]
    assert [c[1] for c in calls].count("enable_tunnel") == 1
    answer = await asyncio.to_thread(emulator.open, f"{url}/index.html")
    assert (answer.status, answer.body) == (200, PAGE)
    assert emulator.requests[-1].path == "/index.html"
    output = await session.process_output(SERVER.name)
    assert '"GET /index.html HTTP/1.1" 200' in output.text
    await session.stop_process(SERVER.name)
    assert (await asyncio.to_thread(emulator.open, f"{url}/")).status == 502
    unknown = await asyncio.to_thread(emulator.open, "https://8000-feed.tunnel.127.0.0.1/")
    assert unknown.status == 404
    await session.close()


async def test_suspend_loses_processes_but_keeps_the_tunnel(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    session = await provider.create()
    await start_server(session)
    url = await session.expose_port(8000)
    await session.pause()
    attached = await provider.attach(session.record)
    assert [(p.name, p.state) for p in await attached.list_processes()] == [("web", "lost")]
    assert await attached.expose_port(8000) == url
    assert emulator.count("/enable_tunnel") == 1
    assert (await asyncio.to_thread(emulator.open, f"{url}/")).status == 502
    await attached.start_process(SERVER)  # a lost process of that name is replaced
    for _ in range(200):
        answer = await asyncio.to_thread(emulator.open, f"{url}/index.html")
        if answer.status == 200:
            break
        await asyncio.sleep(0.05)
    assert (answer.status, answer.body) == (200, PAGE)
    await attached.close()
