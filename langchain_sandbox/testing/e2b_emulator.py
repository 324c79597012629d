"""A local emulator of E2B: control plane, envd and the code interpreter, on one loopback port.

Point the real ``e2b`` / ``e2b-code-interpreter`` SDKs at it with their own settings
(``E2B_API_URL`` and ``E2B_SANDBOX_URL``, or ``api_url=`` / ``sandbox_url=``) and they run
unchanged, async or sync: sandboxes are created, code runs for real (a persistent Python worker
per sandbox, ``bash -c`` for commands, a private ``/home/user``), files move, sandboxes pause with
their memory, resume, expire and die. Use it to test agents offline::

    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator() as emulator:
        os.environ.update(emulator.env())
        sandbox = await AsyncSandbox.create()      # talks to 127.0.0.1 only

What it serves (routed like the real edge: requests carrying ``E2b-Sandbox-Id`` go to that
sandbox, the rest to the control plane):

* control plane: ``POST /v2/sandboxes`` (honours ``Idempotency-Key``), ``GET /v2/sandboxes``
  (metadata/state filters, ``x-next-token`` paging), ``POST /v2/sandboxes/{id}/connect``,
  ``GET|DELETE /sandboxes/{id}``, ``POST /sandboxes/{id}/timeout``, ``POST /sandboxes/{id}/pause``;
* envd: ``GET|POST /files``, ``GET /health``, Connect ``process.Process/{Start,SendSignal}``,
  ``filesystem.Filesystem/{ListDir,Stat,Remove,MakeDir,Move}``;
* code interpreter: ``POST /execute`` (NDJSON stream), ``GET|POST /contexts``;
* a sandbox's ports: a request whose ``Host`` is ``PORT-SANDBOXID.<domain>`` (what
  ``get_host(port)`` names), or that carries the edge headers with another port than envd's
  and Jupyter's, is forwarded to that port inside the sandbox (502 when nothing listens there).
  A test cannot resolve that host name: `E2BEmulator.open(url)` sends a request for such a URL
  to the emulator with its ``Host``.

Tests read [`E2BEmulator.requests`][langchain_sandbox.testing.e2b_emulator.E2BEmulator.requests] (every request, with its route and status) and use the
fault switches: [`E2BEmulator.inject`][langchain_sandbox.testing.e2b_emulator.E2BEmulator.inject] (a status such as 429/503, a dropped connection, a
delay), [`E2BEmulator.expire`][langchain_sandbox.testing.e2b_emulator.E2BEmulator.expire] (the sandbox is gone, as after its timeout). Only the
workspace ``/home/user`` exists for the file API; other paths are "not found".

The emulator runs one event-loop thread for the machines and one thread per connection; stopping
it kills every sandbox, closes every connection and joins its threads.

Why one module over 500 lines: it is the route table of one HTTP API (control plane, envd and
the code interpreter), each route a short handler.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import gzip
import itertools
import json
import posixpath
import queue
import re
import secrets
import shlex
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, parse_qsl, unquote, urlsplit

from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.local import EgressUpstream, LocalProvider
from langchain_sandbox.testing._e2b_http import (
    EmulatorServer,
    Fault,
    Handler,
    HttpError,
    RecordedRequest,
    api_error,
    connect_error,
)
from langchain_sandbox.testing._e2b_machine import CellOutcome, Machine
from langchain_sandbox.testing._e2b_network import machine_network
from langchain_sandbox.testing._e2b_wire import (
    END_STREAM,
    entry_json,
    envelope,
    parse_envelope,
    parse_multipart,
)
from langchain_sandbox.testing._edge import EdgeClient, forward
from langchain_sandbox.workspace import WORKSPACE_ROOT

T = TypeVar("T")

ENVD_VERSION = "0.6.7"
DEFAULT_SANDBOX_TIMEOUT = 300
_POLL = 0.05
_DONE = ("", "")  # queued when a run ends


@dataclass
class _Sandbox:
    sandbox_id: str
    template: str
    metadata: dict[str, str]
    machine: Machine
    access_token: str
    allow_internet_access: bool | None
    auto_pause: bool
    started_at: dt.datetime
    end_at: float
    state: str = "running"
    processes: dict[int, Future[int]] = field(default_factory=dict)
    contexts: dict[str, str] = field(default_factory=lambda: {"default": WORKSPACE_ROOT})


class E2BEmulator(EdgeClient):
    """The emulator; start it with ``with`` (or `start` / `stop`).

    Args:
        api_key: When set, control-plane requests must carry it as ``X-API-KEY`` (else 401).
        host: Interface to bind; loopback only by design.
        egress_upstream: How sandboxes created with ``network`` settings (enforced by the
            local egress proxy, `_e2b_network`) reach upstream servers: test servers' names
            and CA.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        egress_upstream: EgressUpstream | None = None,
    ) -> None:
        self.api_key = api_key
        self._egress_upstream = egress_upstream
        self._host = host
        self._lock = threading.Lock()
        self._sandboxes: dict[str, _Sandbox] = {}
        self._idempotency: dict[str, str] = {}
        self._idempotency_locks: dict[str, threading.Lock] = {}
        self._requests: list[RecordedRequest] = []
        self._faults: list[Fault] = []
        self._pids = itertools.count(1000)
        self._sequence = itertools.count()
        self._clock_offset = 0.0
        self._server: EmulatorServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread: threading.Thread | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._machines: LocalProvider | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> E2BEmulator:
        if self._server is not None:
            return self
        self._tmp = tempfile.TemporaryDirectory(prefix="e2b-emulator-")
        self._machines = LocalProvider(
            base_dir=self._tmp.name, egress_upstream=self._egress_upstream
        )
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="e2b-emulator-loop", daemon=True
        )
        self._loop_thread.start()
        self._server = EmulatorServer((self._host, 0), self)
        self._serve_thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="e2b-emulator-http",
            daemon=True,
        )
        self._serve_thread.start()
        return self

    def stop(self) -> None:
        """Kill every sandbox, close every connection and join the emulator's threads."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with self._lock:
            for fault in self._faults:
                if fault.hold is not None:
                    fault.hold.set()  # no request outlives the emulator
            sandboxes = list(self._sandboxes.values())
            self._sandboxes.clear()
        for sandbox in sandboxes:
            self._discard(sandbox)
        server.close_connections()
        server.server_close()
        if self._serve_thread is not None:
            self._serve_thread.join(timeout=10)
        if self._machines is not None:
            with contextlib.suppress(Exception):
                self._submit(self._machines.aclose()).result(timeout=30)
            self._machines = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=10)
        self._loop.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> E2BEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the emulator is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def env(self) -> dict[str, str]:
        """Environment variables that point the E2B SDK here (and only here)."""
        env = {"E2B_API_URL": self.url, "E2B_SANDBOX_URL": self.url, "E2B_DEBUG": "false"}
        if self.api_key:
            env["E2B_API_KEY"] = self.api_key
        return env

    # -- what tests look at and switch -------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def count(self, route: str, sandbox_id: str | None = None) -> int:
        """Requests whose route matches the regular expression ``route``."""
        pattern = re.compile(route)
        return sum(
            1
            for r in self.requests
            if pattern.search(r.route) and (sandbox_id is None or r.sandbox_id == sandbox_id)
        )

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def inject(
        self,
        route: str,
        *,
        status: int | None = None,
        drop: bool = False,
        lose_response: bool = False,
        delay: float = 0.0,
        times: int | None = 1,
        should_retry: bool | None = False,
        headers: dict[str, str] | None = None,
        hold: threading.Event | None = None,
        after: int = 0,
        body: str | None = None,
    ) -> Fault:
        """Make the next ``times`` requests whose route matches ``route`` (a regular expression
        over `RecordedRequest.route`) fail: answer ``status``, or close the connection
        without answering (``drop``), or handle the request and then close the connection
        instead of answering (``lose_response``: the client cannot know it happened), after waiting ``delay`` seconds (a delay alone just slows
        the request). ``should_retry`` sets the ``Should-Retry`` header the SDK obeys (``None``
        omits it, leaving the SDK's own 429/502/503/504 retries on). ``times=None``: forever.
        ``hold``: the request waits until the event is set (a capture caught in flight, say).
        ``after``: the first ``after`` matching requests pass untouched. ``body``: only requests
        whose body (as text) matches this regular expression too (one cell among others).
        """
        fault = Fault(
            route=re.compile(route),
            status=status,
            drop=drop,
            lose_response=lose_response,
            delay=delay,
            times=times,
            should_retry=should_retry,
            headers=dict(headers or {}),
            hold=hold,
            after=after,
            body=None if body is None else re.compile(body),
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def expire(self, sandbox_id: str) -> None:
        """Make a sandbox gone, as when its timeout passes or E2B kills it."""
        with self._lock:
            sandbox = self._sandboxes.pop(sandbox_id, None)
        if sandbox is not None:
            self._discard(sandbox)

    def sandbox_ids(self, state: str | None = None) -> list[str]:
        self._sweep()
        with self._lock:
            return [s.sandbox_id for s in self._sandboxes.values() if state in (None, s.state)]

    def workspace(self, sandbox_id: str) -> Path:
        """The host directory that is the sandbox's ``/home/user`` (to inspect or seed files)."""
        with self._lock:
            return self._sandboxes[sandbox_id].machine.workspace

    def advance_clock(self, seconds: float) -> None:
        """Move the emulator's clock forward: sandbox timeouts pass without waiting for them."""
        with self._lock:
            self._clock_offset += seconds
        self._sweep()

    def _now(self) -> float:
        return time.time() + self._clock_offset

    def lease_remaining(self, sandbox_id: str) -> float:
        """Seconds left before the sandbox's timeout ends it."""
        with self._lock:
            return self._sandboxes[sandbox_id].end_at - self._now()

    # -- internals ---------------------------------------------------------------------------

    def _submit(self, coro: Awaitable[T]) -> Future[T]:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop)

    def _discard(self, sandbox: _Sandbox) -> None:
        for process in list(sandbox.processes.values()):
            process.cancel()
        with contextlib.suppress(Exception):
            self._submit(sandbox.machine.close()).result(timeout=30)

    def _sweep(self) -> None:
        """Apply sandbox timeouts: auto-pause or kill what ran past its end."""
        now = self._now()
        gone: list[_Sandbox] = []
        with self._lock:
            for sandbox in list(self._sandboxes.values()):
                if sandbox.state == "running" and sandbox.end_at <= now:
                    if sandbox.auto_pause:
                        sandbox.state = "paused"
                    else:
                        gone.append(self._sandboxes.pop(sandbox.sandbox_id))
        for sandbox in gone:
            self._discard(sandbox)

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return request.seq

    def _next_seq(self) -> int:
        return next(self._sequence)

    def _update(self, seq: int, **changes: Any) -> None:
        """Complete a logged request (body, status); a no-op once the log was cleared."""
        with self._lock:
            for index in range(len(self._requests) - 1, -1, -1):
                if self._requests[index].seq == seq:
                    old = self._requests[index]
                    self._requests[index] = RecordedRequest(**{**old.__dict__, **changes})
                    return

    def _take_fault(self, route: str, body: bytes) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(route, body):
                    if fault.after > 0:
                        fault.after -= 1
                        continue
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _sandbox(self, sandbox_id: str) -> _Sandbox:
        self._sweep()
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            raise api_error(404, f"sandbox {sandbox_id} not found")
        return sandbox

    def _reachable(self, sandbox_id: str, token: str | None, path: str) -> _Sandbox:
        """The running sandbox an envd / Jupyter request names; the edge answers 502 otherwise.

        envd and ``/execute`` require the sandbox's access token; the SDK sends none with the
        code-context calls, so those pass without it.
        """
        self._sweep()
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None or sandbox.state != "running":
            raise api_error(502, f"The sandbox {sandbox_id} was not found")
        if token != sandbox.access_token and not path.startswith("/contexts"):
            raise api_error(401, "invalid access token")
        return sandbox

    # -- control plane -----------------------------------------------------------------------

    def _create_body(self, sandbox: _Sandbox) -> dict[str, Any]:
        return {
            "templateID": sandbox.template,
            "sandboxID": sandbox.sandbox_id,
            "clientID": "emulator",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": sandbox.access_token,
            "domain": None,
        }

    def _detail(self, sandbox: _Sandbox) -> dict[str, Any]:
        return {
            "templateID": sandbox.template,
            "sandboxID": sandbox.sandbox_id,
            "clientID": "emulator",
            "startedAt": sandbox.started_at.isoformat().replace("+00:00", "Z"),
            "endAt": dt.datetime.fromtimestamp(sandbox.end_at, dt.UTC)
            .isoformat()
            .replace("+00:00", "Z"),
            "envdVersion": ENVD_VERSION,
            "cpuCount": 2,
            "memoryMB": 1024,
            "diskSizeMB": 4096,
            "state": sandbox.state,
            "metadata": sandbox.metadata,
            **(
                {"allowInternetAccess": sandbox.allow_internet_access}
                if sandbox.allow_internet_access is not None
                else {}
            ),
        }

    def _new_machine(self, env: dict[str, str], *, network: bool | NetworkPolicy) -> Machine:
        if self._machines is None:
            raise api_error(503, "the emulator is stopping")
        return self._submit(Machine.create(self._machines, env, network=network)).result()

    def _create(self, body: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        if not idempotency_key:
            return self._create_body(self._new_sandbox(body, None))
        with self._lock:
            key_lock = self._idempotency_locks.setdefault(idempotency_key, threading.Lock())
        # One key, one sandbox: a retry that arrives while the first attempt is still being
        # created waits for it, as the real API does, instead of racing it to a second sandbox.
        with key_lock:
            with self._lock:
                existing = self._idempotency.get(idempotency_key)
                sandbox = self._sandboxes.get(existing) if existing else None
            if sandbox is None:
                sandbox = self._new_sandbox(body, idempotency_key)
        return self._create_body(sandbox)

    def _new_sandbox(self, body: dict[str, Any], idempotency_key: str | None) -> _Sandbox:
        timeout = int(body.get("timeout") or DEFAULT_SANDBOX_TIMEOUT)
        allow = body.get("allow_internet_access")
        env = {str(k): str(v) for k, v in (body.get("envVars") or {}).items()}
        sandbox = _Sandbox(
            sandbox_id="i" + secrets.token_hex(10),
            template=str(body.get("templateID") or "base"),
            metadata={str(k): str(v) for k, v in (body.get("metadata") or {}).items()},
            machine=self._new_machine(env, network=machine_network(body, self._egress_upstream)),
            access_token=secrets.token_urlsafe(24),
            allow_internet_access=allow,
            auto_pause=bool(body.get("autoPause")),
            started_at=dt.datetime.now(dt.UTC),
            end_at=self._now() + timeout,
        )
        with self._lock:
            self._sandboxes[sandbox.sandbox_id] = sandbox
            if idempotency_key:
                self._idempotency[idempotency_key] = sandbox.sandbox_id
        return sandbox

    def _list(self, query: dict[str, list[str]]) -> tuple[list[dict[str, Any]], str | None]:
        self._sweep()
        wanted_meta = {unquote(k): unquote(v) for k, v in parse_qsl(query.get("metadata", [""])[0])}
        states = set((query.get("state", ["running,paused"])[0]).split(","))
        with self._lock:
            matching = [
                s
                for s in self._sandboxes.values()
                if s.state in states and all(s.metadata.get(k) == v for k, v in wanted_meta.items())
            ]
        matching.sort(key=lambda s: s.started_at)
        start = int(query.get("nextToken", ["0"])[0] or 0)
        limit = int(query.get("limit", ["100"])[0] or 100)
        page = matching[start : start + limit]
        next_token = str(start + limit) if start + limit < len(matching) else None
        return [self._detail(s) for s in page], next_token

    def handle_api(self, handler: Handler, method: str, path: str, body: bytes) -> None:
        if self.api_key is not None and handler.headers.get("X-API-KEY") != self.api_key:
            raise api_error(401, "Invalid API key")
        query = parse_qs(urlsplit(handler.path).query)
        data = json.loads(body) if body.strip() else {}
        if method == "POST" and path == "/v2/sandboxes":
            handler.send_json(201, self._create(data, handler.headers.get("Idempotency-Key")))
            return
        if method == "GET" and path == "/v2/sandboxes":
            items, next_token = self._list(query)
            handler.send_json(200, items, {"x-next-token": next_token} if next_token else None)
            return
        match = re.fullmatch(r"/(?:v2/)?sandboxes/([^/]+)(?:/(\w+))?", path)
        if match is None:
            raise api_error(404, f"no route {method} {path}")
        sandbox = self._sandbox(match.group(1))
        action = match.group(2)
        if method == "POST" and action == "connect":
            timeout = int(data.get("timeout") or DEFAULT_SANDBOX_TIMEOUT)
            resumed = sandbox.state == "paused"
            with self._lock:
                sandbox.state = "running"
                end = self._now() + timeout
                sandbox.end_at = end if resumed else max(sandbox.end_at, end)
            handler.send_json(201 if resumed else 200, self._create_body(sandbox))
        elif method == "POST" and action == "timeout":
            with self._lock:
                sandbox.end_at = self._now() + int(data["timeout"])
            handler.send_empty(204)
        elif method == "POST" and action == "pause":
            with self._lock:
                already = sandbox.state == "paused"
                sandbox.state = "paused"
            if already:
                raise api_error(409, f"sandbox {sandbox.sandbox_id} is already paused")
            handler.send_empty(204)
        elif method == "GET" and action is None:
            handler.send_json(200, self._detail(sandbox))
        elif method == "DELETE" and action is None:
            self.expire(sandbox.sandbox_id)
            handler.send_empty(204)
        else:
            raise api_error(404, f"no route {method} {path}")

    # -- envd and the code interpreter ---------------------------------------------------------

    def handle_sandbox(self, handler: Handler, method: str, path: str, body: bytes) -> None:
        sandbox_id = handler.headers.get("E2b-Sandbox-Id", "")
        sandbox = self._reachable(sandbox_id, handler.headers.get("X-Access-Token"), path)
        machine = sandbox.machine
        query = parse_qs(urlsplit(handler.path).query)
        if path == "/health":
            handler.send_empty(204)
        elif path == "/files" and method == "GET":
            self._read_file(handler, machine, query.get("path", [""])[0])
        elif path == "/files" and method == "POST":
            self._write_files(handler, machine, query.get("path", [None])[0], body)
        elif path == "/process.Process/Start":
            self._start_process(handler, sandbox, parse_envelope(body))
        elif path == "/process.Process/SendSignal":
            pid = int((json.loads(body or b"{}").get("process") or {}).get("pid", 0))
            process = sandbox.processes.get(pid)
            if process is None:
                raise connect_error(404, "not_found", f"process with pid {pid} not found")
            process.cancel()
            handler.send_json(200, {})
        elif path.startswith("/filesystem.Filesystem/"):
            handler.send_json(200, self._filesystem(machine, path.rsplit("/", 1)[1], body))
        elif path == "/execute" and method == "POST":
            self._execute(handler, sandbox, json.loads(body))
        elif path == "/contexts" and method == "POST":
            data = json.loads(body or b"{}")
            if data.get("language") not in (None, "python"):
                raise api_error(400, "the emulator runs Python only")
            context_id = uuid.uuid4().hex
            sandbox.contexts[context_id] = data.get("cwd") or WORKSPACE_ROOT
            handler.send_json(
                200, {"id": context_id, "language": "python", "cwd": sandbox.contexts[context_id]}
            )
        elif path == "/contexts" and method == "GET":
            handler.send_json(
                200,
                [{"id": k, "language": "python", "cwd": v} for k, v in sandbox.contexts.items()],
            )
        elif match := re.fullmatch(r"/contexts/([^/]+)(/restart)?", path):
            context_id, restart = match.groups()
            if context_id not in sandbox.contexts or method != ("POST" if restart else "DELETE"):
                raise api_error(404, f"context {context_id} not found")
            self._submit(machine.drop_context(context_id)).result()
            if not restart:
                del sandbox.contexts[context_id]
            handler.send_empty(204)
        else:
            raise api_error(404, f"no route {method} {path}")

    def _read_file(self, handler: Handler, machine: Machine, path: str) -> None:
        try:
            host = machine.host_path(path)
            if host.is_dir():
                raise api_error(400, f"path '{path}' is a directory")
            data = host.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise api_error(404, f"file '{path}' not found") from None
        handler.send_bytes(200, data, "application/octet-stream")

    def _write_files(
        self, handler: Handler, machine: Machine, path: str | None, body: bytes
    ) -> None:
        content_type = handler.headers.get("Content-Type", "")
        if content_type.startswith("multipart/form-data"):
            parts = parse_multipart(body, content_type)
            files = [(path if path and len(parts) == 1 else name, data) for name, data in parts]
        else:
            if handler.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            files = [(path or "", body)]
        written = []
        for target, data in files:
            target = target if target.startswith("/") else posixpath.join(WORKSPACE_ROOT, target)
            try:
                host = machine.host_path(target)
                host.parent.mkdir(parents=True, exist_ok=True)
                host.write_bytes(data)
                machine.give(host)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                raise api_error(400, f"cannot write '{target}'") from None
            written.append({"name": posixpath.basename(target), "type": "file", "path": target})
        handler.send_json(200, written)

    def _filesystem(self, machine: Machine, method: str, body: bytes) -> dict[str, Any]:
        data = json.loads(body or b"{}")
        try:
            if method == "ListDir":
                depth = int(data.get("depth") or 1)
                entries = machine.list_dir(data.get("path", ""), depth)
                return {"entries": [entry_json(e) for e in entries]}
            if method == "Stat":
                return {"entry": entry_json(machine.entry(_existing(machine, data["path"])))}
            if method == "Remove":
                host = _existing(machine, data["path"])
                if host.is_dir() and not host.is_symlink():
                    shutil.rmtree(host)
                else:
                    host.unlink()
                return {}
            if method == "MakeDir":
                host = machine.host_path(data["path"])
                if host.exists():
                    raise connect_error(409, "already_exists", f"'{data['path']}' exists")
                host.mkdir(parents=True)
                machine.give(host)
                return {"entry": entry_json(machine.entry(host))}
            if method == "Move":
                source = _existing(machine, data["source"])
                destination = machine.host_path(data["destination"])
                destination.parent.mkdir(parents=True, exist_ok=True)
                machine.give(destination.parent)
                source.rename(destination)
                return {"entry": entry_json(machine.entry(destination))}
        except (FileNotFoundError, NotADirectoryError):
            raise connect_error(404, "not_found", "path not found") from None
        raise connect_error(404, "unimplemented", f"filesystem.Filesystem/{method}")

    def handle_port(
        self,
        handler: Handler,
        sandbox_id: str,
        port: int,
        body: bytes,
        on_status: Callable[[int], None],
    ) -> None:
        """Forward a request for ``port`` of a running sandbox there. E2B's edge answers 502
        when the sandbox is not running or nothing listens on the port."""
        self._sweep()
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None or sandbox.state != "running":
            raise api_error(502, f"The sandbox {sandbox_id} was not found")
        try:
            upstream = sandbox.machine.connect(port)
        except ConnectionRefusedError:
            raise HttpError(
                502,
                {"message": "The sandbox is running but port is not open", "port": port},
            ) from None
        forward(handler, upstream, body, on_status)

    def _start_process(self, handler: Handler, sandbox: _Sandbox, request: dict[str, Any]) -> None:
        process = request.get("process") or {}
        argv = [process.get("cmd", "/bin/bash"), *process.get("args", [])]
        # commands.run always sends bash -l -c <cmd>; anything else runs as given.
        is_bash = argv[0] in ("/bin/bash", "bash") and argv[1:3] == ["-l", "-c"] and len(argv) == 4
        command = argv[3] if is_bash else shlex.join(argv)
        cwd = process.get("cwd") or WORKSPACE_ROOT
        try:
            sandbox.machine.host_path(cwd)
        except FileNotFoundError:
            raise connect_error(400, "invalid_argument", f"cwd '{cwd}' not found") from None
        timeout_ms = int(handler.headers.get("connect-timeout-ms") or 0)
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None
        output: queue.Queue[tuple[str, str]] = queue.Queue()
        future = self._submit(
            sandbox.machine.run_command(
                command, process.get("envs") or {}, cwd, lambda s, t: output.put((s, t))
            )
        )
        pid = next(self._pids)
        sandbox.processes[pid] = future
        future.add_done_callback(lambda _f: sandbox.processes.pop(pid, None))
        handler.start_stream(200, "application/connect+json")
        # A client that disconnects leaves the process running, as envd does; it can still be
        # killed with SendSignal or by its deadline.
        writing = handler.write_chunk(envelope({"event": {"start": {"pid": pid}}}))
        for stream, text in _drain(output, future, deadline):
            if writing:
                event = {"data": {stream: base64.b64encode(text.encode()).decode()}}
                writing = handler.write_chunk(envelope({"event": event}))
        trailer: dict[str, Any] = {}
        if not future.done():
            future.cancel()
            end: dict[str, Any] = {"exitCode": -1, "status": "signal: killed"}
            trailer = {
                "error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}
            }
        elif future.cancelled():
            end = {"exitCode": -1, "status": "signal: killed"}
        elif future.exception() is not None:
            end = {"exitCode": -1, "status": "error", "error": str(future.exception())}
        else:
            code = future.result()
            end = {"exited": True, "status": f"exit status {code}"}
            if code:  # proto3 JSON omits zero values
                end["exitCode"] = code
        if writing:
            handler.write_chunk(envelope({"event": {"end": end}}))
            handler.write_chunk(envelope(trailer, END_STREAM))
            handler.end_stream()

    def _execute(self, handler: Handler, sandbox: _Sandbox, request: dict[str, Any]) -> None:
        context = request.get("context_id") or "default"
        if context not in sandbox.contexts:
            raise api_error(404, f"context {context} not found")
        if request.get("language") not in (None, "python"):
            raise api_error(400, "the emulator runs Python only")
        output: queue.Queue[tuple[str, str]] = queue.Queue()
        future = self._submit(
            sandbox.machine.run_cell(
                request.get("code", ""),
                request.get("env_vars") or {},
                lambda s, t: output.put((s, t)),
                context,
                cwd=sandbox.contexts[context],
            )
        )
        handler.start_stream(200, "application/x-ndjson")
        for stream, text in _drain(output, future, None, handler.client_gone):
            stamp = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
            if not handler.write_line({"type": stream, "text": text, "timestamp": stamp}):
                future.cancel()
                return
        if not future.done():  # the client went away: the execution is interrupted
            future.cancel()
            return
        if future.cancelled() or sandbox.sandbox_id not in self.sandbox_ids("running"):
            # Killed or expired mid-execution: the edge drops the connection.
            handler.abort()
            return
        outcome: CellOutcome = future.result()
        handler.write_line({"type": "number_of_executions", "execution_count": outcome.count})
        for png in outcome.pngs:
            handler.write_line(_result(text="<Figure>", png=png, is_main_result=False))
        if outcome.value is not None:
            handler.write_line(_result(text=outcome.value, is_main_result=True))
        if outcome.error is not None:
            handler.write_line({"type": "error", **outcome.error})
        handler.write_line({"type": "end_of_execution"})
        handler.end_stream()


def _result(**fields: Any) -> dict[str, Any]:
    blank = dict.fromkeys(
        (
            "html",
            "markdown",
            "svg",
            "png",
            "jpeg",
            "pdf",
            "latex",
            "json",
            "javascript",
            "data",
            "chart",
        )
    )
    return {"type": "result", **blank, "extra": {}, **fields}


def _existing(machine: Machine, path: str) -> Path:
    """An existing entry, not followed if it is a link (stat, remove and move act on the link)."""
    host = machine.host_path(path, follow=False)
    if not host.exists() and not host.is_symlink():
        raise FileNotFoundError(path)
    return host


def _drain(
    output: queue.Queue[tuple[str, str]],
    future: Future[Any],
    deadline: float | None,
    gone: Callable[[], bool] | None = None,
) -> Iterator[tuple[str, str]]:
    """Yield output until the run ends, its deadline passes or the client goes away."""
    future.add_done_callback(lambda _f: output.put(_DONE))  # wakes the wait below at once
    while True:
        try:
            item = output.get(timeout=_POLL)
        except queue.Empty:
            item = None
        if item is _DONE:
            while not output.empty():
                item = output.get_nowait()
                if item is not _DONE:
                    yield item
            return
        if item is not None:
            yield item
            continue
        if deadline is not None and time.monotonic() >= deadline:
            return
        if gone is not None and gone():
            return


@contextlib.asynccontextmanager
async def emulated_e2b_provider(**options: Any) -> AsyncIterator[Any]:
    """Yield an [`E2BProvider`][langchain_sandbox.E2BProvider] bound to a fresh emulator.

    The provider gets the emulator's URLs and a throwaway API key as constructor arguments, so
    neither the process environment nor the SDK is touched. ``options`` go to the provider.
    """
    from langchain_sandbox.providers.e2b import E2BProvider

    api_key = "e2b_" + secrets.token_hex(20)
    emulator = E2BEmulator(api_key=api_key)
    await asyncio.to_thread(emulator.start)
    provider = E2BProvider(
        api_key=api_key, api_url=emulator.url, sandbox_url=emulator.url, **options
    )
    try:
        yield provider
    finally:
        await provider.aclose()
        await asyncio.to_thread(emulator.stop)


__all__ = ["E2BEmulator", "Fault", "RecordedRequest", "emulated_e2b_provider"]
