"""How the emulators hold an emulated sandbox to the egress rules a platform was given: the machine
(a local provider session) gets a `NetworkPolicy` with those hosts, enforced by the local egress
proxy. Names the emulator's `EgressUpstream` answers itself (test servers on the host's loopback
standing in for public hosts) have their answers allowed along with them, as the platform's own
resolver would give public addresses."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.local import EgressUpstream


def emulated_policy(allow: Sequence[str], upstream: EgressUpstream | None) -> NetworkPolicy:
    """The machine's policy for the platform's allowed ``allow`` entries (policy syntax)."""
    policy = NetworkPolicy(allow=allow)
    answers = (upstream or EgressUpstream()).hosts
    stand_ins = [
        answer
        for name, answer in answers.items()
        if any(policy.allows(name, port) for port in (80, 443))
    ]
    return NetworkPolicy(allow=[*allow, *stand_ins])


__all__ = ["emulated_policy"]
