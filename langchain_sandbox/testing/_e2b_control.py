"""The E2B emulator's control plane: create (with ``Idempotency-Key``), list (metadata and
state filters, ``x-next-token`` paging), connect, timeout, pause, get and kill a sandbox."""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
import threading
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote, urlsplit

from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.testing._e2b_http import Handler, api_error
from langchain_sandbox.testing._e2b_machine import Machine
from langchain_sandbox.testing._e2b_network import machine_network
from langchain_sandbox.testing._e2b_sandboxes import (
    DEFAULT_SANDBOX_TIMEOUT,
    ENVD_VERSION,
    Sandbox,
    Sandboxes,
)


class ControlPlane(Sandboxes):
    """The routes without an ``E2b-Sandbox-Id`` header (see `handle_api`)."""

    def _create_body(self, sandbox: Sandbox) -> dict[str, Any]:
        return {
            "templateID": sandbox.template,
            "sandboxID": sandbox.sandbox_id,
            "clientID": "emulator",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": sandbox.access_token,
            "domain": None,
        }

    def _detail(self, sandbox: Sandbox) -> dict[str, Any]:
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

    def _new_sandbox(self, body: dict[str, Any], idempotency_key: str | None) -> Sandbox:
        timeout = int(body.get("timeout") or DEFAULT_SANDBOX_TIMEOUT)
        allow = body.get("allow_internet_access")
        env = {str(k): str(v) for k, v in (body.get("envVars") or {}).items()}
        sandbox = Sandbox(
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


__all__ = ["ControlPlane"]
