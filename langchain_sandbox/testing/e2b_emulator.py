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
        provider = emulator.provider()             # or an E2BProvider pointed here

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

The routes live in ``_e2b_control`` (control plane) and ``_e2b_envd`` (envd, the code
interpreter, a sandbox's ports); the sandboxes' state in ``_e2b_sandboxes``; framing, the
request log's records and faults in ``_e2b_http``, on the HTTP base the emulators share
(``_http_emulator``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import secrets
import tempfile
import threading
from collections.abc import AsyncIterator
from typing import Any

from langchain_sandbox.providers.local import EgressUpstream, LocalProvider
from langchain_sandbox.testing._e2b_control import ControlPlane
from langchain_sandbox.testing._e2b_envd import Envd
from langchain_sandbox.testing._e2b_http import EmulatorServer, Fault, RecordedRequest
from langchain_sandbox.testing._edge import EdgeClient
from langchain_sandbox.testing._http_emulator import LogBase, ServedEmulator


class E2BEmulator(ControlPlane, Envd, LogBase[RecordedRequest, Fault], ServedEmulator, EdgeClient):
    """The emulator; start it with ``with`` (or `start` / `close`).

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
        self._init_log()
        self._init_sandboxes()
        self._sequence = itertools.count()
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
        self._serve("e2b-emulator", EmulatorServer(self, self._host))
        return self

    def close(self) -> None:
        """Kill every sandbox, close every connection and join the emulator's threads. Idempotent."""
        if self._server is None:
            return
        self._stop_serving(draining=self._end_sandboxes)
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

    def _end_sandboxes(self) -> None:
        with self._lock:
            for fault in self._faults:
                if fault.hold is not None:
                    fault.hold.set()  # no request outlives the emulator
            sandboxes = list(self._sandboxes.values())
            self._sandboxes.clear()
        for sandbox in sandboxes:
            self._discard(sandbox)

    def env(self) -> dict[str, str]:
        """Environment variables that point the E2B SDK here (and only here)."""
        env = {"E2B_API_URL": self.url, "E2B_SANDBOX_URL": self.url, "E2B_DEBUG": "false"}
        if self.api_key:
            env["E2B_API_KEY"] = self.api_key
        return env

    def provider(self, **options: Any) -> Any:
        """An [`E2BProvider`][langchain_sandbox.E2BProvider] pointed here, by constructor
        arguments only (neither the process environment nor the SDK is touched)."""
        from langchain_sandbox.providers.e2b import E2BProvider

        options.setdefault("api_key", self.api_key or "e2b_" + secrets.token_hex(20))
        return E2BProvider(api_url=self.url, sandbox_url=self.url, **options)

    # -- what tests look at and switch -------------------------------------------------------

    def count(self, route: str, sandbox_id: str | None = None) -> int:
        """Requests whose route matches the regular expression ``route``."""
        pattern = re.compile(route)
        return sum(
            1
            for r in self.requests
            if pattern.search(r.route) and (sandbox_id is None or r.sandbox_id == sandbox_id)
        )

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
        return self._add_fault(
            Fault(
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
        )

    # -- the log, for the handler ------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._log.append(request)
            return request.seq

    def _next_seq(self) -> int:
        return next(self._sequence)

    def _update(self, seq: int, **changes: Any) -> None:
        """Complete a logged request (body, status); a no-op once the log was cleared."""
        with self._lock:
            for index in range(len(self._log) - 1, -1, -1):
                if self._log[index].seq == seq:
                    old = self._log[index]
                    self._log[index] = RecordedRequest(**{**old.__dict__, **changes})
                    return

    def _take_fault(self, route: str, body: bytes) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(route, body):
                    if fault.after > 0:
                        fault.after -= 1
                        continue
                    fault.hits += 1
                    if fault.times is not None and fault.hits >= fault.times:
                        self._faults.remove(fault)
                    return fault
        return None


@contextlib.asynccontextmanager
async def emulated_e2b_provider(**options: Any) -> AsyncIterator[Any]:
    """Yield an [`E2BProvider`][langchain_sandbox.E2BProvider] bound to a fresh emulator
    (closed, with every sandbox, on exit), whose API key it requires. ``options`` go to the
    provider."""
    api_key = "e2b_" + secrets.token_hex(20)
    async with E2BEmulator(api_key=api_key) as emulator:
        provider = emulator.provider(**options)
        try:
            yield provider
        finally:
            await provider.aclose()


__all__ = ["E2BEmulator", "Fault", "RecordedRequest", "emulated_e2b_provider"]
