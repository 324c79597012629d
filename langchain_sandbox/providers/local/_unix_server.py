"""A host-side asyncio server on a unix socket that a sandbox has bound in (pip's index proxy
under gVisor, a session's egress proxy): the one way out of a sandbox with no network."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving_unix(path: str, handler: Handler) -> AsyncIterator[None]:
    """Serve ``handler`` on a unix socket at ``path`` until the block ends; every connection
    still open then is cancelled."""
    tasks: set[asyncio.Task[None]] = set()
    # Bound through the directory's descriptor: a unix socket's path is at most 107 bytes,
    # and the session's directory may be longer.
    directory = await asyncio.to_thread(os.open, os.path.dirname(path), os.O_PATH)
    short = f"/proc/self/fd/{directory}/{os.path.basename(path)}"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await handler(reader, writer)

    try:
        server = await asyncio.start_unix_server(serve, path=short)
        # Whatever uid the sandbox runs as connects; only that sandbox sees the socket.
        await asyncio.to_thread(os.chmod, short, 0o666)
    except BaseException:
        os.close(directory)
        raise
    try:
        yield
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        os.close(directory)


RELAY = (
    "import os, socket, sys, threading\n"
    "def pump(source, sink):\n"
    "    try:\n"
    "        while data := source.recv(65536):\n"
    "            sink.sendall(data)\n"
    "        sink.shutdown(socket.SHUT_WR)\n"
    "    except OSError:\n"
    "        pass\n"
    "def relay(connection, target, preamble):\n"
    "    with connection, socket.socket(socket.AF_UNIX) as upstream:\n"
    "        try:\n"
    "            upstream.connect(target)\n"
    "            if preamble:\n"
    "                upstream.sendall(preamble)\n"
    "                if upstream.recv(1) != preamble[:1]:\n"
    "                    return\n"
    "        except OSError:\n"
    "            return\n"
    "        back = threading.Thread(target=pump, args=(upstream, connection), daemon=True)\n"
    "        back.start()\n"
    "        pump(connection, upstream)\n"
    "        back.join()\n"
    "def forward(listener, target, preamble=b''):\n"
    "    while True:\n"
    "        connection, _ = listener.accept()\n"
    "        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
    "        args = (connection, target, preamble)\n"
    "        threading.Thread(target=relay, args=args, daemon=True).start()\n"
)
"""Python for inside a sandbox: ``forward(listener, target)`` copies every connection made to
``listener`` (on the sandbox's own loopback), both ways, to a new connection to the unix socket
``target``. Clients that only speak TCP (pip, requests, curl) reach the host's proxy this way.
With a ``preamble``, each connection to ``target`` sends it first and waits for its first byte
back before copying anything (the host's side may then start TLS with nothing of the client's
read ahead: `_egress_transparent`)."""


__all__ = ["RELAY", "Handler", "serving_unix"]
