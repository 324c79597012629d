"""What the code-running tools tell the model about their sandbox is what the sandbox does, on
every provider: where the provider controls the network, the network sentence is checked against a
real connection attempt from inside a sandbox made with the same spec; where it does not
(Runloop), the description says the network is reachable, whatever the spec asked for."""

from __future__ import annotations

import socket
import threading

import pytest

from langchain_sandbox.providers.base import Limits, Provider, SessionSpec
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.tools import SandboxExecTool, SandboxShellTool, SandboxToolkit

_PROBE = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\n"
    "    print('connected')\n"
    "except OSError as exc:\n"
    "    print('refused', type(exc).__name__)\n"
)


async def _reaches_the_host(provider: Provider, spec: SessionSpec) -> bool:
    """Whether code in a sandbox made with ``spec`` connects to a server on the host."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    accepted: list[bool] = []

    def accept() -> None:
        try:
            server.accept()[0].close()
            accepted.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        async with await provider.create(spec) as session:
            port = server.getsockname()[1]
            result = await session.run_code(_PROBE.format(port=port))
    finally:
        server.close()
        thread.join(timeout=15)
    return result.stdout.startswith("connected")


@pytest.mark.parametrize("network", [False, True])
async def test_descriptions_state_the_real_network_and_time_limit(
    provider: Provider, network: bool
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
    if not provider.capabilities.network_control:
        # Runloop: a devbox has the network whatever the spec says (its emulator cannot show
        # that, having no network to give), and the model must not be told otherwise.
        for description in descriptions:
            assert "no network access" not in description
            assert "The network is reachable" in description
        return
    reachable = await _reaches_the_host(provider, spec)
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
