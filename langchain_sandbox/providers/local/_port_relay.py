"""Ports of a local sandbox that keeps its network off: a relay through a unix socket.

The sandbox has a network namespace of its own (no route to the host, not even its loopback),
and keeps it. A port is reached instead through the session's port directory, which only this
session's sandbox binds (`Launcher.ports_dir`, at `PORTS_DIR` inside):

* **inside**, a relay (the process supervisor's ``relay`` operation, run as the internal process
  ``.port-PORT``) listens on ``PORTS_DIR/port-PORT.sock`` and connects each connection to
  ``127.0.0.1:PORT`` in the sandbox;
* **on the host**, `PortRelays` listens on ``EXPOSE_HOST:<ephemeral port>`` (loopback unless the
  provider's ``expose_host`` says otherwise) and pumps each connection to that socket.

Under gVisor the relay's socket is a host socket because the worker's container may create
them (``runsc --host-uds=create``); it still cannot connect to any socket of the host's. The
TCP listener belongs to the session: closing the session closes it, and the relay dies with the
sandbox. A relay gone with its sandbox (a worker restart) is started again by the next
`PortRelays.expose` of its port, behind the same URL.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from typing import TYPE_CHECKING

from langchain_sandbox.errors import SandboxError
from langchain_sandbox.processes import ProcessSpec
from langchain_sandbox.providers import process_control
from langchain_sandbox.providers.local._index_proxy import pipe_streams
from langchain_sandbox.providers.names import LOCAL

if TYPE_CHECKING:
    from langchain_sandbox.providers.local.session import LocalSession

RELAY_PREFIX = ".port-"
"""Internal process names of the relays (``.port-8000``): never listed, never capped."""

_READY = "relaying to"
_READY_WAIT = 10.0


def relay_name(port: int) -> str:
    return f"{RELAY_PREFIX}{port}"


class PortRelays:
    """The host side of one session's exposed ports.

    Args:
        ports_dir: The session's port directory on the host.
        host: The address the host listeners bind.
    """

    def __init__(self, ports_dir: str, host: str) -> None:
        self.ports_dir = ports_dir
        self.host = host
        self._servers: dict[int, asyncio.Server] = {}
        self._urls: dict[int, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._directory: int | None = None

    async def expose(self, session: LocalSession, port: int) -> str:
        """The URL of ``port`` in ``session``'s sandbox (the same for the same port), its relay
        started if it is not running."""
        async with self._lock:
            await self._start_relay(session, port)
            if port not in self._servers:
                if self._directory is None:
                    self._directory = await asyncio.to_thread(os.open, self.ports_dir, os.O_PATH)
                server = await asyncio.start_server(
                    lambda reader, writer: self._serve(port, reader, writer), self.host, 0
                )
                self._servers[port] = server
                self._urls[port] = _url(server)
            return self._urls[port]

    async def _start_relay(self, session: LocalSession, port: int) -> None:
        socket_dir = session.launcher.sandbox_ports_dir
        assert socket_dir is not None
        request = json.dumps({"port": port, "socket": f"{socket_dir}/{_socket_name(port)}"})
        command = " ".join(
            [
                "exec",
                shlex.quote(session.guest_python),
                "-I",
                "-S",
                "-c",
                shlex.quote(process_control.supervisor_source()),
                "relay",
                shlex.quote(request),
            ]
        )
        spec = ProcessSpec(relay_name(port), command, restart=False).checked(internal=True)
        info = await process_control.start_process(session, spec, existing_ok=True)
        if info.output or info.state != "running":
            ready = info.state == "running" and _READY in info.output
            text = info.output
        else:  # a relay asked for again (its first output is not repeated), or a slow start
            ready, text = await self._ready(session, port)
        if not ready:
            raise SandboxError(
                f"The relay of port {port} did not start: {text[-500:]}", provider=LOCAL
            )

    @staticmethod
    async def _ready(session: LocalSession, port: int) -> tuple[bool, str]:
        """Whether the relay of ``port`` runs and listens (it says so first), waiting up to
        `_READY_WAIT` seconds; and what it printed."""
        deadline = asyncio.get_running_loop().time() + _READY_WAIT
        while True:
            output = await process_control.process_output(
                session, relay_name(port), 0, internal=True
            )
            if output.state != "running" or _READY in output.text:
                return output.state == "running" and _READY in output.text, output.text
            if asyncio.get_running_loop().time() >= deadline:
                return False, output.text or "it printed nothing"
            await asyncio.sleep(0.05)

    async def _serve(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            # Through the directory's descriptor: a unix socket's path is at most 107 bytes.
            path = f"/proc/self/fd/{self._directory}/{_socket_name(port)}"
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(path)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(
                pipe_streams(reader, upstream_writer), pipe_streams(upstream_reader, writer)
            )
        finally:
            writer.close()
            upstream_writer.close()

    async def close(self) -> None:
        """Stop listening and drop every connection. Idempotent."""
        servers, self._servers = list(self._servers.values()), {}
        self._urls.clear()
        for server in servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
        if self._directory is not None:
            os.close(self._directory)
            self._directory = None


def _socket_name(port: int) -> str:
    return f"port-{port}.sock"


def _url(server: asyncio.Server) -> str:
    address, port = server.sockets[0].getsockname()[:2]
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


__all__ = ["RELAY_PREFIX", "PortRelays", "relay_name"]
