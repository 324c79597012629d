"""Runloop's V2 tunnels in the emulator: one per devbox, and the edge that forwards through it.

``POST /v1/devboxes/{id}/enable_tunnel`` gives the devbox a ``TunnelView`` whose ``tunnel_key``
names it; the SDK builds a port's URL as ``https://{port}-{tunnel_key}.tunnel.{domain}``, and
Runloop's edge routes on that host name. The emulator answers such a request (by its ``Host``)
by forwarding it to the port in the devbox's machine, through the machine's own
``expose_port`` (the local provider's: a relay into the sandbox's network namespace, so it
works with the network off). A devbox that is not running answers 502, as does a port nothing
listens on, or a machine whose provider cannot expose ports.

Assumption (not documented by Runloop): enabling a second tunnel on a devbox that has one is
refused (400), since "each Devbox can have one tunnel".
"""

from __future__ import annotations

import secrets
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from langchain_sandbox.testing._runloop_devboxes import Account, ApiError, Devbox


def enable(account: Account, devbox_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Give a running devbox its tunnel; returns the ``TunnelView``."""
    devbox, _ = account.running(devbox_id)
    with account.changed:
        if devbox.tunnel is not None:
            raise ApiError(400, f"Devbox {devbox_id} already has a tunnel")
        devbox.tunnel = {
            "tunnel_key": secrets.token_hex(12),
            "auth_mode": body.get("auth_mode") or "open",
            "create_time_ms": int(time.time() * 1000),
            "http_keep_alive": body.get("http_keep_alive", True) is not False,
            "wake_on_http": bool(body.get("wake_on_http")),
        }
        if devbox.tunnel["auth_mode"] == "authenticated":
            devbox.tunnel["auth_token"] = secrets.token_urlsafe(24)
        return dict(devbox.tunnel)


def remove(account: Account, devbox_id: str) -> dict[str, Any]:
    devbox = account.get(devbox_id)
    with account.changed:
        devbox.tunnel = None
    return {}


def _owner(account: Account, key: str) -> Devbox:
    for devbox in account.listing():
        if devbox.tunnel is not None and secrets.compare_digest(devbox.tunnel["tunnel_key"], key):
            return devbox
    raise ApiError(404, "No tunnel with this key")


def connect(account: Account, key: str, port: int, headers: Any) -> socket.socket:
    """A connection to ``port`` in the devbox whose tunnel ``key`` names, or the error the
    edge answers."""
    devbox = _owner(account, key)
    assert devbox.tunnel is not None
    token = devbox.tunnel.get("auth_token")
    if token and headers.get("X-Runloop-Tunnel-Authorization", "") != f"Bearer {token}":
        raise ApiError(401, "This tunnel needs its bearer token")
    try:
        _, machine = account.running(devbox.id)
    except ApiError:
        raise ApiError(502, f"Devbox {devbox.id} is not running") from None
    if not machine.capabilities.ports:
        raise ApiError(502, "The emulator's machines cannot expose ports")
    try:
        url = urlsplit(account._run(machine.expose_port(port)))
        return socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), 10)
    except OSError:
        raise ApiError(502, f"Nothing listens on port {port} of devbox {devbox.id}") from None


__all__ = ["connect", "enable", "remove"]
