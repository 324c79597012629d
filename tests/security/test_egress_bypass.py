"""The egress proxy against each way around a network policy, for real: a sandbox (bubblewrap and
gVisor) whose only way out is the proxy, and upstream servers on the host's loopback that record
what reached them (``egress_servers``). Each test names its bypass class; each fails if the proxy
let the request through (the upstream would have seen it) or the sandbox had another route."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from egress_servers import Upstreams, serve_upstreams

from langchain_sandbox import Limits, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.local import EgressUpstream, LocalProvider, LocalSession

NAMES = ("api.test", "other.test", "private.test", "six.test")

# Through the proxy the session's variables name, for every target: NO_PROXY keeps the sandbox's
# own loopback direct, and an address sent to the proxy is what these tests are about.
FETCH = """
import json, os, urllib.request, urllib.error
os.environ["NO_PROXY"] = os.environ["no_proxy"] = ""
opener = urllib.request.build_opener()
def fetch(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=20) as response:
            return {"status": response.status, "body": response.read().decode()}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode()}
    except urllib.error.URLError as error:  # a refused CONNECT: its status line says why
        text = str(error.reason)
        if not text.startswith("Tunnel connection failed: "):
            raise
        code, _, reason = text.removeprefix("Tunnel connection failed: ").partition(" ")
        return {"status": int(code), "body": reason}
"""


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, NAMES)


@pytest.fixture
async def provider(
    tmp_path: Path, upstreams: Upstreams, isolation: str
) -> AsyncIterator[LocalProvider]:
    hosts = {"api.test": "127.0.0.1", "other.test": "127.0.0.1", "private.test": "127.0.0.1"}
    hosts["six.test"] = "::1"
    made = LocalProvider(
        base_dir=tmp_path / "sandboxes",
        isolation=isolation,
        egress_upstream=EgressUpstream(ca_file=upstreams.ca_file, hosts=hosts),
    )
    try:
        yield made
    finally:
        await made.aclose()


def allowed(upstreams: Upstreams, *hosts: str) -> list[str]:
    """Policy entries for ``hosts`` on both servers' ports."""
    ports = (upstreams.http_port, upstreams.https_port)
    return [f"{host}:{port}" for host in hosts for port in ports]


async def open_session(provider: LocalProvider, policy: NetworkPolicy) -> LocalSession:
    return await provider.create(SessionSpec(network=policy, limits=Limits(timeout=60)))


async def fetch(session: LocalSession, url: str, headers: dict[str, str] | None = None) -> Any:
    result = await session.run_code(FETCH + f"print(json.dumps(fetch({url!r}, {headers!r})))")
    assert result.ok, result.render()
    answer = json.loads(result.stdout)
    answer["notices"] = result.notices
    return answer


def refused(answer: Any, reason: str) -> None:
    assert answer["status"] == 403, answer
    assert reason in answer["body"], answer
    assert any("network policy refused" in notice for notice in answer["notices"]), answer


async def test_allowed_hosts_are_reached_over_http_and_https(
    provider: LocalProvider, upstreams: Upstreams
) -> None:
    policy = NetworkPolicy(allow=allowed(upstreams, "api.test", "127.0.0.1"))
    session = await open_session(provider, policy)
    try:
        plain = await fetch(session, f"http://api.test:{upstreams.http_port}/hello")
        # Verified against the session's own CA, the only one the sandbox trusts.
        secure = await fetch(session, f"https://api.test:{upstreams.https_port}/hello")
    finally:
        await session.close()
    assert plain["status"] == secure["status"] == 200, (plain, secure)
    assert plain["notices"] == secure["notices"] == []
    assert [seen.path for seen in upstreams.seen] == ["/hello", "/hello"]


async def test_direct_ip_literal(provider: LocalProvider, upstreams: Upstreams) -> None:
    session = await open_session(provider, NetworkPolicy(allow=allowed(upstreams, "api.test")))
    try:
        plain = await fetch(session, f"http://127.0.0.1:{upstreams.http_port}/")
        secure = await fetch(session, f"https://127.0.0.1:{upstreams.https_port}/")
    finally:
        await session.close()
    refused(plain, "not allowed by the session's network policy")
    refused(secure, "not allowed by the session's network policy")
    assert upstreams.seen == []


async def test_name_that_resolves_to_loopback(
    provider: LocalProvider, upstreams: Upstreams
) -> None:
    # Allowed by name, but it resolves to 127.0.0.1, which the policy does not allow.
    session = await open_session(provider, NetworkPolicy(allow=allowed(upstreams, "private.test")))
    try:
        plain = await fetch(session, f"http://private.test:{upstreams.http_port}/")
        secure = await fetch(session, f"https://private.test:{upstreams.https_port}/")
    finally:
        await session.close()
    refused(plain, "non-public address")
    refused(secure, "non-public address")
    assert upstreams.seen == []


TUNNEL = """
import socket, ssl
def tunnel(host, port, inner_host):
    with socket.create_connection(("127.0.0.1", 3128), timeout=20) as raw:
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n".encode())
        head = raw.recv(65536).decode()
        if not head.startswith("HTTP/1.1 200"):
            return head
        context = ssl.create_default_context()
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"GET / HTTP/1.1\\r\\nHost: {inner_host}\\r\\nConnection: close\\r\\n\\r\\n".encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
            return data.decode()
"""


async def test_allowed_sni_with_another_host_header(
    provider: LocalProvider, upstreams: Upstreams
) -> None:
    policy = NetworkPolicy(allow=allowed(upstreams, "api.test", "127.0.0.1"))
    session = await open_session(provider, policy)
    port = upstreams.https_port
    try:
        result = await session.run_code(TUNNEL + f"print(tunnel('api.test', {port}, 'other.test'))")
    finally:
        await session.close()
    assert result.stdout.startswith("HTTP/1.1 403"), result.stdout
    assert "is not api.test" in result.stdout
    assert upstreams.seen == []


