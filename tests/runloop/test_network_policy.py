"""A NetworkPolicy on Runloop, through the real SDK against the emulator: the policy becomes one of
the account's network policies (host names, IPv4 addresses with their ports, everything else off)
named in the devbox's launch parameters and reused by later sessions with the same rules; the
emulated devbox is held to it (an allowed host is reached over HTTPS, any other gets a 403 with
the reason and never sees the request); what Runloop cannot enforce (secrets, a name with a port,
IPv6) is refused before any request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from egress_servers import Upstreams, serve_upstreams

from langchain_sandbox import ConfigurationError, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.local import EgressUpstream
from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

from .keys import FAKE_KEY


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, ("api.test", "other.test"))


@pytest.fixture
async def emulator(upstreams: Upstreams) -> AsyncIterator[RunloopEmulator]:
    # api.test's port 443 is the HTTPS test server (a stand-in the emulator's machine may reach).
    hosts = {"api.test": f"127.0.0.1:{upstreams.https_port}", "other.test": "127.0.0.1"}
    upstream = EgressUpstream(ca_file=upstreams.ca_file, hosts=hosts)
    async with RunloopEmulator(api_key=FAKE_KEY, egress_upstream=upstream) as running:
        yield running


def policy_requests(emulator: RunloopEmulator) -> list[tuple[str, int, object]]:
    return [
        (r.method, r.status, r.json() if r.method == "POST" else r.query.get("name"))
        for r in emulator.requests
        if r.path == "/v1/network-policies"
    ]


async def test_a_policy_becomes_a_network_policy_and_the_devbox_is_held_to_it(
    provider: RunloopProvider, emulator: RunloopEmulator, upstreams: Upstreams
) -> None:
    policy = NetworkPolicy(allow=["api.test", "*.data.test", "203.0.113.7:8443"])
    code = f"""
import json, urllib.request, urllib.error
with urllib.request.urlopen("https://api.test/allowed", timeout=20) as response:
    allowed = [response.status, json.loads(response.read())["path"]]
try:
    urllib.request.urlopen("http://other.test:{upstreams.http_port}/", timeout=20)
except urllib.error.HTTPError as error:
    denied = [error.code, error.read().decode()]
print(json.dumps([allowed, denied]))
"""
    first = await provider.create(SessionSpec(network=policy))
    try:
        result = await first.run_code(code)
    finally:
        await first.close()
    second = await provider.create(SessionSpec(network=policy))
    await second.close()
    assert result.ok, result.render()
    allowed, (status, body) = json.loads(result.stdout)
    assert allowed == [200, "/allowed"]  # over HTTPS, trusting the devbox's session CA
    assert status == 403
    assert f"other.test:{upstreams.http_port} is not allowed" in body
    assert [seen.path for seen in upstreams.seen] == ["/allowed"]
    requests = policy_requests(emulator)
    # One policy for both sessions: listed by its content's name, created once.
    assert [(method, status) for method, status, _ in requests] == [
        ("GET", 200),
        ("POST", 200),
        ("GET", 200),
    ]
    created = requests[1][2]
    assert isinstance(created, dict)
    assert created["name"].startswith("langchain-sandbox-")
    assert created["allowed_hostnames"] == ["api.test", "*.data.test"]
    assert created["allowed_cidrs"] == [{"cidr": "203.0.113.7/32", "ports": [{"port": 8443}]}]
    assert created["allow_all"] is False
    launches = [
        r.json()["launch_parameters"]
        for r in emulator.requests
        if r.method == "POST" and r.path.startswith("/v1/devboxes/create")
    ]
    assert len(launches) == 2
    assert launches[0]["network_policy_id"] == launches[1]["network_policy_id"]


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (
            NetworkPolicy(allow=["api.test"], secrets=[Secret("KEY", "v4lue", ["api.test"])]),
            "cannot enforce the NetworkPolicy's secrets (KEY)",
        ),
        (NetworkPolicy(allow=["api.test:8443"]), "'api.test:8443'"),
        (NetworkPolicy(allow=["[2001:db8::1]:443"]), "'[2001:db8::1]:443'"),
    ],
    ids=["secret", "named-port", "ipv6"],
)
async def test_what_runloop_cannot_enforce_is_refused_before_any_request(
    provider: RunloopProvider, emulator: RunloopEmulator, policy: NetworkPolicy, reason: str
) -> None:
    with pytest.raises(ConfigurationError, match="Runloop cannot enforce") as caught:
        await provider.create(SessionSpec(network=policy))
    assert reason in str(caught.value)
    assert "v4lue" not in str(caught.value)
    assert emulator.requests == []
