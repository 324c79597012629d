"""A `NetworkPolicy` on Runloop: one of the account's network policies, applied at launch.

Runloop filters a devbox's egress with a network policy (``POST /v1/network-policies``) named in
the devbox's ``launch_parameters.network_policy_id``: ``allowed_hostnames`` (names and
``*.domain`` wildcards) and ``allowed_cidrs`` (IPv4 blocks, each with its ports), nothing else
(``allow_all`` and Runloop's own gateways and mirrors off). A policy maps to those: names to
``allowed_hostnames``, IPv4 addresses to a ``/32`` block on the entry's port (80 and 443 when it
names none).

Policies are content-addressed by name (``langchain-sandbox-<digest of the rules>``): a session
reuses the account's policy with the same rules and creates it only the first time, so sessions
leave no policy per devbox behind.

Refused when the session is created, before any request:

* secrets: Runloop has no placeholder swap (its agent gateway proxies credentials for its own
  agents, not a placeholder the code sends);
* a name with a port (``allowed_hostnames`` has no ports);
* an IPv6 address (``allowed_cidrs`` is IPv4 only).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from langchain_sandbox.errors import ConfigurationError
from langchain_sandbox.network import NetworkPolicy, ip_literal, refuse_secrets

_NAME_PREFIX = "langchain-sandbox-"


def policy_rules(policy: NetworkPolicy) -> dict[str, Any]:
    """The body of ``POST /v1/network-policies`` for ``policy`` (its name aside), or raise
    `ConfigurationError` for what Runloop cannot enforce (see the module docstring)."""
    refuse_secrets(
        policy, "Runloop", why="its network policies allow hosts but cannot swap a placeholder"
    )
    hostnames: list[str] = []
    cidrs: list[dict[str, Any]] = []
    refused: list[str] = []
    for entry, (host, port) in zip(policy.allow, policy.entries, strict=True):
        address = ip_literal(host)
        if address is None and port is None:
            hostnames.append(host)
        elif address is not None and address.version == 4:
            ports = [port] if port is not None else [80, 443]
            cidrs.append({"cidr": f"{address}/32", "ports": [{"port": p} for p in ports]})
        else:
            refused.append(entry)
    if refused:
        raise ConfigurationError(
            f"Runloop cannot enforce NetworkPolicy allow entries {refused}: its allowed host "
            "names have no ports, and its address rules are IPv4 only (docs/network.md)."
        )
    return {
        "allow_all": False,
        "allow_devbox_to_devbox": False,
        "allow_agent_gateway": False,
        "allow_mcp_gateway": False,
        "allow_runloop_mirrors": False,
        "allowed_hostnames": hostnames,
        "allowed_cidrs": cidrs,
    }


async def launch_network(api: Any, network: bool | NetworkPolicy) -> dict[str, Any]:
    """The ``launch_parameters`` entries for ``SessionSpec.network`` (none for a bool), the
    account's policy found or created through ``api`` (the SDK's ``AsyncRunloop``)."""
    if not isinstance(network, NetworkPolicy):
        return {}
    rules = policy_rules(network)
    digest = hashlib.sha256(json.dumps(rules, sort_keys=True).encode()).hexdigest()[:16]
    name = _NAME_PREFIX + digest
    async for found in api.network_policies.list(name=name, limit=100):
        if found.name == name:
            return {"network_policy_id": found.id}
    made = await api.network_policies.create(name=name, **rules)
    return {"network_policy_id": made.id}


__all__ = ["launch_network", "policy_rules"]