async def test_connect_to_a_disallowed_port(provider: LocalProvider, upstreams: Upstreams) -> None:
    policy = NetworkPolicy(allow=[f"api.test:{upstreams.https_port}", "127.0.0.1"])
    session = await open_session(provider, policy)
    try:
        # The plain server's port, through a CONNECT tunnel: not in the policy.
        code = TUNNEL + f"print(tunnel('api.test', {upstreams.http_port}, 'api.test'))"
        result = await session.run_code(code)
    finally:
        await session.close()
    assert result.stdout.startswith("HTTP/1.1 403"), result.stdout
    assert f"api.test:{upstreams.http_port} is not allowed" in result.stdout
    assert upstreams.seen == []


async def test_redirect_from_an_allowed_host_to_a_disallowed_one(
    provider: LocalProvider, upstreams: Upstreams
) -> None:
    policy = NetworkPolicy(allow=allowed(upstreams, "api.test", "127.0.0.1"))
    session = await open_session(provider, policy)
    target = f"http://other.test:{upstreams.http_port}/landed"
    try:
        answer = await fetch(session, f"http://api.test:{upstreams.http_port}/redirect?to={target}")
    finally:
        await session.close()
    refused(answer, f"other.test:{upstreams.http_port} is not allowed")
    assert [seen.path for seen in upstreams.seen] == [f"/redirect?to={target}"]


async def test_ipv6(provider: LocalProvider, upstreams: Upstreams) -> None:
    policy = NetworkPolicy(allow=allowed(upstreams, "api.test", "six.test"))
    session = await open_session(provider, policy)
    try:
        literal = await fetch(session, f"http://[::1]:{upstreams.http_port}/")
        named = await fetch(session, f"http://six.test:{upstreams.http_port}/")  # resolves to ::1
    finally:
        await session.close()
    refused(literal, f"[::1]:{upstreams.http_port} is not allowed")
    refused(named, "non-public address")
    assert upstreams.seen == []


async def test_websocket_upgrade(provider: LocalProvider, upstreams: Upstreams) -> None:
    # An upgrade is a request like any other: refused toward a host the policy does not name.
    # Allowed ones are relayed, and h2c refused: test_egress_websocket.py.
    policy = NetworkPolicy(allow=allowed(upstreams, "api.test", "127.0.0.1"))
    session = await open_session(provider, policy)
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    try:
        plain = await fetch(session, f"http://other.test:{upstreams.http_port}/ws", headers)
        secure = await fetch(session, f"https://other.test:{upstreams.https_port}/ws", headers)
    finally:
        await session.close()
    refused(plain, f"other.test:{upstreams.http_port} is not allowed")
    refused(secure, f"other.test:{upstreams.https_port} is not allowed")
    assert upstreams.seen == []


async def test_raw_socket_that_ignores_the_proxy(
    provider: LocalProvider, upstreams: Upstreams, isolation: str
) -> None:
    policy = NetworkPolicy(allow=allowed(upstreams, "api.test", "127.0.0.1"))
    session = await open_session(provider, policy)
    code = f"""
import errno, socket
for address in [("127.0.0.1", {upstreams.http_port}), ("10.255.255.1", 80), ("::1", {upstreams.http_port})]:
    try:
        socket.create_connection(address, timeout=5).close()
        print("connected", address)
    except OSError as error:
        print("failed", errno.errorcode.get(error.errno, error.errno))
"""
    try:
        result = await session.run_code(code)
    finally:
        await session.close()
    assert "connected" not in result.stdout, result.stdout
    # The sandbox's own loopback (nothing listens there), and no route anywhere else (gVisor's
    # network stack names that with the other errno).
    unreachable = "ENETUNREACH" if isolation == "bubblewrap" else "EHOSTUNREACH"
    assert result.stdout.split() == [
        "failed",
        "ECONNREFUSED",
        "failed",
        unreachable,
        "failed",
        "ECONNREFUSED",
    ], result.stdout
    assert upstreams.seen == []


async def test_secret_requested_on_a_host_it_is_not_bound_to(
    provider: LocalProvider, upstreams: Upstreams
) -> None:
    secret = Secret(
        "API_KEY", "s3cr3t-value-for-the-test", hosts=[f"api.test:{upstreams.https_port}"]
    )
    policy = NetworkPolicy(
        allow=allowed(upstreams, "api.test", "other.test", "127.0.0.1"), secrets=[secret]
    )
    session = await open_session(provider, policy)
    code = """
import os
headers = {"Authorization": "Bearer " + os.environ["API_KEY"]}
for url in URLS:
    print(json.dumps(fetch(url, headers)))
"""
    urls = [
        f"https://api.test:{upstreams.https_port}/bound",
        f"https://other.test:{upstreams.https_port}/elsewhere",
        f"http://api.test:{upstreams.http_port}/plain",  # the bound host on another port
    ]
    try:
        result = await session.run_code(FETCH + f"URLS = {urls!r}\n" + code)
    finally:
        await session.close()
    assert result.ok, result.render()
    received = {seen.path: seen.headers["authorization"] for seen in upstreams.seen}
    assert received == {
        "/bound": "Bearer s3cr3t-value-for-the-test",
        "/elsewhere": f"Bearer {secret.placeholder}",
        "/plain": f"Bearer {secret.placeholder}",
    }
    # The bound host echoed the header back: that is the only way the value reaches the sandbox,
    # so a secret must be bound only to hosts that do not reflect it (docs/network.md).
