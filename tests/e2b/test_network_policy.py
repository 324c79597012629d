"""A NetworkPolicy on E2B, through the real SDK against the emulator: the policy's host names go
out as ``allow_out`` with everything else in ``deny_out``, the emulated sandbox enforces that
(its code reaches an allowed host over HTTPS and gets a 403 with the reason toward any other
host, which never sees the request), and what E2B cannot enforce (secrets, ports, addresses) is refused before any request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from egress_servers import Upstreams, serve_upstreams

from langchain_sandbox import ConfigurationError, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.providers.local import EgressUpstream
from langchain_sandbox.testing.e2b_emulator import E2BEmulator


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, ("api.test", "other.test"))


@pytest.fixture
def emulator(upstreams: Upstreams) -> Iterator[E2BEmulator]:
    # api.test's port 443 is the HTTPS test server (a stand-in the emulator's machine may reach).
    hosts = {"api.test": f"127.0.0.1:{upstreams.https_port}", "other.test": "127.0.0.1"}
    upstream = EgressUpstream(ca_file=upstreams.ca_file, hosts=hosts)
    with E2BEmulator(egress_upstream=upstream) as running:
        yield running


async def test_a_policy_becomes_allow_out_and_the_sandbox_is_held_to_it(
    provider: E2BProvider, emulator: E2BEmulator, upstreams: Upstreams
) -> None:
    policy = NetworkPolicy(allow=["api.test", "*.data.test"])
    session = await provider.create(SessionSpec(network=policy))
    code = f"""
import json, socket, urllib.request, urllib.error
with urllib.request.urlopen("https://api.test/allowed", timeout=20) as response:
    allowed = [response.status, json.loads(response.read())["path"]]
try:
    urllib.request.urlopen("http://other.test:{upstreams.http_port}/", timeout=20)
except urllib.error.HTTPError as error:
    denied = [error.code, error.read().decode()]
try:
    socket.create_connection(("127.0.0.1", {upstreams.http_port}), timeout=5)
    raw = "connected"
except OSError as error:
    raw = type(error).__name__
print(json.dumps([allowed, denied, raw]))
"""
    try:
        result = await session.run_code(code)
        record = json.dumps(session.record)
        attached = await provider.attach(json.loads(record))
        assert attached is not None
        assert attached.spec.network == policy  # rebuilt from the record, as a resume would
    finally:
        await session.close()
    assert result.ok, result.render()
    allowed, (status, body), raw = json.loads(result.stdout)
    assert allowed == [200, "/allowed"]  # over HTTPS, trusting the sandbox's session CA
    assert status == 403
    assert f"other.test:{upstreams.http_port} is not allowed" in body
    assert raw != "connected"
    assert [seen.path for seen in upstreams.seen] == ["/allowed"]
    creates = [r for r in emulator.requests if r.route == "POST /v2/sandboxes"]
    assert creates[0].body is not None
    assert creates[0].body["network"] == {
        "allowOut": ["api.test", "*.data.test"],
        "denyOut": ["0.0.0.0/0"],
    }
    assert "allow_internet_access" not in creates[0].body
    assert json.loads(record)["state"]["network"] == {
        "allow": ["api.test", "*.data.test"],
        "secrets": [],
    }


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (
            NetworkPolicy(allow=["api.test"], secrets=[Secret("KEY", "v4lue", ["api.test"])]),
            "cannot enforce the NetworkPolicy's secrets (KEY)",
        ),
        (NetworkPolicy(allow=["api.test:8443"]), "'api.test:8443'"),
        (NetworkPolicy(allow=["203.0.113.7"]), "'203.0.113.7'"),
    ],
    ids=["secret", "port", "address"],
)
async def test_what_e2b_cannot_enforce_is_refused_before_any_request(
    provider: E2BProvider, emulator: E2BEmulator, policy: NetworkPolicy, reason: str
) -> None:
    with pytest.raises(ConfigurationError, match="E2B cannot enforce") as caught:
        await provider.create(SessionSpec(network=policy))
    assert reason in str(caught.value)
    assert "v4lue" not in str(caught.value)
    assert emulator.requests == []


async def test_network_settings_the_emulator_cannot_enforce_are_a_400(
    emulator: E2BEmulator,
) -> None:
    """The emulator never runs a sandbox with more network than it was asked for."""
    from e2b import AsyncSandbox
    from e2b.exceptions import InvalidArgumentException, SandboxException

    with pytest.raises((InvalidArgumentException, SandboxException), match="does not enforce"):
        await AsyncSandbox.create(
            api_key="e2b_any",
            api_url=emulator.url,
            network={"allow_out": ["api.test"], "deny_out": ["0.0.0.0/0"], "dns_servers": []},
        )
    assert [r.status for r in emulator.requests] == [400]
