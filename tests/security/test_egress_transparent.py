"""The transparent path, for clients that ignore the proxy variables: a raw socket that resolves
a name and speaks HTTP or TLS to it reaches an allowed host through the egress proxy, under the
same policy, on both isolation levels (bubblewrap's listeners are the host's, in the sandbox's
namespace; gVisor's are its relay's, inside the Sentry). Ports other than 80 and 443 find no
listener, and the code holds no capability that could take those ports or add an address.
Upstream servers on the host's loopback (``egress_servers``)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from egress_servers import Upstreams, egress_session, serve_upstreams

from langchain_sandbox import Limits, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.local import EgressUpstream, LocalSession
from langchain_sandbox.providers.local._egress_proxy import prepare_egress
from langchain_sandbox.providers.local._egress_transparent import (
    GVISOR_STAND_IN,
    RELAYED,
    STAND_IN,
    dns_answer,
)

SECRET = Secret("API_KEY", "s3cr3t-transparent-value", hosts=["api.test"])

# No proxy variable is read: the code resolves names and opens sockets itself.
RAW = """
import json, os, socket, ssl
for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
    del os.environ[name]
def get(host, port, path, tls):
    try:
        address = socket.gethostbyname(host)
        raw = socket.create_connection((address, port), timeout=20)
    except OSError as error:
        return {"error": type(error).__name__}
    with raw:
        stream = ssl.create_default_context().wrap_socket(raw, server_hostname=host) if tls else raw
        headers = f"Host: {host}\\r\\nAuthorization: Bearer {os.environ['API_KEY']}\\r\\n"
        stream.sendall(f"GET {path} HTTP/1.1\\r\\n{headers}Connection: close\\r\\n\\r\\n".encode())
        data = b""
        while chunk := stream.recv(65536):
            data += chunk
    head, _, body = data.decode().partition("\\r\\n\\r\\n")
    return {"address": address, "status": int(head.split()[1]), "body": body}
for call in CALLS:
    print(json.dumps(get(*call)))
"""


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, ("api.test", "other.test", "denied.test"))


@pytest.fixture
async def session(
    tmp_path: Path, upstreams: Upstreams, isolation: str
) -> AsyncIterator[LocalSession]:
    # The transparent path listens on ports 80 and 443: the proxy sends those to the servers'.
    hosts = {
        "api.test": f"127.0.0.1:{upstreams.https_port}",
        "other.test": f"127.0.0.1:{upstreams.http_port}",
        "denied.test": f"127.0.0.1:{upstreams.http_port}",
    }
    allow = [
        "api.test:443",
        "other.test:80",
        f"127.0.0.1:{upstreams.https_port}",
        f"127.0.0.1:{upstreams.http_port}",
    ]
    policy = NetworkPolicy(allow=allow, secrets=[SECRET])
    spec = SessionSpec(network=policy, limits=Limits(timeout=60))
    upstream = EgressUpstream(ca_file=upstreams.ca_file, hosts=hosts)
    async with egress_session(tmp_path / "sandboxes", isolation, upstream, spec) as made:
        yield made


CALLS = [
    ("api.test", 443, "/secure", True),
    ("other.test", 80, "/plain", False),
    ("denied.test", 80, "/denied", False),
    ("api.test", 8443, "/port", True),  # an allowed host, a port the path does not listen on
]


def stand_in(isolation: str) -> str:
    return STAND_IN if isolation == "bubblewrap" else GVISOR_STAND_IN


async def test_clients_that_ignore_the_proxy(
    session: LocalSession, upstreams: Upstreams, isolation: str
) -> None:
    result = await session.run_code(f"CALLS = {CALLS!r}\n" + RAW)
    assert result.ok, result.render()
    secure, plain, denied, port = (json.loads(line) for line in result.stdout.splitlines())
    assert secure["address"] == plain["address"] == stand_in(isolation), result.stdout
    assert (secure["status"], plain["status"]) == (200, 200), result.stdout
    assert denied["status"] == 403, denied
    assert "denied.test:80 is not allowed" in denied["body"]
    assert port == {"error": "ConnectionRefusedError"}, port
    assert any("network policy refused 1 request" in notice for notice in result.notices)
    received = {seen.path: seen.headers["authorization"] for seen in upstreams.seen}
    # The secret's value toward its own host only, as through the proxy variables.
    assert received == {
        "/secure": f"Bearer {SECRET.value}",
        "/plain": f"Bearer {SECRET.placeholder}",
    }


NAMES_AND_CAPABILITIES = """
import json, socket
status = dict(line.split(":\t") for line in open("/proc/self/status").read().splitlines())
try:
    v6 = socket.getaddrinfo("api.test", 443, socket.AF_INET6)
