"""The E2B emulator's sandboxes: their state, clocks and machines, what the control plane
(``_e2b_control``) and envd (``_e2b_envd``) act on, and the switches tests use on them
(`expire`, `advance_clock`...)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import threading
import time
from collections.abc import Awaitable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.providers.local import EgressUpstream, LocalProvider
from langchain_sandbox.testing._e2b_http import api_error
from langchain_sandbox.testing._e2b_machine import Machine

T = TypeVar("T")

ENVD_VERSION = "0.6.7"
DEFAULT_SANDBOX_TIMEOUT = 300


@dataclass
class Sandbox:
    """One emulated sandbox: its identity, machine, lease and running processes."""

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


class Sandboxes:
    """The emulator's sandboxes, by id; every method takes ``_lock`` for what it reads."""

    api_key: str | None
    _lock: threading.Lock
    _loop: asyncio.AbstractEventLoop
    _machines: LocalProvider | None
    _egress_upstream: EgressUpstream | None

    def _init_sandboxes(self) -> None:
        self._sandboxes: dict[str, Sandbox] = {}
        self._idempotency: dict[str, str] = {}
        self._idempotency_locks: dict[str, threading.Lock] = {}
        self._pids = itertools.count(1000)
        self._clock_offset = 0.0

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

    def _submit(self, coro: Awaitable[T]) -> Future[T]:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self._loop)

    def _discard(self, sandbox: Sandbox) -> None:
        for process in list(sandbox.processes.values()):
            process.cancel()
        with contextlib.suppress(Exception):
            self._submit(sandbox.machine.close()).result(timeout=30)

    def _sweep(self) -> None:
        """Apply sandbox timeouts: auto-pause or kill what ran past its end."""
        now = self._now()
        gone: list[Sandbox] = []
        with self._lock:
            for sandbox in list(self._sandboxes.values()):
                if sandbox.state == "running" and sandbox.end_at <= now:
                    if sandbox.auto_pause:
                        sandbox.state = "paused"
                    else:
                        gone.append(self._sandboxes.pop(sandbox.sandbox_id))
        for sandbox in gone:
            self._discard(sandbox)

    def _sandbox(self, sandbox_id: str) -> Sandbox:
        self._sweep()
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            raise api_error(404, f"sandbox {sandbox_id} not found")
        return sandbox

    def _reachable(self, sandbox_id: str, token: str | None, path: str) -> Sandbox:
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


__all__ = ["DEFAULT_SANDBOX_TIMEOUT", "ENVD_VERSION", "Sandbox", "Sandboxes"]
