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

import contextlib
import functools
import json
import re
import socket
import time
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langchain_sandbox.core._event_loop import LoopThread
from langchain_sandbox.providers.base import Provider
from langchain_sandbox.providers.local import EgressUpstream
from langchain_sandbox.testing import _runloop_tunnels
from langchain_sandbox.testing._edge import EdgeClient, forward, port_host
from langchain_sandbox.testing._http_emulator import (
    Fault,
    Handler,
    RecordedRequest,
    Reply,
    RequestLog,
    ServedEmulator,
)
from langchain_sandbox.testing._machine_host import MachineHost
from langchain_sandbox.testing._runloop_bodies import json_body as _json
from langchain_sandbox.testing._runloop_bodies import multipart_fields as _multipart
from langchain_sandbox.testing._runloop_devboxes import Account, ApiError, Devbox, Execution
from langchain_sandbox.testing._runloop_network import NetworkPolicies

_DEFAULT_HOLD = 25.0
_SSE_CHUNK = 64 * 1024


Route = Callable[..., Reply]


class RunloopEmulator(RequestLog, ServedEmulator, EdgeClient):
    """The emulated Runloop API on ``127.0.0.1:<free port>``; see the module docstring.

    Args:
        machines: The provider whose sessions play the devboxes (default: the local provider).
        api_key: If set, requests with another bearer token get 401.
        network: Whether code in emulated devboxes may reach the network.
        boot_delay: Seconds a new devbox stays ``provisioning``.
        egress_upstream: How devboxes launched with a network policy (enforced by the local
            egress proxy, `_runloop_network`) reach upstream servers: test servers' names and CA.
    """

    def __init__(
        self,
        *,
        machines: Provider | None = None,
        api_key: str | None = None,
        network: bool = False,
        boot_delay: float = 0.0,
        egress_upstream: EgressUpstream | None = None,
    ) -> None:
        self._egress_upstream = egress_upstream
        self._policies = NetworkPolicies(egress_upstream)
        self._machines = machines
        self._network = network
        self._boot_delay = boot_delay
        self.api_key = api_key
        self.max_hold = _DEFAULT_HOLD
        self.inline_output_bytes: int | None = None
        self._init_log()
        self._host: MachineHost | None = None
        self._loop: LoopThread | None = None
        self._account: Account | None = None
        self._routes = self._build_routes()

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> RunloopEmulator:
        if self._server is not None:
            return self
        self._host = MachineHost(
            "runloop-emulator", self._machines, egress_upstream=self._egress_upstream
        )
        self._loop = self._host.loop
        self._account = Account(
            self._loop,
            self._host.machines,
            network=self._network,
            boot_delay=self._boot_delay,
            policies=self._policies,
        )
        self._serve("runloop-emulator")
        return self

    def close(self) -> None:
        """Stop serving, shut every devbox down and join the emulator's threads. Idempotent."""
        if self._server is None:
            return
        assert self._account is not None
        assert self._loop is not None
        self._account.close()  # first: it ends the long-polls the server is holding
        self._stop_serving()
        assert self._host is not None
        self._host.stop()

    @property
    def account(self) -> Account:
        if self._account is None:
            raise RuntimeError("The emulator is not running.")
        return self._account

    def env(self) -> dict[str, str]:
        """Environment variables that point the Runloop SDK here (and only here)."""
        return {"RUNLOOP_BASE_URL": self.url, "RUNLOOP_API_KEY": self.api_key or "emulator-key"}

    def provider(self, **options: Any) -> Any:
        """A [`RunloopProvider`][langchain_sandbox.RunloopProvider] pointed here."""
        from langchain_sandbox.providers.runloop import RunloopProvider

        options.setdefault("api_key", self.api_key or "emulator-key")
        return RunloopProvider(base_url=self.url, **options)

    # ---- switches and the log ---------------------------------------------------------------

    def expire(self, devbox_id: str, *, forget: bool = False) -> None:
        """The devbox goes away as if its TTL ran out; with ``forget`` Runloop no longer knows it
        (404) instead of reporting it ``shutdown``."""
        devbox = self.account.get(devbox_id)
        if forget:
            self.account.forget(devbox)
        else:
            self.account.shutdown(devbox, reason="ttl_expired")

    # ---- HTTP -------------------------------------------------------------------------------

    def _handle(self, handler: Handler, method: str) -> None:
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
            reply = Reply({"message": fault.message}, status=fault.status)
            extra = fault.headers
        else:
            reply = self._answer(handler, method, url.path, url.query, body)
            extra = {}
        self._record(method, url.path, url.query, reply.status, headers, body)
        self._send(handler, reply, extra)

    def _tunnel(
        self,
        handler: Handler,
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
            self._send(handler, Reply({"message": error.message}, status=error.status), {})
            return
        forward(
            handler,
            upstream,
            body,
            lambda status: self._record(method, url.path, url.query, status, headers, body),
        )

    def _answer(self, handler: Handler, method: str, path: str, query: str, body: bytes) -> Reply:
        token = handler.headers.get("authorization", "")
        if not token.startswith("Bearer ") or not token[7:]:
            return Reply({"message": "Missing bearer token"}, status=401)
        if self.api_key is not None and token[7:] != self.api_key:
            return Reply({"message": "Invalid API key"}, status=401)
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
                return Reply({"message": error.message}, status=error.status)
            except (ValueError, KeyError, TypeError) as error:
                return Reply({"message": f"Bad request: {error}"}, status=400)
            except Exception as error:
                # A failure of the emulator itself: a 500 that names it, as Runloop answers its
                # own failures, and its traceback for the test's output (a connection closed
                # without an answer would say nothing of it).
                traceback.print_exception(error)
                return Reply({"message": f"emulator error: {error!r}"}, status=500)
        return Reply({"message": f"No route for {method} {path}"}, status=404)

    # ---- routes -----------------------------------------------------------------------------

    def _build_routes(self) -> list[tuple[str, re.Pattern[str], Route]]:
        dbx = r"/v1/devboxes/([^/]+)"
        exn = dbx + r"/executions/([^/]+)"
        policies = self._policies
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
            (
                "POST",
                r"/v1/network-policies",
                lambda *, body, **_: Reply(policies.create(_json(body))),
            ),
            ("GET", r"/v1/network-policies", lambda *, query, **_: Reply(policies.list(query))),
        ]
        return [(method, re.compile(pattern), route) for method, pattern, route in table]

    def _hold(self, body: dict[str, Any], default: float) -> float:
        requested = body.get("timeout_seconds")
        return min(float(requested) if requested else default, self.max_hold)

    def _create(self, *, body: bytes, **_: Any) -> Reply:
        return Reply(self.account.create(_json(body)).view())

    def _create_and_await(self, *, body: bytes, **_: Any) -> Reply:
        devbox = self.account.create(_json(body))
        # Runloop holds the request a while for the devbox to boot, then lets the SDK poll.
        self.account.wait_for(lambda: devbox.status != "provisioning", min(self.max_hold, 1.0))
        return Reply(devbox.view())

    def _list(self, *, query: dict[str, list[str]], **_: Any) -> Reply:
        limit = int(query.get("limit", ["20"])[0])
        after = query.get("starting_after", [None])[0]
        wanted = query.get("status", [None])[0]
        devboxes = [d for d in self.account.listing() if wanted is None or d.status == wanted]
        if after is not None:
            ids = [d.id for d in devboxes]
            devboxes = devboxes[ids.index(after) + 1 :] if after in ids else []
        page = devboxes[:limit]
        return Reply(
            {
                "devboxes": [d.view() for d in page],
                "has_more": len(devboxes) > limit,
                "total_count": len(devboxes),
            }
        )

    def _retrieve(self, devbox_id: str, **_: Any) -> Reply:
        return Reply(self.account.get(devbox_id).view())

    def _wait_devbox(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        request = _json(body)
        devbox = self.account.get(devbox_id)
        statuses = set(request.get("statuses") or [])
        if self.account.wait_for(lambda: devbox.status in statuses, self._hold(request, 30.0)):
            return Reply(devbox.view())
        return Reply({"message": "Timed out waiting for status"}, status=408)

    def _execute_async(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        request = _json(body)
        execution = self.account.execute(
            devbox_id, str(request["command"]), attach_stdin=bool(request.get("attach_stdin"))
        )
        return Reply(execution.view(max_bytes=self.inline_output_bytes))

    def _send_stdin(self, devbox_id: str, execution_id: str, *, body: bytes, **_: Any) -> Reply:
        request, execution = _json(body), self._execution(devbox_id, execution_id)
        if execution.stdin is None or execution.status == "completed":
            raise ApiError(400, f"Execution {execution_id} does not take stdin")
        if request.get("signal") == "EOF":
            execution.stdin.close()
        elif not request.get("text") or not execution.stdin.write(request["text"], execution.done):
            raise ApiError(400, "send nonempty text, or the signal EOF, while the command runs")
        return Reply({"devbox_id": devbox_id, "execution_id": execution_id, "success": True})

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
    ) -> Reply:
        request = _json(body)
        execution = self._execution(devbox_id, execution_id)
        statuses = set(request.get("statuses") or [])
        last_n = int(query.get("last_n", ["100"])[0])
        if self.account.wait_for(lambda: execution.status in statuses, self._hold(request, 25.0)):
            return Reply(execution.view(last_n, self.inline_output_bytes))
        return Reply({"message": "Timed out waiting for status"}, status=408)

    def _retrieve_execution(self, devbox_id: str, execution_id: str, **_: Any) -> Reply:
        return Reply(self._execution(devbox_id, execution_id).view())

    def _kill(self, devbox_id: str, execution_id: str, **_: Any) -> Reply:
        execution = self._execution(devbox_id, execution_id)
        self.account.kill(execution)
        return Reply(execution.view(max_bytes=self.inline_output_bytes))

    def _stream(
        self,
        devbox_id: str,
        execution_id: str,
        stream: str,
        *,
        query: dict[str, list[str]],
        **_: Any,
    ) -> Reply:
        execution = self._execution(devbox_id, execution_id)
        return Reply(events=self._updates(execution, stream, int(query.get("offset", ["0"])[0])))

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

    def _write_contents(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        request = _json(body)
        self.account.write_file(devbox_id, request["file_path"], str(request["contents"]).encode())
        return Reply({"devbox_id": devbox_id, "exit_status": 0, "stdout": "", "stderr": ""})

    def _read_contents(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        data = self.account.read_file(devbox_id, _json(body)["file_path"])
        return Reply(raw=data, content_type="text/plain; charset=utf-8")

    def _upload(self, devbox_id: str, *, body: bytes, content_type: str, **_: Any) -> Reply:
        fields = _multipart(body, content_type)
        if "path" not in fields or "file" not in fields:
            raise ApiError(400, "upload_file needs the form fields 'path' and 'file'")
        self.account.write_file(devbox_id, fields["path"].decode(), fields["file"])
        return Reply({})

    def _download(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        data = self.account.read_file(devbox_id, _json(body)["path"])
        return Reply(raw=data, content_type="application/octet-stream")

    def _snapshot_async(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        request = _json(body)
        snapshot = self.account.snapshot(
            devbox_id, request.get("name"), dict(request.get("metadata") or {})
        )
        return Reply(snapshot.view())

    def _snapshot_blocking(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        request = _json(body)
        snapshot = self.account.snapshot(
            devbox_id, request.get("name"), dict(request.get("metadata") or {})
        )
        self.account.wait_for(lambda: snapshot.status != "in_progress", 600)
        return Reply(snapshot.view())

    def _snapshot_status(self, snapshot_id: str, **_: Any) -> Reply:
        snapshot = self.account.snapshots.get(snapshot_id)
        if snapshot is None:
            raise ApiError(404, f"Snapshot {snapshot_id} not found")
        return Reply(snapshot.status_view())

    def _suspend(self, devbox_id: str, **_: Any) -> Reply:
        devbox = self.account.get(devbox_id)
        if devbox.status not in ("suspending", "suspended"):
            self.account.suspend(devbox)
        return Reply(devbox.view())

    def _resume(self, devbox_id: str, **_: Any) -> Reply:
        devbox = self.account.get(devbox_id)
        if devbox.status not in ("resuming", "running"):
            self.account.resume(devbox)
        return Reply(devbox.view())

    def _shutdown(self, devbox_id: str, **_: Any) -> Reply:
        devbox: Devbox = self.account.get(devbox_id)
        self.account.shutdown(devbox)
        return Reply(devbox.view())

    def _keep_alive(self, devbox_id: str, **_: Any) -> Reply:
        self.account.running(devbox_id)
        return Reply({})

    def _enable_tunnel(self, devbox_id: str, *, body: bytes, **_: Any) -> Reply:
        return Reply(_runloop_tunnels.enable(self.account, devbox_id, _json(body)))

    def _remove_tunnel(self, devbox_id: str, **_: Any) -> Reply:
        return Reply(_runloop_tunnels.remove(self.account, devbox_id))


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
