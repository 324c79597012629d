"""The Runloop emulator's network policies (``/v1/network-policies``), enforced: a devbox launched
with ``launch_parameters.network_policy_id`` runs on a machine held to that policy's hosts by the
local egress proxy (`emulated_policy`).

What the emulator can enforce is what it accepts: ``allowed_hostnames`` (names, ``*.domain``),
``allowed_cidrs`` of single IPv4 addresses (``/32``) with their ports, and ``allow_all``. A policy
that opens Runloop's own gateways or mirrors, or a wider block or one without ports, is answered
with a 400 rather than run with more network than it names.
"""

from __future__ import annotations

import ipaddress
import threading
import time
import uuid
from typing import Any

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.local import EgressUpstream
from langchain_sandbox.testing._emulated_egress import emulated_policy
from langchain_sandbox.testing._runloop_devboxes import ApiError

_NOT_EMULATED = ("allow_agent_gateway", "allow_mcp_gateway", "allow_runloop_mirrors")


class NetworkPolicies:
    """The account's network policies, by id."""

    def __init__(self, upstream: EgressUpstream | None) -> None:
        self._upstream = upstream
        self._lock = threading.Lock()
        self._views: dict[str, dict[str, Any]] = {}
        self._enforced: dict[str, bool | NetworkPolicy] = {}

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/network-policies``: the new policy's view."""
        if not body.get("name"):
            raise ApiError(400, "name is required")
        opened = [flag for flag in _NOT_EMULATED if body.get(flag)]
        if opened:
            raise ApiError(400, f"the emulator does not enforce {opened}")
        hostnames = [str(h) for h in body.get("allowed_hostnames") or []]
        cidrs = list(body.get("allowed_cidrs") or [])
        entries = [*hostnames, *(entry for rule in cidrs for entry in _cidr_entries(rule))]
        enforced: bool | NetworkPolicy = True
        if not body.get("allow_all"):
            try:
                enforced = emulated_policy(entries, self._upstream) if entries else False
            except InvalidInputError as exc:
                raise ApiError(400, str(exc)) from None
        now = int(time.time() * 1000)
        view = {
            "id": f"np_{uuid.uuid4().hex[:20]}",
            "name": body["name"],
            "description": body.get("description"),
            "create_time_ms": now,
            "update_time_ms": now,
            "egress": {
                "allow_all": bool(body.get("allow_all")),
                "allow_devbox_to_devbox": bool(body.get("allow_devbox_to_devbox")),
                **{flag: False for flag in _NOT_EMULATED},
                "allowed_hostnames": hostnames,
                "allowed_cidrs": cidrs,
            },
        }
        with self._lock:
            self._views[view["id"]] = view
            self._enforced[view["id"]] = enforced
        return view

    def list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """``GET /v1/network-policies``: one page of every policy (``name``: a partial match)."""
        name = query.get("name", [""])[0]
        with self._lock:
            found = [view for view in self._views.values() if name in view["name"]]
        return {"network_policies": found, "has_more": False, "total_count": len(found)}

    def machine_network(
        self, launch_parameters: dict[str, Any], default: bool
    ) -> bool | NetworkPolicy:
        """The network of a devbox launched with ``launch_parameters``."""
        policy_id = launch_parameters.get("network_policy_id")
        if policy_id is None:
            return default
        with self._lock:
            if policy_id not in self._enforced:
                raise ApiError(400, f"NetworkPolicy {policy_id} does not exist")
            return self._enforced[policy_id]


def _cidr_entries(rule: dict[str, Any]) -> list[str]:
    network = ipaddress.ip_network(str(rule.get("cidr")))
    ports = [int(p["port"]) for p in rule.get("ports") or []]
    if network.version != 4 or network.prefixlen != 32 or not ports:
        raise ApiError(400, "the emulator enforces allowed_cidrs of one IPv4 address with ports")
    return [f"{network.network_address}:{port}" for port in ports]


__all__ = ["NetworkPolicies"]