except socket.gaierror as error:
    v6 = type(error).__name__
print(json.dumps({
    "names": [socket.gethostbyname(n) for n in ("api.test", "anything.example", "localhost")],
    "v6": v6,
    "capabilities": {k: int(v, 16) for k, v in status.items() if k.startswith("Cap")},
}))
"""


async def test_names_resolve_to_the_stand_in_and_the_code_holds_no_capability(
    session: LocalSession, isolation: str
) -> None:
    result = await session.run_code(NAMES_AND_CAPABILITIES)
    assert result.ok, result.render()
    seen = json.loads(result.stdout)
    # The sandbox's DNS responder: every name's A record, no AAAA; localhost stays the hosts file's.
    assert seen["names"] == [stand_in(isolation), stand_in(isolation), "127.0.0.1"], seen
    assert seen["v6"] == "gaierror", seen
    # Whatever binds the transparent path's ports (the host's helper, gVisor's relay), the code
    # holds no capability: it cannot take them, nor add an address or a route.
    capabilities = seen["capabilities"]
    assert {"CapEff", "CapPrm", "CapInh"} <= capabilities.keys(), capabilities
    assert {kind: capabilities.get(kind, 0) for kind in ("CapEff", "CapPrm", "CapAmb")} == {
        "CapEff": 0,
        "CapPrm": 0,
        "CapAmb": 0,
    }, capabilities


def query(name: str, kind: int) -> bytes:
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return bytes.fromhex("abcd01000001000000000000") + labels + b"\0" + kind.to_bytes(2) + b"\0\1"


def test_the_dns_responder_answers_names_with_the_stand_in_and_nothing_else() -> None:
    a_record = dns_answer(query("api.test", 1), STAND_IN)
    assert a_record is not None
    assert a_record[:2] == b"\xab\xcd"
    assert a_record[6:8] == b"\0\1"  # one answer
    assert a_record.endswith(socket.inet_aton(STAND_IN))
    aaaa = dns_answer(query("api.test", 28), STAND_IN)
    assert aaaa is not None
    assert aaaa[6:8] == b"\0\0"  # no IPv6 address
    # Whatever the sandbox sends, the responder answers or ignores it: it never raises.
    rng = random.Random(24)
    for _ in range(5000):
        size = rng.randrange(0, 64)
        noise = bytes(rng.randrange(256) for _ in range(size))
        dns_answer(noise, STAND_IN)
        dns_answer(query("x.test", 1)[: rng.randrange(1, 30)] + noise, STAND_IN)


async def test_the_proxys_socket_relays_only_the_transparent_paths_ports(tmp_path: Path) -> None:
    """gVisor's relay reaches the proxy through its socket, which the sandbox's code can reach
    too: what it may write there is what its relay writes, under the same policy (a port the
    path does not listen on gets no answer; a host the policy does not name gets a 403)."""
    proxy, egress_dir = prepare_egress(str(tmp_path), NetworkPolicy(allow=["other.test"]), None)
    # (By the directory's descriptor: a unix socket's path is at most 107 bytes.)
    directory = os.open(egress_dir, os.O_PATH)
    path = f"/proc/self/fd/{directory}/{os.path.basename(proxy.socket_path)}"
    try:
        async with proxy.serving():
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(RELAYED + (22).to_bytes(2, "big"))
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(RELAYED + (80).to_bytes(2, "big"))
            assert await asyncio.wait_for(reader.readexactly(1), 10) == RELAYED
            writer.write(b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
            answer = (await asyncio.wait_for(reader.read(), 10)).decode()
            writer.close()
    finally:
        os.close(directory)
    assert answer.startswith("HTTP/1.1 403 "), answer
    assert "denied.test:80 is not allowed" in answer
    assert proxy.denied == ["denied.test:80 is not allowed by the session's network policy"]
