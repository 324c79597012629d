"""A local emulator of the Runloop API, for testing agents (and this package) offline.

It speaks the HTTP API that ``runloop_api_client`` really uses (devboxes, ``execute_async`` with
``wait_for_status`` long-polls, SSE output streams, ``attach_stdin`` with ``send_std_in``, file
upload/download, suspend/resume, disk snapshots) on ``127.0.0.1``, and runs every devbox on a real local sandbox, so commands and code
really execute. Point the SDK at it with ``base_url=emulator.url`` (or ``RUNLOOP_BASE_URL``); no
SDK internals are patched.

```python
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator, emulated_runloop_provider

async with emulated_runloop_provider() as provider:        # a RunloopProvider on a fresh emulator
    session = await provider.create()

with RunloopEmulator() as emulator:                          # or drive it yourself
    emulator.inject("/execute_async$", status=503)           # the next execute_async fails
    ...
    emulator.count("/execute_async")                          # requests seen, from the log
```

Switches for failure paths: [`RunloopEmulator.inject`][langchain_sandbox.testing.runloop_emulator.RunloopEmulator.inject] (any status with headers that stop SDK
retries, dropped connections, delays), [`RunloopEmulator.expire`][langchain_sandbox.testing.runloop_emulator.RunloopEmulator.expire] (a devbox shut down or
forgotten), `RunloopEmulator.max_hold` (long-polls answer 408 sooner),
`RunloopEmulator.inline_output_bytes` (less output inline, the rest over SSE) and
``boot_delay`` (devboxes go through ``provisioning``).

Tunnels (``enable_tunnel``, ``remove_tunnel``, the devbox's ``tunnel``): a request whose ``Host``
is ``PORT-TUNNELKEY.tunnel.<domain>`` is forwarded to that port in the devbox (see
``_runloop_tunnels``). A test cannot resolve that name: `RunloopEmulator.open(url)` sends a
request for a tunnel URL to the emulator with its ``Host``.

Why one module over 500 lines: it is the route table of one HTTP API, each route a short
handler; the devboxes themselves live in ``_runloop_devboxes.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langchain_sandbox._event_loop import LoopThread
from langchain_sandbox.providers.base import Provider
from langchain_sandbox.testing import _runloop_tunnels
from langchain_sandbox.testing._edge import EdgeClient, forward, port_host
from langchain_sandbox.testing._runloop_bodies import json_body as _json
from langchain_sandbox.testing._runloop_bodies import multipart_fields as _multipart
from langchain_sandbox.testing._runloop_devboxes import Account, ApiError, Devbox, Execution

_DEFAULT_HOLD = 25.0
_SSE_CHUNK = 64 * 1024


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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, emulator: RunloopEmulator) -> None:
        self.emulator = emulator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

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


class _Reply:
    """What a route answers: JSON, raw bytes, or a server-sent event stream."""

    def __init__(
        self,
        body: Any = None,
        *,
        status: int = 200,
        raw: bytes | None = None,
        content_type: str = "application/json",
        events: Iterable[str] | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.raw = raw
        self.content_type = content_type
        self.events = events


Route = Callable[..., _Reply]


class RunloopEmulator(EdgeClient):
    """The emulated Runloop API on ``127.0.0.1:<free port>``; see the module docstring.

    Args:
        machines: The provider whose sessions play the devboxes (default: the local provider).
        api_key: If set, requests with another bearer token get 401.
        network: Whether code in emulated devboxes may reach the network.
        boot_delay: Seconds a new devbox stays ``provisioning``.
    """

    def __init__(
        self,
        *,
        machines: Provider | None = None,
        api_key: str | None = None,
        network: bool = False,
        boot_delay: float = 0.0,
    ) -> None:
        self._machines = machines
        self._network = network
        self._boot_delay = boot_delay
        self.api_key = api_key
        self.max_hold = _DEFAULT_HOLD
        self.inline_output_bytes: int | None = None
        self._log: list[RecordedRequest] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._loop: LoopThread | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._account: Account | None = None
        self._routes = self._build_routes()

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> RunloopEmulator:
        if self._server is not None:
            return self
        self._loop = LoopThread(name="runloop-emulator")
        machines = self._machines
        if machines is None:
            from langchain_sandbox.providers.local import LocalProvider

            self._tmp = tempfile.TemporaryDirectory(prefix="runloop-emulator-")
            machines = LocalProvider(base_dir=self._tmp.name)
        self._account = Account(
            self._loop, machines, network=self._network, boot_delay=self._boot_delay
        )
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="runloop-emulator-http", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, shut every devbox down and join the emulator's threads. Idempotent."""
        if self._server is None:
            return
        server, self._server = self._server, None
        assert self._account is not None
        assert self._loop is not None
        self._account.close()
        server.shutdown()
        server.drop_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        if self._machines is None:
            with contextlib.suppress(Exception):
                machines = self._account._machines
                self._loop.run_sync(machines.aclose())
        self._loop.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> RunloopEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> RunloopEmulator:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.close)

    @property
    def url(self) -> str:
        """Base URL for the SDK (``base_url=`` or ``RUNLOOP_BASE_URL``)."""
        if self._server is None:
            raise RuntimeError("The emulator is not running; call start() or use it in a with.")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def account(self) -> Account:
        if self._account is None:
            raise RuntimeError("The emulator is not running.")
        return self._account

    def provider(self, **options: Any) -> Any:
        """A [`RunloopProvider`][langchain_sandbox.RunloopProvider] pointed here."""
        from langchain_sandbox.providers.runloop import RunloopProvider

        options.setdefault("api_key", self.api_key or "emulator-key")
        return RunloopProvider(base_url=self.url, **options)

    # ---- switches and the log ---------------------------------------------------------------

    def inject(self, path: str, **options: Any) -> Fault:
        """Add a [`Fault`][langchain_sandbox.testing.runloop_emulator.Fault] (see its fields); returns it so a test can read ``hits``."""
        fault = Fault(path=path, **options)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def expire(self, devbox_id: str, *, forget: bool = False) -> None:
        """The devbox goes away as if its TTL ran out; with ``forget`` Runloop no longer knows it
        (404) instead of reporting it ``shutdown``."""
        devbox = self.account.get(devbox_id)
        if forget:
            self.account.forget(devbox)
        else:
            self.account.shutdown(devbox, reason="ttl_expired")

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def count(self, path: str | None = None, *, method: str | None = None) -> int:
        """Requests logged whose path matches the regex ``path`` (searched) and ``method``."""
        return sum(
            1
            for request in self.requests
            if (method is None or request.method == method)
            and (path is None or re.search(path, request.path))
        )

    # ---- HTTP -------------------------------------------------------------------------------

    def _handle(self, handler: _Handler, method: str) -> None:
        url = urlsplit(handler.path)
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items() if k.lower() != "authorization"}
        host = handler.headers.get("Host", "")
        tunneled = port_host(host) if ".tunnel." in host else None
        if tunneled is not None:
            self._tunnel(handler, tunneled, method, url, headers, body)
            return
        fault = self._take_fault(method, url.path)
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.drop:
            self._record(method, url.path, url.query, 0, headers, body)
            handler.close_connection = True
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault is not None:
            reply = _Reply({"message": fault.message}, status=fault.status)
            extra = fault.headers
        else:
            reply = self._answer(handler, method, url.path, url.query, body)
            extra = {}
        self._record(method, url.path, url.query, reply.status, headers, body)
        self._send(handler, reply, extra)

    def _tunnel(
        self,
        handler: _Handler,
        target: tuple[int, str],
        method: str,
        url: Any,
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        """A request for ``https://PORT-KEY.tunnel.<domain>``, forwarded into the devbox."""
        try:
            upstream = _runloop_tunnels.connect(self.account, target[1], target[0], handler.headers)
        except ApiError as error:
            self._record(method, url.path, url.query, error.status, headers, body)
            self._send(handler, _Reply({"message": error.message}, status=error.status), {})
            return
        forward(
            handler,
            upstream,
            body,
            lambda status: self._record(method, url.path, url.query, status, headers, body),
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

    def _answer(self, handler: _Handler, method: str, path: str, query: str, body: bytes) -> _Reply:
        token = handler.headers.get("authorization", "")
        if not token.startswith("Bearer ") or not token[7:]:
            return _Reply({"message": "Missing bearer token"}, status=401)
        if self.api_key is not None and token[7:] != self.api_key:
            return _Reply({"message": "Invalid API key"}, status=401)
        for route_method, pattern, route in self._routes:
            if route_method != method:
                continue
            match = pattern.fullmatch(path)
            if match is None:
                continue
            try:
                return route(
                    *match.groups(),
                    body=body,
                    query=parse_qs(query),
                    content_type=handler.headers.get("content-type", ""),
                )
            except ApiError as error:
                return _Reply({"message": error.message}, status=error.status)
            except (ValueError, KeyError, TypeError) as error:
                return _Reply({"message": f"Bad request: {error}"}, status=400)
            except Exception as error:
                # A failure of the emulator itself: a 500 that names it, as Runloop answers its
                # own failures, and its traceback for the test's output (a connection closed
                # without an answer would say nothing of it).
                traceback.print_exception(error)
                return _Reply({"message": f"emulator error: {error!r}"}, status=500)
        return _Reply({"message": f"No route for {method} {path}"}, status=404)

    def _send(self, handler: _Handler, reply: _Reply, extra: dict[str, str]) -> None:
        try:
            handler.send_response(reply.status)
            for key, value in extra.items():
                handler.send_header(key, value)
            if reply.events is not None:
                handler.send_header("Content-Type", "text/event-stream")
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

    # ---- routes -----------------------------------------------------------------------------

    def _build_routes(self) -> list[tuple[str, re.Pattern[str], Route]]:
        dbx = r"/v1/devboxes/([^/]+)"
        exn = dbx + r"/executions/([^/]+)"
        table: list[tuple[str, str, Route]] = [
            ("POST", r"/v1/devboxes/create_and_await_running", self._create_and_await),
            ("POST", r"/v1/devboxes", self._create),
            ("GET", r"/v1/devboxes", self._list),
            ("GET", r"/v1/devboxes/disk_snapshots/([^/]+)/status", self._snapshot_status),
            ("GET", dbx, self._retrieve),
            ("POST", dbx + "/wait_for_status", self._wait_devbox),
            ("POST", dbx + "/execute_async", self._execute_async),
            ("POST", exn + "/wait_for_status", self._wait_execution),
            ("GET", exn, self._retrieve_execution),
            ("POST", exn + "/kill", self._kill),
            ("POST", exn + "/send_std_in", self._send_stdin),
            ("GET", exn + "/stream_(stdout|stderr)_updates", self._stream),
            ("POST", dbx + "/write_file_contents", self._write_contents),
            ("POST", dbx + "/read_file_contents", self._read_contents),
            ("POST", dbx + "/upload_file", self._upload),
            ("POST", dbx + "/download_file", self._download),
            ("POST", dbx + "/snapshot_disk_async", self._snapshot_async),
            ("POST", dbx + "/snapshot_disk", self._snapshot_blocking),
            ("POST", dbx + "/suspend", self._suspend),
            ("POST", dbx + "/resume", self._resume),
            ("POST", dbx + "/shutdown", self._shutdown),
            ("POST", dbx + "/keep_alive", self._keep_alive),
            ("POST", dbx + "/enable_tunnel", self._enable_tunnel),
            ("POST", dbx + "/remove_tunnel", self._remove_tunnel),
        ]
        return [(method, re.compile(pattern), route) for method, pattern, route in table]

    def _hold(self, body: dict[str, Any], default: float) -> float:
        requested = body.get("timeout_seconds")
        return min(float(requested) if requested else default, self.max_hold)

    def _create(self, *, body: bytes, **_: Any) -> _Reply:
        return _Reply(self.account.create(_json(body)).view())

    def _create_and_await(self, *, body: bytes, **_: Any) -> _Reply:
        devbox = self.account.create(_json(body))
        # Runloop holds the request a while for the devbox to boot, then lets the SDK poll.
        self.account.wait_for(lambda: devbox.status != "provisioning", min(self.max_hold, 1.0))
        return _Reply(devbox.view())

    def _list(self, *, query: dict[str, list[str]], **_: Any) -> _Reply:
        limit = int(query.get("limit", ["20"])[0])
        after = query.get("starting_after", [None])[0]
        wanted = query.get("status", [None])[0]
        devboxes = [d for d in self.account.listing() if wanted is None or d.status == wanted]
        if after is not None:
            ids = [d.id for d in devboxes]
            devboxes = devboxes[ids.index(after) + 1 :] if after in ids else []
        page = devboxes[:limit]
        return _Reply(
            {
                "devboxes": [d.view() for d in page],
                "has_more": len(devboxes) > limit,
                "total_count": len(devboxes),
            }
        )

    def _retrieve(self, devbox_id: str, **_: Any) -> _Reply:
        return _Reply(self.account.get(devbox_id).view())

    def _wait_devbox(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        request = _json(body)
        devbox = self.account.get(devbox_id)
        statuses = set(request.get("statuses") or [])
        if self.account.wait_for(lambda: devbox.status in statuses, self._hold(request, 30.0)):
            return _Reply(devbox.view())
        return _Reply({"message": "Timed out waiting for status"}, status=408)

    def _execute_async(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        request = _json(body)
        execution = self.account.execute(
            devbox_id, str(request["command"]), attach_stdin=bool(request.get("attach_stdin"))
        )
        return _Reply(execution.view(max_bytes=self.inline_output_bytes))

    def _send_stdin(self, devbox_id: str, execution_id: str, *, body: bytes, **_: Any) -> _Reply:
        request, execution = _json(body), self._execution(devbox_id, execution_id)
        if execution.stdin is None or execution.status == "completed":
            raise ApiError(400, f"Execution {execution_id} does not take stdin")
        if request.get("signal") == "EOF":
            execution.stdin.close()
        elif not request.get("text") or not execution.stdin.write(request["text"], execution.done):
            raise ApiError(400, "send nonempty text, or the signal EOF, while the command runs")
        return _Reply({"devbox_id": devbox_id, "execution_id": execution_id, "success": True})

    def _execution(self, devbox_id: str, execution_id: str) -> Execution:
        return self.account.execution(devbox_id, execution_id)

    def _wait_execution(
        self,
        devbox_id: str,
        execution_id: str,
        *,
        body: bytes,
        query: dict[str, list[str]],
        **_: Any,
    ) -> _Reply:
        request = _json(body)
        execution = self._execution(devbox_id, execution_id)
        statuses = set(request.get("statuses") or [])
        last_n = int(query.get("last_n", ["100"])[0])
        if self.account.wait_for(lambda: execution.status in statuses, self._hold(request, 25.0)):
            return _Reply(execution.view(last_n, self.inline_output_bytes))
        return _Reply({"message": "Timed out waiting for status"}, status=408)

    def _retrieve_execution(self, devbox_id: str, execution_id: str, **_: Any) -> _Reply:
        return _Reply(self._execution(devbox_id, execution_id).view())

    def _kill(self, devbox_id: str, execution_id: str, **_: Any) -> _Reply:
        execution = self._execution(devbox_id, execution_id)
        self.account.kill(execution)
        return _Reply(execution.view(max_bytes=self.inline_output_bytes))

    def _stream(
        self,
        devbox_id: str,
        execution_id: str,
        stream: str,
        *,
        query: dict[str, list[str]],
        **_: Any,
    ) -> _Reply:
        execution = self._execution(devbox_id, execution_id)
        return _Reply(events=self._updates(execution, stream, int(query.get("offset", ["0"])[0])))

    def _updates(self, execution: Execution, stream: str, offset: int) -> Iterator[str]:
        """SSE frames of one output stream, live until the execution ends (or the hold ends: a
        408 error frame then tells the SDK to reconnect from the last offset)."""

        def text() -> str:
            return execution.stdout if stream == "stdout" else execution.stderr

        def more(seen: int) -> bool:
            return execution.done.is_set() or len(text()) > seen

        # Offsets count bytes and mark where each chunk ends, so a reconnect resumes after it.
        sent = len(text().encode()[:offset].decode("utf-8", errors="ignore"))
        deadline = time.monotonic() + self.max_hold
        while True:
            self.account.wait_for(
                functools.partial(more, sent),
                max(0.0, deadline - time.monotonic()),
            )
            current = text()
            for start in range(sent, len(current), _SSE_CHUNK):
                chunk = current[start : start + _SSE_CHUNK]
                end = len(current[: start + len(chunk)].encode())
                yield f"data: {json.dumps({'output': chunk, 'offset': end})}\n\n"
            sent = len(current)
            if execution.done.is_set() and sent >= len(text()):
                return
            if time.monotonic() >= deadline:
                yield 'event: error\ndata: {"code": 408, "message": "still running"}\n\n'
                return

    def _write_contents(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        request = _json(body)
        self.account.write_file(devbox_id, request["file_path"], str(request["contents"]).encode())
        return _Reply({"devbox_id": devbox_id, "exit_status": 0, "stdout": "", "stderr": ""})

    def _read_contents(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        data = self.account.read_file(devbox_id, _json(body)["file_path"])
        return _Reply(raw=data, content_type="text/plain; charset=utf-8")

    def _upload(self, devbox_id: str, *, body: bytes, content_type: str, **_: Any) -> _Reply:
        fields = _multipart(body, content_type)
        if "path" not in fields or "file" not in fields:
            raise ApiError(400, "upload_file needs the form fields 'path' and 'file'")
        self.account.write_file(devbox_id, fields["path"].decode(), fields["file"])
        return _Reply({})

    def _download(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        data = self.account.read_file(devbox_id, _json(body)["path"])
        return _Reply(raw=data, content_type="application/octet-stream")

    def _snapshot_async(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        request = _json(body)
        snapshot = self.account.snapshot(
            devbox_id, request.get("name"), dict(request.get("metadata") or {})
        )
        return _Reply(snapshot.view())

    def _snapshot_blocking(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        request = _json(body)
        snapshot = self.account.snapshot(
            devbox_id, request.get("name"), dict(request.get("metadata") or {})
        )
        self.account.wait_for(lambda: snapshot.status != "in_progress", 600)
        return _Reply(snapshot.view())

    def _snapshot_status(self, snapshot_id: str, **_: Any) -> _Reply:
        snapshot = self.account.snapshots.get(snapshot_id)
        if snapshot is None:
            raise ApiError(404, f"Snapshot {snapshot_id} not found")
        return _Reply(snapshot.status_view())

    def _suspend(self, devbox_id: str, **_: Any) -> _Reply:
        devbox = self.account.get(devbox_id)
        if devbox.status not in ("suspending", "suspended"):
            self.account.suspend(devbox)
        return _Reply(devbox.view())

    def _resume(self, devbox_id: str, **_: Any) -> _Reply:
        devbox = self.account.get(devbox_id)
        if devbox.status not in ("resuming", "running"):
            self.account.resume(devbox)
        return _Reply(devbox.view())

    def _shutdown(self, devbox_id: str, **_: Any) -> _Reply:
        devbox: Devbox = self.account.get(devbox_id)
        self.account.shutdown(devbox)
        return _Reply(devbox.view())

    def _keep_alive(self, devbox_id: str, **_: Any) -> _Reply:
        self.account.running(devbox_id)
        return _Reply({})

    def _enable_tunnel(self, devbox_id: str, *, body: bytes, **_: Any) -> _Reply:
        return _Reply(_runloop_tunnels.enable(self.account, devbox_id, _json(body)))

    def _remove_tunnel(self, devbox_id: str, **_: Any) -> _Reply:
        return _Reply(_runloop_tunnels.remove(self.account, devbox_id))


@contextlib.asynccontextmanager
async def emulated_runloop_provider(**options: Any) -> AsyncIterator[Any]:
    """A ready [`RunloopProvider`][langchain_sandbox.RunloopProvider] on a fresh emulator
    (closed, with every devbox, on exit). ``options`` go to the provider."""
    async with RunloopEmulator() as emulator:
        provider = emulator.provider(**options)
        try:
            yield provider
        finally:
            await provider.aclose()


__all__ = ["Fault", "RecordedRequest", "RunloopEmulator", "emulated_runloop_provider"]
