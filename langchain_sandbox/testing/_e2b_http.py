"""The HTTP side of the E2B emulator: its server (the shared `Server` of ``_http_emulator``, its
connection threads joined at close), the request handler, the request log's records and faults.

The handler frames requests and responses (chunked streams, keep-alive, no Nagle delays), logs
every request, applies injected faults, and hands the request to the emulator (`Backend`),
which knows E2B's routes. It knows nothing about sandboxes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import re
import select
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from langchain_sandbox.testing._e2b_wire import parse_envelope, read_body
from langchain_sandbox.testing._edge import port_host
from langchain_sandbox.testing._http_emulator import Server

_SERVICE_PORTS = (49983, 49999)  # envd, Jupyter: what the SDK itself talks to
_REDACTED_HEADERS = ("x-api-key", "x-access-token", "e2b-traffic-access-token", "authorization")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the emulator received. Credential headers are redacted.

    Attributes:
        route: What it was, e.g. ``"POST /v2/sandboxes"``, ``"envd Start"``, ``"jupyter execute"``.
        status: The status answered (0 when the connection was dropped on purpose).
        body: The JSON body (the message of a Connect envelope), when there was one.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    sandbox_id: str | None
    route: str
    status: int = 0
    at: float = 0.0
    body: Any = None
    seq: int = 0


@dataclass
class Fault:
    """A switch that makes matching requests fail; see `E2BEmulator.inject`. ``hits``: how many
    requests it failed so far."""

    route: re.Pattern[str]
    status: int | None = None
    drop: bool = False
    lose_response: bool = False
    delay: float = 0.0
    times: int | None = 1
    should_retry: bool | None = False
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None
    after: int = 0
    body: re.Pattern[str] | None = None
    hits: int = 0

    def matches(self, route: str, body: bytes) -> bool:
        if not self.route.search(route):
            return False
        return self.body is None or self.body.search(body.decode("utf-8", "replace")) is not None


class HttpError(Exception):
    """An HTTP error answer: status, JSON body and extra headers."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(body.get("message", ""))
        self.status = status
        self.body = body
        self.headers = headers or {}


def api_error(status: int, message: str) -> HttpError:
    return HttpError(status, {"code": status, "message": message})


def connect_error(status: int, code: str, message: str) -> HttpError:
    return HttpError(status, {"code": code, "message": message})


class Backend(Protocol):
    """What the handler needs from the emulator."""

    def _handle(self, handler: Any, method: str) -> None: ...

    def _record(self, request: RecordedRequest) -> int: ...

    def _update(self, seq: int, **changes: Any) -> None: ...

    def _next_seq(self) -> int: ...

    def _take_fault(self, route: str, body: bytes) -> Fault | None: ...

    def handle_api(self, handler: Handler, method: str, path: str, body: bytes) -> None: ...

    def handle_sandbox(self, handler: Handler, method: str, path: str, body: bytes) -> None: ...

    def handle_port(
        self,
        handler: Handler,
        sandbox_id: str,
        port: int,
        body: bytes,
        on_status: Callable[[int], None],
    ) -> None: ...


def _json_of(body: bytes, content_type: str) -> Any:
    try:
        if content_type.startswith("application/connect+json"):
            return parse_envelope(body)
        if content_type.startswith("application/json") and body:
            return json.loads(body)
    except ValueError:
        pass
    return None


