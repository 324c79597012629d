"""A NetworkPolicy on E2B and on Runloop, through the real SDKs against the emulators.

Both hold the sandbox to the policy: its code reaches an allowed host over HTTPS (trusting the
sandbox's session CA) and gets a 403 with the reason toward any other host, which never sees the
request; and what the provider cannot enforce is refused before any request. What goes over the
wire differs:

* E2B: the policy's host names go out as ``allow_out`` with everything else in ``deny_out``; the
  record keeps the policy, so an attach rebuilds it;
* Runloop: the policy becomes one of the account's network policies (host names, IPv4 addresses
  with their ports, everything else off), named in the devbox's launch parameters and reused by
  later sessions with the same rules.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from egress_servers import Upstreams, serve_upstreams
from emulated_providers import Emulator, emulated_provider

from langchain_sandbox import ConfigurationError, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.base import Provider
from langchain_sandbox.providers.local import EgressUpstream

_LABELS = {"e2b": "E2B", "runloop": "Runloop"}


def _settings(name: str, upstream: EgressUpstream) -> tuple[dict[str, Any], dict[str, Any]]:
    """The emulator's and the provider's options: E2B's emulator checks no key (what these
    tests look at is the network), Runloop's its own."""
    if name == "e2b":
        emulator = {"egress_upstream": upstream, "api_key": None}
        return emulator, {"api_key": "e2b_fake_0123456789abcdefDISTINCTIVE", "retry_deadline": 20}
    emulator = {"egress_upstream": upstream, "api_key": "rl-test-key-5f1e0c9a7d3b-never-leak"}
    return emulator, {"retry_deadline": 10.0}


