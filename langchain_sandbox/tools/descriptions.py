"""What a tool's description tells the model about its sandbox, derived from the real
configuration (the provider's capabilities and the session spec), never assumed.

A tool bound to a runtime (``runtime=`` or ``provider=``, a toolkit or middleware given one) knows
its provider and spec when it is built, so its description states them: network or none, and the
time limit of a call. A tool that finds its runtime per call (from the run's context or the process
default) cannot know which sandbox it will get, so its description makes no claim about the
network.
"""

from __future__ import annotations

from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.base import Capabilities, SessionSpec


def network_sentence(capabilities: Capabilities | None, spec: SessionSpec | None) -> str:
    """One sentence about the network the sandbox's code can reach."""
    if capabilities is None or spec is None:
        return (
            "Whether the network is reachable depends on how the sandbox was set up; "
            "if a download fails, say so rather than retrying."
        )
    if not capabilities.network_control:
        return "The network is reachable: this sandbox's provider does not restrict it."
    if isinstance(spec.network, NetworkPolicy):
        hosts = ", ".join(spec.network.allow) or "none"
        names = ", ".join(s.name for s in spec.network.secrets)
        keys = (
            f" API keys in the environment ({names}) work only toward their hosts." if names else ""
        )
        return f"Network access is limited to these hosts: {hosts}.{keys}"
    if spec.network:
        return "Network access is enabled."
    return "There is no network access."


def sandbox_facts(capabilities: Capabilities | None, spec: SessionSpec | None) -> str:
    """The sentences about the sandbox a code-running tool appends to its description."""
    network = network_sentence(capabilities, spec)
    if spec is None:
        return network
    # Every provider enforces the time limit; memory is left out, because E2B and Runloop take it
    # from their template or resource size rather than from the spec.
    return f"{network} A call is stopped after {spec.limits.timeout:g} seconds."


__all__ = ["network_sentence", "sandbox_facts"]
