"""A `NetworkPolicy` on E2B: what its sandbox network settings can enforce, and what they cannot.

E2B filters a sandbox's outbound traffic itself (``network={"allow_out": [...], "deny_out":
[...]}`` at create; allowed entries win over denied ones). A policy maps to its host names and
wildcards in ``allow_out`` with everything else denied (``deny_out: ["0.0.0.0/0"]``, the SDK's
"all traffic"). E2B matches names on HTTP and HTTPS traffic, which is what a policy's entry
without a port allows (80 and 443).

What E2B cannot express is refused when the session is created, before any request, instead of
running with more network than the policy asks for:

* an entry with a port: ``allow_out`` has no ports (a name or an address would be open on all);
* an address entry: E2B allows an address on every port, where the policy means 80 and 443;
* secrets: E2B's per-host ``rules`` set whole request headers to a fixed value; they cannot
  replace a placeholder wherever the code puts it, which is what a `Secret` promises (and
  its value would then sit in the sandbox's platform settings, readable back through the API).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_sandbox.errors import ConfigurationError
from langchain_sandbox.network import NetworkPolicy, ip_literal, refuse_secrets

ALL_TRAFFIC = "0.0.0.0/0"
"""E2B's "every destination" (the SDK's ``ctx.all_traffic``)."""


def create_network(network: bool | NetworkPolicy) -> dict[str, Any]:
    """The keyword arguments of ``AsyncSandbox.create`` for ``SessionSpec.network``, or raise
    `ConfigurationError` for a policy E2B cannot enforce (see the module docstring)."""
    if not isinstance(network, NetworkPolicy):
        return {"allow_internet_access": network}
    refuse_secrets(
        network,
        "E2B",
        why="its network rules set whole headers to a fixed value and cannot swap a "
        "placeholder the code sends",
    )
    refused = [
        entry
        for entry, (host, port) in zip(network.allow, network.entries, strict=True)
        if port is not None or ip_literal(host) is not None
    ]
    if refused:
        raise ConfigurationError(
            f"E2B cannot enforce NetworkPolicy allow entries {refused}: its allow_out names "
            "hosts without ports, and allows an address on every port. Name hosts (or "
            "'*.domain') without a port on E2B (docs/network.md)."
        )
    hosts = [host for host, _ in network.entries]
    return {"network": {"allow_out": hosts, "deny_out": [ALL_TRAFFIC]}}


def recorded_network(state: Mapping[str, Any]) -> bool | NetworkPolicy:
    """``SessionSpec.network`` again from a session record's ``state`` (a policy on E2B has no
    secrets, so no value is needed to rebuild it)."""
    network = state.get("network", False)
    if isinstance(network, Mapping):
        return NetworkPolicy.from_record(network, {})
    return bool(network)


__all__ = ["ALL_TRAFFIC", "create_network", "recorded_network"]
