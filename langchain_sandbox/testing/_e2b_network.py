"""What the E2B emulator does with a create request's network settings: it enforces them, in the
emulated sandbox, with the local provider's own egress policy (`NetworkPolicy`).

E2B's rules: no ``network`` (or no ``denyOut``) leaves outbound traffic as
``allow_internet_access`` says; ``denyOut: ["0.0.0.0/0"]`` denies everything but ``allowOut``
(host names and ``*.domain`` wildcards, on HTTP and HTTPS), which the emulator turns into a policy
for its machine (`emulated_policy`). Settings it cannot enforce the same way (other ``denyOut`` lists, per-host header
``rules``, an egress proxy) are answered with a 400 rather than run with more network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.e2b._network import ALL_TRAFFIC
from langchain_sandbox.providers.local import EgressUpstream
from langchain_sandbox.testing._e2b_http import api_error
from langchain_sandbox.testing._emulated_egress import emulated_policy

_ENFORCED = {"allowOut", "denyOut"}


def machine_network(
    body: Mapping[str, Any], upstream: EgressUpstream | None
) -> bool | NetworkPolicy:
    """The emulated sandbox's network for a ``POST /v2/sandboxes`` body."""
    open_ = body.get("allow_internet_access") is not False
    network = body.get("network") or {}
    if not network or not open_:
        return open_
    unknown = sorted(set(network) - _ENFORCED)
    if unknown:
        raise api_error(400, f"the emulator does not enforce network settings {unknown}")
    denied, allowed = network.get("denyOut") or [], network.get("allowOut") or []
    if not denied:
        return True  # E2B: allowOut alone only makes exceptions to a denyOut
    if denied != [ALL_TRAFFIC]:
        raise api_error(400, "the emulator enforces denyOut only as all traffic (0.0.0.0/0)")
    if not allowed:
        return False
    try:
        return emulated_policy(allowed, upstream)
    except InvalidInputError as exc:
        raise api_error(400, f"allowOut: {exc}") from None


__all__ = ["machine_network"]