@pytest.fixture(autouse=True)
def _no_host_provider_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulators only: the host's keys and URLs must not be picked up."""
    for name in ("RUNLOOP_API_KEY", "RUNLOOP_BASE_URL", "RUNLOOP_CUSTOM_HEADERS", "E2B_DOMAIN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, ("api.test", "other.test"))


@pytest.fixture
def upstream(upstreams: Upstreams) -> EgressUpstream:
    # api.test's port 443 is the HTTPS test server (a stand-in the emulator's machine may reach).
    hosts = {"api.test": f"127.0.0.1:{upstreams.https_port}", "other.test": "127.0.0.1"}
    return EgressUpstream(ca_file=upstreams.ca_file, hosts=hosts)


@pytest.fixture(params=["e2b", "runloop"])
async def emulated(
    request: pytest.FixtureRequest, upstream: EgressUpstream
) -> AsyncIterator[tuple[Emulator, Provider]]:
    emulator, options = _settings(request.param, upstream)
    async with emulated_provider(request.param, emulator=emulator, **options) as pair:
        yield pair


def _probe(upstreams: Upstreams, *, raw: bool) -> str:
    """Code that prints what the sandbox reached: the allowed host, a denied one, and (with
    ``raw``) a direct connection that bypasses the proxy."""
    code = f"""
import json, socket, urllib.request, urllib.error
with urllib.request.urlopen("https://api.test/allowed", timeout=20) as response:
    allowed = [response.status, json.loads(response.read())["path"]]
try:
    urllib.request.urlopen("http://other.test:{upstreams.http_port}/", timeout=20)
except urllib.error.HTTPError as error:
    denied = [error.code, error.read().decode()]
"""
    if raw:
        code += f"""try:
    socket.create_connection(("127.0.0.1", {upstreams.http_port}), timeout=5)
    raw = "connected"
except OSError as error:
    raw = type(error).__name__
print(json.dumps([allowed, denied, raw]))
"""
    else:
        code += "print(json.dumps([allowed, denied]))\n"
    return code


def _assert_held_to_it(stdout: str, upstreams: Upstreams) -> list[Any]:
    allowed, (status, body), *rest = json.loads(stdout)
    assert allowed == [200, "/allowed"]  # over HTTPS, trusting the sandbox's session CA
    assert status == 403
    assert f"other.test:{upstreams.http_port} is not allowed" in body
    assert [seen.path for seen in upstreams.seen] == ["/allowed"]
    return rest


async def test_a_policy_reaches_the_sandbox_and_the_sandbox_is_held_to_it(
    emulated: tuple[Any, Provider], upstreams: Upstreams
) -> None:
    emulator, provider = emulated
    if provider.name == "e2b":
        await _e2b_allow_out(emulator, provider, upstreams)
    else:
        await _runloop_network_policy(emulator, provider, upstreams)


async def _e2b_allow_out(emulator: Any, provider: Provider, upstreams: Upstreams) -> None:
    policy = NetworkPolicy(allow=["api.test", "*.data.test"])
    session = await provider.create(SessionSpec(network=policy))
    try:
        result = await session.run_code(_probe(upstreams, raw=True))
        record = json.dumps(session.record)
        attached = await provider.attach(json.loads(record))
        assert attached is not None
        assert attached.spec.network == policy  # rebuilt from the record, as a resume would
    finally:
        await session.close()
    assert result.ok, result.render()
    (raw,) = _assert_held_to_it(result.stdout, upstreams)
    assert raw != "connected"
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


async def _runloop_network_policy(emulator: Any, provider: Provider, upstreams: Upstreams) -> None:
    policy = NetworkPolicy(allow=["api.test", "*.data.test", "203.0.113.7:8443"])
    first = await provider.create(SessionSpec(network=policy))
    try:
        result = await first.run_code(_probe(upstreams, raw=False))
    finally:
        await first.close()
    second = await provider.create(SessionSpec(network=policy))
    await second.close()
    assert result.ok, result.render()
    assert _assert_held_to_it(result.stdout, upstreams) == []
    requests = [
        (r.method, r.status, r.json() if r.method == "POST" else r.query.get("name"))
        for r in emulator.requests
        if r.path == "/v1/network-policies"
    ]
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


_SECRET = NetworkPolicy(allow=["api.test"], secrets=[Secret("KEY", "v4lue", ["api.test"])])


@pytest.mark.parametrize(
    ("name", "policy", "reason"),
    [
        ("e2b", _SECRET, "cannot enforce the NetworkPolicy's secrets (KEY)"),
        ("e2b", NetworkPolicy(allow=["api.test:8443"]), "'api.test:8443'"),
        ("e2b", NetworkPolicy(allow=["203.0.113.7"]), "'203.0.113.7'"),
        ("runloop", _SECRET, "cannot enforce the NetworkPolicy's secrets (KEY)"),
        ("runloop", NetworkPolicy(allow=["api.test:8443"]), "'api.test:8443'"),
        ("runloop", NetworkPolicy(allow=["[2001:db8::1]:443"]), "'[2001:db8::1]:443'"),
    ],
    ids=[
        "e2b-secret",
        "e2b-port",
        "e2b-address",
        "runloop-secret",
        "runloop-named-port",
        "runloop-ipv6",
    ],
)
async def test_what_the_provider_cannot_enforce_is_refused_before_any_request(
    name: str, policy: NetworkPolicy, reason: str, upstream: EgressUpstream
) -> None:
    emulator, options = _settings(name, upstream)
    async with emulated_provider(name, emulator=emulator, **options) as (running, made):
        with pytest.raises(ConfigurationError, match=f"{_LABELS[name]} cannot enforce") as caught:
            await made.create(SessionSpec(network=policy))
    assert reason in str(caught.value)
    assert "v4lue" not in str(caught.value)
    assert running.requests == []


async def test_network_settings_the_e2b_emulator_cannot_enforce_are_a_400(
    upstream: EgressUpstream,
) -> None:
    """The emulator never runs a sandbox with more network than it was asked for."""
    from e2b import AsyncSandbox
    from e2b.exceptions import InvalidArgumentException, SandboxException

    emulator = {"egress_upstream": upstream, "api_key": None}
    async with emulated_provider("e2b", emulator=emulator) as (running, _):
        with pytest.raises((InvalidArgumentException, SandboxException), match="does not enforce"):
            await AsyncSandbox.create(
                api_key="e2b_any",
                api_url=running.url,
                network={"allow_out": ["api.test"], "deny_out": ["0.0.0.0/0"], "dns_servers": []},
            )
        assert [r.status for r in running.requests] == [400]