class EmulatorServer(Server):
    """The shared server, with a named thread per connection that closing joins (a connection
    may be streaming a cell's output when the emulator closes)."""

    emulator: Backend

    def __init__(self, emulator: Backend, host: str) -> None:
        self._connection_threads: list[threading.Thread] = []
        super().__init__(emulator, Handler, host)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="e2b-emulator-conn",
            daemon=True,
        )
        self._connection_threads = [t for t in self._connection_threads if t.is_alive()] + [thread]
        thread.start()

    def drop_connections(self) -> None:
        super().drop_connections()
        for thread in self._connection_threads:
            thread.join(timeout=10)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers, body and stream chunks go out in separate writes; with Nagle's algorithm each one
    # would wait for the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True
    server: EmulatorServer

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to [`requests`][langchain_sandbox.testing.e2b_emulator.E2BEmulator.requests], not to stderr."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def _port(self) -> tuple[int, str] | None:
        """The sandbox port a request is for, as E2B's edge routes: the host name
        ``PORT-SANDBOXID.domain``, or the edge headers with a port other than envd's and
        Jupyter's."""
        named = port_host(self.headers.get("Host", ""))
        if named is not None:
            return named
        port = self.headers.get("E2b-Sandbox-Port", "")
        sandbox_id = self.headers.get("E2b-Sandbox-Id")
        if sandbox_id and port.isdigit() and int(port) not in _SERVICE_PORTS:
            return int(port), sandbox_id
        return None

    def _route(self, path: str) -> tuple[str, str | None]:
        port = self._port()
        if port is not None:
            return f"port {port[0]}", port[1]
        sandbox_id = self.headers.get("E2b-Sandbox-Id")
        if sandbox_id is None:
            return f"{self.command} {path}", None
        if path.startswith(("/process.", "/filesystem.")):
            return f"envd {path.rsplit('/', 1)[1]}", sandbox_id
        if path in ("/execute", "/contexts") or path.startswith("/contexts/"):
            return f"jupyter {path.strip('/').split('/')[0]}", sandbox_id
        return f"envd {self.command} {path}", sandbox_id

    def _dispatch(self) -> None:
        emulator = self.server.emulator
        path = urlsplit(self.path).path
        route, sandbox_id = self._route(path)
        headers = {
            k.lower(): ("<redacted>" if k.lower() in _REDACTED_HEADERS else v)
            for k, v in self.headers.items()
        }
        index = emulator._record(
            RecordedRequest(
                method=self.command,
                path=path,
                query=parse_qs(urlsplit(self.path).query),
                headers=headers,
                sandbox_id=sandbox_id,
                route=route,
                at=time.time(),
                seq=emulator._next_seq(),
            )
        )
        self._index = index
        self._status = 0
        self._swallow = False
        try:
            body = read_body(self.rfile, self.headers)
            emulator._update(index, body=_json_of(body, self.headers.get("Content-Type", "")))
            fault = emulator._take_fault(route, body)
            if fault is not None:
                if fault.hold is not None:
                    fault.hold.wait()
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.drop:
                    self.abort()
                    return
                if fault.status is not None:
                    extra = dict(fault.headers)
                    if fault.should_retry is not None:
                        extra["Should-Retry"] = "true" if fault.should_retry else "false"
                    raise HttpError(
                        fault.status, {"code": fault.status, "message": "injected fault"}, extra
                    )
            if fault is not None and fault.lose_response:
                self._swallow = True
            port = self._port()
            if port is not None:
                emulator.handle_port(self, port[1], port[0], body, self._answered(index))
            elif sandbox_id is None:
                emulator.handle_api(self, self.command, path, body)
            else:
                emulator.handle_sandbox(self, self.command, path, body)
        except HttpError as error:
            self.send_json(error.status, error.body, error.headers)
        except (ValueError, KeyError) as error:
            self.send_json(400, {"code": 400, "message": f"bad request: {error}"})
        except Exception as error:
            self._fail(error)
        finally:
            if self._swallow:
                self.abort()
            emulator._update(index, status=self._status)

    def _answered(self, index: int) -> Callable[[int], None]:
        """Log a forwarded answer's status as soon as it is known (before the client has it)."""

        def answered(status: int) -> None:
            self._status = status
            self.server.emulator._update(index, status=status)

        return answered

    def _fail(self, error: Exception) -> None:
        """An error neither the request nor the API's rules explain. The client gone (or the
        answer begun) closes the connection; a failure of the emulator itself answers 500, as
        the real API does, and prints its traceback (pytest shows it with the failing test):
        a connection closed without an answer would say nothing of it."""
        gone = isinstance(error, ConnectionError) or (
            isinstance(error, OSError) and error.errno in (errno.ENOTCONN, errno.EBADF)
        )
        if gone or self._status:
            self.close_connection = True
            return
        traceback.print_exception(error)
        self.send_json(500, {"code": 500, "message": f"emulator error: {error!r}"})

    # -- responses -------------------------------------------------------------------------

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self._status = status
        # Logged before the client can have the answer: a test that reads the log as soon as
        # its call returned saw status 0 when this thread was slower than the client (a loaded
        # machine, a parallel run).
        self.server.emulator._update(self._index, status=status)
        if self._swallow:
            self.wfile = io.BytesIO()  # handled, but the answer never leaves
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, json.dumps(body).encode(), "application/json", headers)

    def send_bytes(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self._head(
            status,
            {"Content-Type": content_type, "Content-Length": str(len(data)), **(headers or {})},
        )
        self.wfile.write(data)

    def send_empty(self, status: int) -> None:
        self._head(status, {"Content-Length": "0"})

    def start_stream(self, status: int, content_type: str) -> None:
        self._head(status, {"Content-Type": content_type, "Transfer-Encoding": "chunked"})

    def write_chunk(self, data: bytes) -> bool:
        """Send one chunk; ``False`` when the client has gone."""
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            return True
        except OSError:
            self.close_connection = True
            return False

    def write_line(self, message: dict[str, Any]) -> bool:
        return self.write_chunk(json.dumps(message).encode() + b"\n")

    def end_stream(self) -> None:
        self.write_chunk(b"")

    def abort(self) -> None:
        """Close the connection mid-response, as a proxy does when the sandbox behind it dies."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def client_gone(self) -> bool:
        """Whether the client closed its side (it would send nothing else mid-response)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
