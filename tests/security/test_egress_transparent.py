"""The transparent path, for clients that ignore the proxy variables: a raw socket that resolves
a name and speaks HTTP or TLS to it reaches an allowed host through the egress proxy, under the
same policy, on bubblewrap. gVisor has no such path (docs/network.md): there the same client
finds no name resolution and no route. Upstream servers on the host's loopback
(``egress_servers``)."""

from __future__ import annotations

import json
import random
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from egress_servers import Upstreams, egress_session, serve_upstreams

from langchain_sandbox import Limits, NetworkPolicy, Secret, SessionSpec
from langchain_sandbox.providers.local import EgressUpstream, LocalSession
from langchain_sandbox.providers.local._egress_transparent import STAND_IN, dns_answer

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
]


async def test_clients_that_ignore_the_proxy(
    session: LocalSession, upstreams: Upstreams, isolation: str
) -> None:
    result = await session.run_code(f"CALLS = {CALLS!r}\n" + RAW)
    assert result.ok, result.render()
    secure, plain, denied = (json.loads(line) for line in result.stdout.splitlines())
    if isolation == "gvisor":
        # No transparent path there: the name does not even resolve, and nothing went out.
        assert secure == plain == denied == {"error": "gaierror"}, result.stdout
        assert upstreams.seen == []
        return
    assert secure["address"] == plain["address"] == "198.18.0.1", result.stdout
    assert (secure["status"], plain["status"]) == (200, 200), result.stdout
    assert denied["status"] == 403, denied
    assert "denied.test:80 is not allowed" in denied["body"]
    assert any("network policy refused 1 request" in notice for notice in result.notices)
    received = {seen.path: seen.headers["authorization"] for seen in upstreams.seen}
    # The secret's value toward its own host only, as through the proxy variables.
    assert received == {
        "/secure": f"Bearer {SECRET.value}",
        "/plain": f"Bearer {SECRET.placeholder}",
    }


def query(name: str, kind: int) -> bytes:
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return bytes.fromhex("abcd01000001000000000000") + labels + b"\0" + kind.to_bytes(2) + b"\0\1"


def test_the_dns_responder_answers_names_with_the_stand_in_and_nothing_else() -> None:
    a_record = dns_answer(query("api.test", 1))
    assert a_record is not None
    assert a_record[:2] == b"\xab\xcd"
    assert a_record[6:8] == b"\0\1"  # one answer
    assert a_record.endswith(socket.inet_aton(STAND_IN))
    aaaa = dns_answer(query("api.test", 28))
    assert aaaa is not None
    assert aaaa[6:8] == b"\0\0"  # no IPv6 address
    # Whatever the sandbox sends, the responder answers or ignores it: it never raises.
    rng = random.Random(24)
    for _ in range(5000):
        size = rng.randrange(0, 64)
        noise = bytes(rng.randrange(256) for _ in range(size))
        dns_answer(noise)
        dns_answer(query("x.test", 1)[: rng.randrange(1, 30)] + noise)
