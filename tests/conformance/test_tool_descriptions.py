"""What the code-running tools tell the model about their sandbox is what the sandbox does, on
every provider: the network sentence is checked against a real connection attempt from inside a
sandbox made with the same spec; where the provider does not control the network (Runloop), the
description says the network is reachable, whatever the spec asked for, and it is."""

from __future__ import annotations

import pytest
from network_probe import LoopbackListener

from langchain_sandbox.providers.base import Limits, Provider, SessionSpec
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.tools import SandboxExecTool, SandboxShellTool, SandboxToolkit


async def _reaches_the_host(
    provider: Provider, spec: SessionSpec, listener: LoopbackListener
) -> bool:
    """Whether code in a sandbox made with ``spec`` connects to a port on the host."""
    async with await provider.create(spec) as session:
        result = await session.run_code(listener.probe)
    reached = listener.reached()
    assert result.stdout.startswith("connected" if reached else "refused"), result.render()
    return reached


@pytest.mark.parametrize("network", [False, True])
async def test_descriptions_state_the_real_network_and_time_limit(
    provider: Provider, network: bool, loopback_listener: LoopbackListener
) -> None:
    spec = SessionSpec(network=network, limits=Limits(timeout=42))
    runtime = SandboxRuntime(provider, spec=spec, idle_ttl=None)
    try:
        tools = {t.name: t for t in SandboxToolkit(runtime=runtime).get_tools()}
        descriptions = [tools["sandbox_exec"].description, tools["sandbox_shell"].description]
    finally:
        await runtime.aclose()

    for description in descriptions:
        assert "A call is stopped after 42 seconds." in description
    reachable = await _reaches_the_host(provider, spec, loopback_listener)
    if not provider.capabilities.network_control:
        # Runloop: a devbox has the network whatever the spec says, and the model must not be
        # told otherwise.
        assert reachable
        for description in descriptions:
            assert "no network access" not in description
            assert "The network is reachable" in description
        return
    assert reachable == network
    for description in descriptions:
        if reachable:
            assert "Network access is enabled." in description
        else:
            assert "There is no network access." in description


def test_a_tool_that_finds_its_runtime_per_call_claims_nothing_about_the_network() -> None:
    for tool in (SandboxExecTool(), SandboxShellTool()):
        assert "network access" not in tool.description.lower()
        assert "depends on how the sandbox was set up" in tool.description
    assert SandboxExecTool(description="Run Python.").description == "Run Python."
