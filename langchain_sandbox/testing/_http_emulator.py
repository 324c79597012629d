"""What the HTTP emulators of remote providers share: a threaded server on ``127.0.0.1``, the
request log tests read, scripted faults, and how an answer (JSON, bytes or a stream) is sent.

An emulator subclasses `ServedEmulator` (the server thread, its URL, ``with``) and a log:
`RequestLog` (requests by path, `Fault` by path regex; Runloop and Kubernetes), or `LogBase`
with records and faults of its own (E2B routes by sandbox and service). Every emulator names
the same things the same: ``requests``, ``clear_requests()``, ``count(...)``, ``inject(...)``
(a fault whose ``hits`` a test reads), ``clear_faults()``, ``close()``, ``env()`` and
``provider()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, Self, TypeVar
from urllib.parse import parse_qs


class _Emulator(Protocol):
    def _handle(self, handler: Handler, method: str) -> None: ...


@dataclass(frozen=True)
class RecordedRequest:
    """One request the emulator answered (the ``authorization`` header is never kept)."""

    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Fault:
    """A scripted failure: the next ``times`` requests matching ``path`` (a regex searched in the
    path) and ``method`` get ``status`` (or, with ``drop``, a closed connection) instead of an
    answer. ``headers`` default to ``x-should-retry: false`` so the SDK does not retry them."""

    path: str
    method: str | None = None
    status: int = 503
    times: int = 1
    drop: bool = False
    delay: float = 0.0
    message: str = "injected fault"
    headers: dict[str, str] = field(default_factory=lambda: {"x-should-retry": "false"})
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (
            self.hits < self.times
            and (self.method is None or self.method == method)
            and re.search(self.path, path) is not None
        )


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        emulator: _Emulator,
        handler: type[BaseHTTPRequestHandler] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.emulator = emulator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__((host, 0), handler or Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body go out in two writes: with Nagle's algorithm the body waits for
    # the client's delayed ACK of the headers, 40 ms on Linux's loopback, on every answer.
    disable_nagle_algorithm = True
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the emulator keeps its own request log."""

    def do_GET(self) -> None:
        self.server.emulator._handle(self, "GET")

    def do_POST(self) -> None:
        self.server.emulator._handle(self, "POST")

    # What else a server behind a tunnel may be sent (the API itself has no such routes).
    def do_PUT(self) -> None:
        self.server.emulator._handle(self, "PUT")

    def do_DELETE(self) -> None:
        self.server.emulator._handle(self, "DELETE")

    def do_PATCH(self) -> None:
        self.server.emulator._handle(self, "PATCH")


class Reply:
    """What a route answers: JSON, raw bytes, or a stream (server-sent events, or the lines of a
    Kubernetes watch) sent as it comes, the connection closed at its end."""

    def __init__(
        self,
        body: Any = None,
        *,
        status: int = 200,
        raw: bytes | None = None,
        content_type: str = "application/json",
        events: Iterable[str] | None = None,
        stream_type: str = "text/event-stream",
    ) -> None:
        self.status = status
        self.body = body
        self.raw = raw
        self.content_type = content_type
        self.events = events
        self.stream_type = stream_type


RecordT = TypeVar("RecordT")
FaultT = TypeVar("FaultT")


class LogBase(Generic[RecordT, FaultT]):
    """The log of answered requests and the scripted faults, whatever their shape."""

    def _init_log(self) -> None:
        self._log: list[RecordT] = []
        self._faults: list[FaultT] = []
        self._lock = threading.Lock()

    def _add_fault(self, fault: FaultT) -> FaultT:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def requests(self) -> list[RecordT]:
        """Every request answered so far, oldest first."""
        with self._lock:
            return list(self._log)

    def clear_requests(self) -> None:
        with self._lock:
            self._log.clear()


class RequestLog(LogBase[RecordedRequest, Fault]):
    """The log and faults of an emulator whose requests are told apart by method and path."""

    def inject(self, path: str, **options: Any) -> Fault:
        """Add a [`Fault`][langchain_sandbox.testing._http_emulator.Fault] (see its fields); returns it so a test can read ``hits``."""
        return self._add_fault(Fault(path=path, **options))

    def count(self, path: str | None = None, *, method: str | None = None) -> int:
        """Requests logged whose path matches the regex ``path`` (searched) and ``method``."""
        return sum(
            1
            for request in self.requests
            if (method is None or request.method == method)
            and (path is None or re.search(path, request.path))
        )

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    return fault
        return None

    def _record(
        self, method: str, path: str, query: str, status: int, headers: dict[str, str], body: bytes
    ) -> None:
        entry = RecordedRequest(method, path, parse_qs(query), status, headers, body)
        with self._lock:
            self._log.append(entry)

    def _send(self, handler: Handler, reply: Reply, extra: dict[str, str]) -> None:
        try:
            handler.send_response(reply.status)
            for key, value in extra.items():
                handler.send_header(key, value)
            if reply.events is not None:
                handler.send_header("Content-Type", reply.stream_type)
                handler.send_header("Cache-Control", "no-cache")
                handler.send_header("Connection", "close")
                handler.end_headers()
                for event in reply.events:
                    handler.wfile.write(event.encode())
                    handler.wfile.flush()
                handler.close_connection = True
                return
            data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            handler.send_header("Content-Type", reply.content_type)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            handler.close_connection = True


class ServedEmulator:
    """An emulator served on ``127.0.0.1:<free port>``: its server thread, its URL, and the
    context managers around ``start()`` and ``close()`` (which subclasses define)."""

    _server: Server | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _handle(self, handler: Handler, method: str) -> None:
        """Answer one request (the server's handler calls this)."""
        raise NotImplementedError

    def _serve(self, name: str, server: Server | None = None) -> None:
        self._server = server or Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            # shutdown() waits up to one poll: short, so closing an emulator is quick.
            kwargs={"poll_interval": 0.1},
            name=f"{name}-http",
            daemon=True,
        )
        self._thread.start()

    def _stop_serving(self, draining: Any = None) -> None:
        """Stop answering: no new request, then ``draining()`` (what must end before the open
        connections are dropped), open connections dropped, the thread joined."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        if draining is not None:
            draining()
        server.drop_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    @property
    def url(self) -> str:
        """The base URL the SDK is pointed at."""
        if self._server is None:
            raise RuntimeError("The emulator is not running; call start() or use it in a with.")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.close)


__all__ = [
    "Fault",
    "Handler",
    "LogBase",
    "RecordedRequest",
    "Reply",
    "RequestLog",
    "ServedEmulator",
    "Server",
]
