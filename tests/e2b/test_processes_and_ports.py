"""Background processes and ports on E2B, through the real SDK against the emulator.

What E2B does and the emulator plays: a sandbox is one VM, so a daemon a command ``setsid``s
outlives the command, a port is the same for every command, the kernel and the edge, and
pausing keeps memory (the processes run on after a resume); killing the sandbox ends them.
``get_host(port)`` names ``PORT-SANDBOXID.<domain>``, the host E2B's edge routes on.
"""

from __future__ import annotations

import asyncio

import pytest
from e2b_code_interpreter import AsyncSandbox
from served_port import (
    PAGE,
    SERVER,
    free_port,
    host_processes_with,
    server_on,
    start_server,
    wait_until_gone,
)

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator

_DETACHED = "setsid nohup {} >/dev/null 2>&1 </dev/null & echo $!"


@pytest.fixture
def port() -> int:
    """The sandbox's web server port: an E2B sandbox here has network, so the host's loopback."""
    return free_port()


async def test_a_setsid_daemon_outlives_its_command_and_dies_with_the_sandbox(
    sdk_env: E2BEmulator,
) -> None:
    sandbox = await AsyncSandbox.create()
    started = await sandbox.commands.run(_DETACHED.format("sleep 3141"))
    pid = started.stdout.strip()
    alive = await sandbox.commands.run(f"kill -0 {pid} && echo alive")
    assert alive.stdout == "alive\n"
    assert host_processes_with("sleep 3141") != []
    await sandbox.kill()
    assert await wait_until_gone("sleep 3141") == []


async def test_a_port_is_one_port_for_commands_the_kernel_and_the_edge(
    sdk_env: E2BEmulator, port: int
) -> None:
    sandbox = await AsyncSandbox.create()
    await sandbox.files.write("/home/user/index.html", PAGE)
    await sandbox.commands.run(
        _DETACHED.format(f"python3 -u -m http.server {port} --bind 127.0.0.1"), cwd="/home/user"
    )
    probe = f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/').read()"
    for _ in range(200):
        execution = await sandbox.run_code(probe)
        if execution.error is None:
            break
        await asyncio.sleep(0.05)
    assert execution.text == repr(PAGE)  # the kernel reaches what a command serves
    host = sandbox.get_host(port)
    assert host == f"{port}-{sandbox.sandbox_id}.e2b.app"
    answer = await asyncio.to_thread(sdk_env.open, f"https://{host}/index.html?x=1")
    assert (answer.status, answer.body) == (200, PAGE)
    # The edge headers route the same way (what the SDK sends to sandbox.e2b.app).
    headed = await asyncio.to_thread(
        sdk_env.open,
        f"{sdk_env.url}/index.html",
        headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(port)},
    )
    assert (headed.status, headed.body) == (200, PAGE)
    # Below the ephemeral range: a port just freed there may be any connection's source port,
    # even the relay's own connection to it (which then reads its own request back).
    closed = await asyncio.to_thread(sdk_env.open, f"https://{sandbox.get_host(8001)}/")
    assert closed.status == 502
    routes = [(r.route, r.sandbox_id, r.status) for r in sdk_env.requests if "port" in r.route]
    assert routes == [
        (f"port {port}", sandbox.sandbox_id, 200),
        (f"port {port}", sandbox.sandbox_id, 200),
        ("port 8001", sandbox.sandbox_id, 502),
    ]
    await sandbox.kill()
    gone = await asyncio.to_thread(sdk_env.open, f"https://{host}/index.html")
    assert gone.status == 502


async def test_processes_and_an_exposed_port_through_the_provider(
    provider: E2BProvider, emulator: E2BEmulator, port: int
) -> None:
    session = await provider.create()
    assert (session.capabilities.processes, session.capabilities.ports) == (True, True)
    await start_server(session, server_on(port))
    emulator.clear_requests()
    url = await session.expose_port(port)
    assert url == f"https://{port}-{session.record['sandbox_id']}.e2b.app"
    assert await session.expose_port(port) == url  # idempotent
    assert emulator.requests == []  # get_host is computed: no API call
    answer = await asyncio.to_thread(emulator.open, f"{url}/index.html")
    assert (answer.status, answer.body) == (200, PAGE)
    output = await session.process_output(SERVER.name)
    assert '"GET /index.html HTTP/1.1" 200' in output.text
    # Every supervisor operation was one envd Start, as the SDK sends it.
    assert {r.route for r in emulator.requests if r.sandbox_id} == {"envd Start", f"port {port}"}
    stopped = await session.stop_process(SERVER.name)
    assert stopped.state == "stopped"
    after = await asyncio.to_thread(emulator.open, f"{url}/index.html")
    assert after.status == 502
    with pytest.raises(InvalidInputError):
        await session.expose_port(0)
    await session.close()


async def test_processes_survive_a_pause_and_an_attach_from_another_provider(
    provider: E2BProvider, emulator: E2BEmulator, port: int
) -> None:
    session = await provider.create()
    await start_server(session, server_on(port))
    url = await session.expose_port(port)
    await session.pause()
    assert emulator.sandbox_ids("paused") == [session.record["sandbox_id"]]
    elsewhere = E2BProvider(
        api_key=emulator.api_key, api_url=emulator.url, sandbox_url=emulator.url
    )
    try:
        attached = await elsewhere.attach(session.record)
        assert [(p.name, p.state) for p in await attached.list_processes()] == [("web", "running")]
        assert await attached.expose_port(port) == url
        answer = await asyncio.to_thread(emulator.open, f"{url}/index.html")
        assert (answer.status, answer.body) == (200, PAGE)
        await attached.close()
    finally:
        await elsewhere.aclose()
