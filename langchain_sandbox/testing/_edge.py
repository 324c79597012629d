"""The emulators' edge: a request for a sandbox's port, forwarded there; and how a test sends one.

E2B and Runloop give a port of a sandbox a public host name (``8000-SANDBOXID.e2b.app``,
``8000-TUNNELKEY.tunnel.runloop.ai``) and route on it at their edge. The emulators listen on
one loopback port, so they route on the request's ``Host`` header the same way: a request whose
host names a port is forwarded to that port in that sandbox, byte for byte (the answer streams
back as the server sends it, so server-sent events and long downloads work), on a connection of
its own that is closed after the answer.

A test cannot resolve those host names; `open_url` sends a request to the emulator with the
``Host`` the URL names, which is all the real edge looks at.
"""

from __future__ import annotations

import abc
import http.client
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# What a proxy must not pass on (RFC 9110 7.6.1); the body goes with Content-Length.
_HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade")
)
_PORT_HOST = re.compile(r"(\d{1,5})-([A-Za-z0-9_]+)\.")


def port_host(host: str) -> tuple[int, str] | None:
    """``(port, key)`` of a host name ``PORT-KEY.domain`` (the key: a sandbox id or a tunnel
    key), or ``None`` when the host names no port."""
    match = _PORT_HOST.match(host)
    if match is None or not 0 < int(match.group(1)) < 65536:
        return None
    return int(match.group(1)), match.group(2)


def forward(
    handler: Any, upstream: socket.socket, body: bytes, on_status: Callable[[int], None]
) -> None:
    """Send ``handler``'s request (its body already read: ``body``) on ``upstream`` and copy the
    answer back to the client as it comes. ``on_status`` hears the answer's status (502 if there
    was none: then the client gets a 502, as when nothing listens) before the client gets any
    of it, so a request log is complete when it has.

    ``handler`` is a ``BaseHTTPRequestHandler``; its connection is closed afterwards.
    """
    handler.close_connection = True
    with upstream:
        head = [f"{handler.command} {handler.path} HTTP/1.1"]
        head += [f"{k}: {v}" for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP]
        head += [f"Content-Length: {len(body)}", "Connection: close"]
        upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        first = True
        while chunk := upstream.recv(65536):
            if first:
                on_status(_status_of(chunk))
                first = False
            handler.wfile.write(chunk)
            handler.wfile.flush()
        if first:  # a relay that took the connection, with nothing listening behind it
            on_status(502)
            message = b'{"message": "Nothing listens on this port"}'
            handler.wfile.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(message), message)
            )


def _status_of(first: bytes) -> int:
    parts = first.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@dataclass(frozen=True)
class EdgeResponse:
    """An answer through an emulator's edge."""

    status: int
    headers: dict[str, str]
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def open_url(
    emulator_url: str,
    url: str,
    *,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> EdgeResponse:
    """Send a request for ``url`` (a sandbox's public port URL) to the emulator at
    ``emulator_url``, with the ``Host`` header that URL names, and read the whole answer."""
    target = urlsplit(url)
    edge = urlsplit(emulator_url)
    conn = http.client.HTTPConnection(edge.hostname or "127.0.0.1", edge.port, timeout=timeout)
    try:
        path = target.path or "/"
        if target.query:
            path += f"?{target.query}"
        conn.request(method, path, body=body, headers={**(headers or {}), "Host": target.netloc})
        answer = conn.getresponse()
        return EdgeResponse(answer.status, dict(answer.getheaders()), answer.read())
    finally:
        conn.close()


class EdgeClient(abc.ABC):
    """What an emulator (with its base ``url``) offers a test to reach a sandbox's port."""

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The emulator's base URL."""

    def open(
        self,
        url: str,
        *,
        method: str = "GET",
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> EdgeResponse:
        """Send a request for a sandbox's public port URL (``https://PORT-KEY.<domain>/...``:
        E2B's ``get_host``, Runloop's ``get_tunnel_url``) through the emulator, routed on its
        host name as the real edge routes it, and read the whole answer."""
        return open_url(self.url, url, method=method, body=body, headers=headers)


__all__ = ["EdgeClient", "EdgeResponse", "forward", "open_url", "port_host"]
