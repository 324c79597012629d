"""An exposed port is reachable from the host, never from another sandbox: its relay's socket
lies in a directory only its own sandbox binds, and the host side listens on the host's
loopback, which a sandbox with the network off has no route to (both isolation levels)."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request

from langchain_sandbox.processes import ProcessSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.providers.local._launcher import PORTS_DIR

_PROBE = (
    "import json, os, socket, sys\n"
    "port, foreign = int(sys.argv[1]), sys.argv[2]\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', port), timeout=3).close()\n"
    "    tcp = 'connected'\n"
    "except OSError as exc:\n"
    "    tcp = type(exc).__name__\n"
    "print(json.dumps({'tcp': tcp, 'ports': sorted(os.listdir(sys.argv[3])),\n"
    "                  'foreign': os.path.exists(foreign)}))\n"
)


async def test_another_sandbox_cannot_reach_an_exposed_port(provider: LocalProvider) -> None:
    async with await provider.create() as owner, await provider.create() as other:
        await owner.write_files({"index.html": b"mine"})
        await owner.start_process(
            ProcessSpec("web", "exec python3 -m http.server 8000 --bind 127.0.0.1")
        )
        url = await owner.expose_port(8000)
        host_port = urllib.parse.urlsplit(url).port
        assert host_port is not None

        def get() -> bytes:
            with urllib.request.urlopen(f"{url}/index.html", timeout=10) as response:
                return bytes(response.read())

        for _ in range(100):  # the server may still be starting
            try:
                assert await asyncio.to_thread(get) == b"mine"
                break
            except OSError:
                await asyncio.sleep(0.2)
        else:
            raise AssertionError("the exposed port never answered the host")
        await other.write_files({"probe.py": _PROBE.encode()})
        foreign = f"{owner.directory}/ports/port-8000.sock"
        seen = await other.run_command(
            f"python3 probe.py {host_port} {foreign} {PORTS_DIR}", timeout=30
        )
        assert seen.ok, seen.render()
        facts = json.loads(seen.stdout)
        assert facts["tcp"] != "connected"  # the host's loopback is not its loopback
        assert facts["ports"] == []  # its own port directory, empty
        assert facts["foreign"] is False  # the owner's socket, by its host path: not there
