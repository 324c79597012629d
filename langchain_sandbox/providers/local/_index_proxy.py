"""The only way out of pip's sandbox: an HTTP proxy in the host process that reaches the index only.

pip runs in a sandbox with a network namespace of its own (no route anywhere, not even to the host's
loopback; abstract unix sockets are per network namespace, so the host's are out of reach too). A
few lines of Python in front of pip (`FORWARDER`) listen on the sandbox's own loopback and
hand every connection pip opens to the host over a unix socket pair (``SCM_RIGHTS``); pip is told
to use that listener as its proxy. The host side (`IndexProxy`) reads the request, and opens a
connection only to a ``host:port`` of the application's [`PackageIndex`][langchain_sandbox.PackageIndex] (a ``CONNECT`` tunnel
for HTTPS, a forwarded request for plain HTTP); anything else gets ``403``. Name resolution happens
on the host, for the allowed names only.

A gVisor sandbox cannot pass descriptors to the host (its sockets live in gVisor's own kernel),
so there the forwarder relays instead (`RELAY_FORWARDER`): each connection pip opens is
copied, both ways, to a new connection to the proxy's unix socket, in a directory bound into
pip's container (``IndexProxy(socket_path=...)``). The host's check is the same.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Collection
from urllib.parse import urlsplit

_MAX_HEAD = 64 * 1024
_FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

FORWARDER = (
    "import array, os, socket, sys, threading\n"
    "control = socket.socket(fileno=int(sys.argv.pop(1)))\n"
    "listener = socket.create_server(('127.0.0.1', 0))\n"
    "def forward():\n"
    "    while True:\n"
    "        connection, _ = listener.accept()\n"
    "        fds = array.array('i', [connection.fileno()])\n"
    "        control.sendmsg([b'c'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])\n"
    "        connection.close()\n"
    "threading.Thread(target=forward, daemon=True).start()\n"
    "sys.argv[2:2] = ['--proxy', 'http://127.0.0.1:%d' % listener.getsockname()[1]]\n"
)
"""Python run in pip's process before pip: takes the control socket's descriptor from ``argv[1]``
and puts ``--proxy`` right after the ``install`` subcommand (``argv[1]`` once the descriptor is
gone)."""

RELAY_FORWARDER = (
    "import socket, sys, threading\n"
    "target = sys.argv.pop(1)\n"
    "listener = socket.create_server(('127.0.0.1', 0))\n"
    "def pump(source, sink):\n"
    "    try:\n"
    "        while data := source.recv(65536):\n"
    "            sink.sendall(data)\n"
    "        sink.shutdown(socket.SHUT_WR)\n"
    "    except OSError:\n"
    "        pass\n"
    "def relay(connection):\n"
    "    with connection, socket.socket(socket.AF_UNIX) as upstream:\n"
    "        try:\n"
    "            upstream.connect(target)\n"
    "        except OSError:\n"
    "            return\n"
    "        back = threading.Thread(target=pump, args=(upstream, connection), daemon=True)\n"
    "        back.start()\n"
    "        pump(connection, upstream)\n"
    "        back.join()\n"
    "def forward():\n"
    "    while True:\n"
    "        connection, _ = listener.accept()\n"
    "        threading.Thread(target=relay, args=(connection,), daemon=True).start()\n"
    "threading.Thread(target=forward, daemon=True).start()\n"
    "sys.argv[2:2] = ['--proxy', 'http://127.0.0.1:%d' % listener.getsockname()[1]]\n"
)
"""The forwarder of a sandbox that cannot pass descriptors (gVisor): ``argv[1]`` is the proxy's
socket path inside; each connection is relayed to it."""


def allowed_endpoints(urls: Collection[str]) -> frozenset[tuple[str, int]]:
    """``(host, port)`` pairs the proxy may connect to, from index and find-links URLs."""
    endpoints: set[tuple[str, int]] = set()
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            endpoints.add((parts.hostname.lower(), port))
    return frozenset(endpoints)


class IndexProxy:
    """Host side of pip's proxy for one install; see the module docstring.

    Args:
        allowed: The ``(host, port)`` pairs that may be reached.
        socket_path: Listen on a unix socket at this host path (for `RELAY_FORWARDER`)
            instead of receiving pip's connections as descriptors.

    Attributes:
        refused: The targets pip asked for and did not get (to tell the user why it failed).
    """

    def __init__(
        self, allowed: frozenset[tuple[str, int]], *, socket_path: str | None = None
    ) -> None:
        self.allowed = allowed
        self.refused: list[str] = []
        self.socket_path = socket_path
        self._host_end, self._sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._host_end.setblocking(False)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def sandbox_fd(self) -> int:
        """The descriptor pip's sandbox inherits (the forwarder's control socket)."""
        return self._sandbox_end.fileno()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[IndexProxy]:
        """Serve while pip runs; every connection is closed when the block ends."""
        if self.socket_path is not None:
            async with self._listening(self.socket_path):
                yield self
            return
        loop = asyncio.get_running_loop()
        loop.add_reader(self._host_end.fileno(), self._accept)
        try:
            yield self
        finally:
            loop.remove_reader(self._host_end.fileno())
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._host_end.close()
            self._sandbox_end.close()

    @contextlib.asynccontextmanager
    async def _listening(self, path: str) -> AsyncIterator[None]:
        # Bound through the directory's descriptor: a unix socket's path is at most 107 bytes,
        # and the session's directory may be longer.
        directory = await asyncio.to_thread(os.open, os.path.dirname(path), os.O_PATH)
        short = f"/proc/self/fd/{directory}/{os.path.basename(path)}"

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await self._serve_streams(reader, writer)

        try:
            server = await asyncio.start_unix_server(serve, path=short)
            # Whatever uid pip runs as in its sandbox connects; only its sandbox sees the socket.
            await asyncio.to_thread(os.chmod, short, 0o666)
        except BaseException:
            os.close(directory)
            raise
        try:
            yield
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()
            os.close(directory)
            self._host_end.close()
            self._sandbox_end.close()

    def _accept(self) -> None:
        """A connection pip opened arrived as a descriptor: serve it."""
        size = array.array("i").itemsize
        try:
            _message, ancillary, _flags, _address = self._host_end.recvmsg(
                1, socket.CMSG_SPACE(4 * size)
            )
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            asyncio.get_running_loop().remove_reader(self._host_end.fileno())
            return
        if not _message and not ancillary:  # the sandbox's end is closed
            asyncio.get_running_loop().remove_reader(self._host_end.fileno())
            return
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(data[: len(data) - (len(data) % size)])
                for fd in received:
                    task = asyncio.create_task(self._serve(socket.socket(fileno=fd)))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)

    async def _serve(self, client: socket.socket) -> None:
        client.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=client)
        await self._serve_streams(reader, writer)

    async def _serve_streams(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > _MAX_HEAD:
                return
            method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            tunnel = method.upper() == "CONNECT"
            endpoint = self._endpoint(target, tunnel)
            if endpoint is None:
                self.refused.append(target)
                writer.write(_FORBIDDEN)
                await writer.drain()
                return
            try:
                upstream_reader, upstream_writer = await asyncio.wait_for(
                    asyncio.open_connection(*endpoint), 30
                )
            except (OSError, TimeoutError):
                writer.write(_BAD_GATEWAY)
                await writer.drain()
                return
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                upstream_writer.write(_origin_form(head))
            await asyncio.gather(
                pipe_streams(reader, upstream_writer), pipe_streams(upstream_reader, writer)
            )
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            writer.close()

    def _endpoint(self, target: str, tunnel: bool) -> tuple[str, int] | None:
        if tunnel:
            host, _, port = target.rpartition(":")
            endpoint = (host.strip("[]").lower(), int(port)) if port.isdigit() else None
        else:
            found = allowed_endpoints([target])
            endpoint = next(iter(found)) if len(found) == 1 else None
        return endpoint if endpoint in self.allowed else None


def _origin_form(head: bytes) -> bytes:
    """A proxied plain-HTTP request as its origin server expects it: ``GET /path``, one request
    per connection (so every later request comes through the proxy's check again)."""
    request_line, *headers = head[:-4].split(b"\r\n")
    method, target, version = request_line.split(b" ", 2)
    path = urlsplit(target.decode("latin-1"))
    origin = (path.path or "/") + (f"?{path.query}" if path.query else "")
    kept = [
        line
        for line in headers
        if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"proxy-connection")
    ]
    lines = [b" ".join([method, origin.encode("latin-1"), version]), *kept, b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def pipe_streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until its end, then end ``writer`` (the other way may
    go on: a half-closed connection)."""
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()


__all__ = ["FORWARDER", "RELAY_FORWARDER", "IndexProxy", "allowed_endpoints", "pipe_streams"]
