"""A small web server started as a background process, for the process and port tests of every
provider: what it serves, and how a test waits until it listens (by its own output, not a clock)."""

from __future__ import annotations

import asyncio
import os
import socket

from langchain_sandbox.processes import ProcessSpec
from langchain_sandbox.providers.base import Session

PAGE = b"<h1>served from the sandbox</h1>\n"


def server_on(port: int) -> ProcessSpec:
    """The web server, listening on ``port`` of the sandbox's loopback."""
    return ProcessSpec(
        name="web",
        command=f"exec python3 -u -m http.server {port} --bind 127.0.0.1",
        cwd="/home/user/site",
    )


# For sandboxes without network (a loopback of their own): any port is theirs alone.
SERVER = server_on(8000)


def free_port() -> int:
    """A port no one listens on now on the host's loopback. Sandboxes with network on the
    emulated providers share the host's loopback, so a fixed port would be one port for every
    test running at once (xdist workers, another run on the machine)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def start_server(session: Session, server: ProcessSpec = SERVER) -> None:
    """Write the page, start ``server`` and return once it says it listens."""
    await session.write_files({"site/index.html": PAGE})
    await session.start_process(server)
    for _ in range(400):
        output = await session.process_output(server.name)
        if "Serving HTTP" in output.text:
            return
        assert output.state == "running", output
        await asyncio.sleep(0.05)
    raise AssertionError(f"the server never said it listens: {output}")


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (to see a sandbox's process die)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read().replace(b"\0", b" "):
                    found.append(int(entry))
        except OSError:
            continue
    return found


async def wait_until_gone(marker: str) -> list[int]:
    """Wait (a bounded number of polls) until no host process has ``marker`` in its command
    line; returns those still there."""
    for _ in range(200):
        if not host_processes_with(marker):
            break
        await asyncio.sleep(0.05)
    return host_processes_with(marker)
