"""WebSockets through the egress proxy, for real on both isolation levels: the ``websockets``
client in the sandbox, with nothing but the session's proxy variables, reaches echo servers on
the host's loopback (``egress_servers``) over ``ws://`` (plain HTTP inside a ``CONNECT`` tunnel)
and ``wss://`` (inside the proxy's TLS interception). The upgrade is checked like any request:
the policy, the ``Host`` header, secrets swapped toward their own hosts only; other upgrades
(h2c) are refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from egress_servers import Upstreams, egress_session, serve_upstreams

from langchain_sandbox import Limits, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.local import EgressUpstream, LocalSession

SECRET = Secret("API_KEY", "s3cr3t-websocket-value", hosts=["api.test"])

ECHO = """
import json, os
from websockets.exceptions import InvalidProxyStatus, InvalidStatus
from websockets.sync.client import connect
def echo(url):
    headers = {"Authorization": "Bearer " + os.environ["API_KEY"]}
    try:
        with connect(url, additional_headers=headers, open_timeout=30) as websocket:
            websocket.send("hello")
            small = websocket.recv(timeout=30)
            # Larger than a relay's buffer each way: it must flow, not stall or be cut.
            big = "x" * 600_000
            websocket.send(big)
            return {"status": 101, "echo": small, "big": websocket.recv(timeout=60) == big}
    except (InvalidProxyStatus, InvalidStatus) as error:
        return {"status": error.response.status_code, "body": error.response.body.decode()}
for url in URLS:
    print(json.dumps(echo(url)))
"""

# Raw requests through the proxy: a tunnel that carries plain HTTP, and absolute-form requests.
RAW = """
import json, socket
def exchange(data, connect=None):
    with socket.create_connection(("127.0.0.1", 3128), timeout=30) as raw:
        if connect:
            raw.sendall(f"CONNECT {connect} HTTP/1.1\\r\\nHost: {connect}\\r\\n\\r\\n".encode())
            head = raw.recv(65536).decode()
            if not head.startswith("HTTP/1.1 200"):
                return head
        raw.sendall(data.encode())
        return raw.recv(65536).decode()
def upgrade(target, host, protocol="websocket"):
    return (f"GET {target} HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: Upgrade\\r\\n"
            f"Upgrade: {protocol}\\r\\nSec-WebSocket-Version: 13\\r\\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\\r\\n\\r\\n")
"""


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, ("api.test", "other.test", "denied.test"))


@pytest.fixture
async def session(
    tmp_path: Path, upstreams: Upstreams, isolation: str
) -> AsyncIterator[LocalSession]:
    names = ("api.test", "other.test", "denied.test")
    upstream = EgressUpstream(ca_file=upstreams.ca_file, hosts=dict.fromkeys(names, "127.0.0.1"))
    # Both names resolve to the host's loopback, which must be allowed too; denied.test is not.
    ports = (upstreams.ws_port, upstreams.wss_port, upstreams.http_port)
    allow = [f"{host}:{port}" for host in ("api.test", "other.test", "127.0.0.1") for port in ports]
    secret = Secret(SECRET.name, SECRET.value, hosts=[f"api.test:{upstreams.wss_port}"])
    policy = NetworkPolicy(allow=allow, secrets=[secret])
    # "host": the application's own site-packages, where websockets is installed.
    spec = SessionSpec(template="host", network=policy, limits=Limits(timeout=120))
    async with egress_session(tmp_path / "sandboxes", isolation, upstream, spec) as made:
        yield made


async def echoes(session: LocalSession, urls: list[str]) -> tuple[list[Any], list[str]]:
    result = await session.run_code(f"URLS = {urls!r}\n" + ECHO)
    assert result.ok, result.render()
    return [json.loads(line) for line in result.stdout.splitlines()], result.notices


async def test_allowed_websockets_are_relayed_and_secrets_go_only_to_their_host(
    session: LocalSession, upstreams: Upstreams
) -> None:
    urls = [
        f"wss://api.test:{upstreams.wss_port}/bound",
        f"wss://other.test:{upstreams.wss_port}/elsewhere",
        f"ws://api.test:{upstreams.ws_port}/plain",  # the bound host on another port
    ]
    answers, notices = await echoes(session, urls)
    assert answers == [{"status": 101, "echo": "hello", "big": True}] * 3, answers
    assert notices == []
    received = {seen.path: seen.headers["authorization"] for seen in upstreams.seen}
    assert received == {
        "/bound": f"Bearer {SECRET.value}",
        "/elsewhere": f"Bearer {SECRET.placeholder}",
        "/plain": f"Bearer {SECRET.placeholder}",
    }


async def test_upgrade_to_a_disallowed_host_is_refused(
    session: LocalSession, upstreams: Upstreams
) -> None:
    answers, notices = await echoes(
        session,
        [
            f"wss://denied.test:{upstreams.wss_port}/",
            f"ws://denied.test:{upstreams.ws_port}/",
        ],
    )
    assert [answer["status"] for answer in answers] == [403, 403], answers
    assert any("network policy refused 2 requests" in notice for notice in notices), notices
    assert upstreams.seen == []


async def test_upgrade_checks_the_host_and_refuses_h2c(
    session: LocalSession, upstreams: Upstreams
) -> None:
    ws, http = upstreams.ws_port, upstreams.http_port
    code = RAW + (
        # A plain-HTTP tunnel to an allowed host whose upgrade names another host.
        f"print(json.dumps(exchange(upgrade('/', 'denied.test:{ws}'), connect='api.test:{ws}')))\n"
        # The same upgrade as an absolute-form request, to the allowed host itself.
        f"print(json.dumps(exchange(upgrade('http://api.test:{ws}/direct', 'api.test:{ws}'))))\n"
        f"print(json.dumps(exchange(upgrade('http://api.test:{http}/', 'api.test:{http}', 'h2c'))))\n"
    )
    result = await session.run_code(code)
    assert result.ok, result.render()
    other_host, direct, h2c = (json.loads(line) for line in result.stdout.splitlines())
    assert other_host.startswith("HTTP/1.1 403"), other_host
    assert f"'denied.test:{ws}' is not api.test:{ws}" in other_host
    assert direct.startswith("HTTP/1.1 101"), direct
    assert "sec-websocket-accept" in direct.lower()
    assert h2c.startswith("HTTP/1.1 403"), h2c
    assert "(h2c) are refused" in h2c
    assert [seen.path for seen in upstreams.seen] == ["/direct"]
