"""The egress proxy's connection-level parts: its upstream connections, what a ``CONNECT``
tunnel carries, and WebSocket relays.

* `Upstream`: an HTTP/1.1 client connection (``h11``) to one upstream server, kept alive while
  the sandbox's requests go to that same host and port.
* A tunnel is TLS when its first byte is a TLS handshake record (``0x16``); anything else is read
  as plain HTTP (a ``ws://`` client behind a proxy sends its upgrade through ``CONNECT``), still
  parsed by ``h11``, so bytes that are neither end the connection instead of passing unread.
* A WebSocket upgrade is checked like any request (policy, ``Host``, secrets only toward their
  hosts); once the upstream answers ``101``, frames are copied both ways as opaque bytes, each
  way through one bounded buffer (`pipe_streams`: 64 KiB read, then written and drained before
  the next read), until either side ends. Other upgrades are refused (`refused_upgrade`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from typing import Any

from langchain_sandbox.providers.local._index_proxy import pipe_streams

_TLS_HANDSHAKE = 0x16


class Upstream:
    """An HTTP/1.1 client connection to one upstream server, kept while requests go there."""

    def __init__(
        self,
        h11: Any,
        host: str,
        port: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self._h11 = h11
        self.endpoint = (host, port)
        self.connection = h11.Connection(h11.CLIENT)
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(
        cls,
        h11: Any,
        host: str,
        port: int,
        address: tuple[str, int],
        context: ssl.SSLContext | None,
    ) -> Upstream:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                *address, ssl=context, server_hostname=host if context else None
            ),
            30,
        )
        return cls(h11, host, port, reader, writer)

    def reusable(self, host: str, port: int) -> bool:
        h11 = self._h11
        if self.endpoint != (host, port) or self.connection.our_state is not h11.DONE:
            return False
        if self.connection.their_state is not h11.DONE:
            return False
        self.connection.start_next_cycle()
        return True

    async def send(self, event: Any) -> None:
        data = self.connection.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def next(self) -> Any:
        return await next_event(self._h11, self.connection, self.reader)

    def close(self) -> None:
        self.writer.close()


async def next_event(h11: Any, connection: Any, reader: asyncio.StreamReader) -> Any:
    """The next h11 event of ``connection``, reading from ``reader`` as it needs."""
    while (event := connection.next_event()) is h11.NEED_DATA:
        connection.receive_data(await reader.read(65536))
    return event


def upgrade_tokens(headers: Any) -> list[bytes]:
    """The protocols a request's ``Upgrade`` headers ask for, lower case (empty: no upgrade)."""
    return [
        token.strip().lower()
        for name, value in headers
        if name == b"upgrade"
        for token in value.split(b",")
        if token.strip()
    ]


def refused_upgrade(tokens: list[bytes]) -> str | None:
    """Why an upgrade to ``tokens`` is refused, or ``None`` for a WebSocket (relayed)."""
    if tokens == [b"websocket"]:
        return None
    if any(token.startswith(b"h2c") for token in tokens):
        return "HTTP/2 cleartext upgrades (h2c) are refused: the egress proxy speaks HTTP/1.1 only"
    shown = b", ".join(tokens).decode("ascii", "replace")[:100]
    return f"protocol upgrades other than WebSocket are not supported ({shown})"


def upgrade_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` (hop-by-hop ones already dropped) with a WebSocket upgrade's own put back."""
    return [*headers, (b"connection", b"upgrade"), (b"upgrade", b"websocket")]


async def tunnel_is_tls(writer: asyncio.StreamWriter, pending: bytes) -> bool:
    """Whether a tunnel the client just opened starts with TLS, without consuming a byte.

    ``pending``: what the client sent after its ``CONNECT`` that the parser already holds.
    Otherwise the first byte is peeked on the socket with the transport's reading paused, because
    `asyncio.StreamWriter.start_tls` can only handshake on bytes the stream has not read yet.
    """
    if pending:
        return pending[0] == _TLS_HANDSHAKE
    transport = writer.transport
    assert isinstance(transport, asyncio.Transport)  # a socket's: it reads too
    transport.pause_reading()
    try:
        await writer.drain()
        # A duplicate: the loop watches no descriptor that a transport owns.
        with socket.socket(fileno=os.dup(writer.get_extra_info("socket").fileno())) as peeker:
            loop = asyncio.get_running_loop()
            readable: asyncio.Future[None] = loop.create_future()

            def ready() -> None:
                if not readable.done():
                    readable.set_result(None)

            loop.add_reader(peeker, ready)
            try:
                await readable
            finally:
                loop.remove_reader(peeker)
            first = peeker.recv(1, socket.MSG_PEEK)
    finally:
        transport.resume_reading()
    if not first:
        raise asyncio.IncompleteReadError(b"", 1)
    return first[0] == _TLS_HANDSHAKE


async def relay(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    early: tuple[bytes, bytes],
) -> None:
    """Copy a switched connection both ways until either side ends, then end both.

    ``early``: bytes each parser read past the upgrade (the client's, then the upstream's: a
    server may send its first frame in the same packet as its ``101``).
    """
    (client_reader, client_writer), (upstream_reader, upstream_writer) = client, upstream
    upstream_writer.write(early[0])
    client_writer.write(early[1])
    await asyncio.gather(upstream_writer.drain(), client_writer.drain())
    pumps = [
        asyncio.ensure_future(pipe_streams(client_reader, upstream_writer)),
        asyncio.ensure_future(pipe_streams(upstream_reader, client_writer)),
    ]
    try:
        # A TLS side cannot be half-closed: when one way ends, the conversation has ended.
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for writer in (client_writer, upstream_writer):
            with contextlib.suppress(OSError):
                writer.close()


__all__ = [
    "Upstream",
    "next_event",
    "refused_upgrade",
    "relay",
    "tunnel_is_tls",
    "upgrade_headers",
    "upgrade_tokens",
]
