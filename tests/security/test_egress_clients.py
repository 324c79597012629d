"""The HTTP clients sandboxed code really uses go through the egress proxy with nothing but the
session's variables: ``curl``, ``httpx``, ``requests`` and ``urllib`` reach an allowed HTTPS
server trusting only the session's CA, and come back with a 403 whose body says why toward a host
the policy does not name (the upstream never sees that request). Run for real on both isolation
levels, upstream servers on the host's loopback (``egress_servers``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from egress_servers import Upstreams, egress_session, serve_upstreams

from langchain_sandbox import Limits, NetworkPolicy, SessionSpec
from langchain_sandbox.providers.local import EgressUpstream, LocalSession

# Each client as code usually calls it: no proxy or CA argument, only the environment's.
CLIENTS = {
    "curl": """
import subprocess
def get(url):
    done = subprocess.run(["curl", "-sS", "-w", "\\n%{http_code}", url],
                          capture_output=True, text=True, timeout=60)
    body, _, code = done.stdout.rpartition("\\n")
    return int(code), body or done.stderr
""",
    "httpx": """
import httpx
def get(url):
    response = httpx.get(url, timeout=30)
    return response.status_code, response.text
""",
    "requests": """
import requests
def get(url):
    response = requests.get(url, timeout=30)
    return response.status_code, response.text
""",
    "urllib": """
import urllib.request, urllib.error
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
""",
}


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    yield from serve_upstreams(tmp_path, ("api.test", "other.test"))


@pytest.fixture
async def session(
    tmp_path: Path, upstreams: Upstreams, isolation: str
) -> AsyncIterator[LocalSession]:
    upstream = EgressUpstream(
        ca_file=upstreams.ca_file, hosts={"api.test": "127.0.0.1", "other.test": "127.0.0.1"}
    )
    # api.test resolves to the host's loopback: that address must be allowed too. The host's
    # loopback HTTP server is allowed by address.
    port = upstreams.https_port
    policy = NetworkPolicy(
        allow=[f"api.test:{port}", f"127.0.0.1:{port}", f"127.0.0.1:{upstreams.http_port}"]
    )
    # "host": the application's own site-packages, where httpx and requests are installed.
    spec = SessionSpec(template="host", network=policy, limits=Limits(timeout=90))
    async with egress_session(tmp_path / "sandboxes", isolation, upstream, spec) as made:
        yield made


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_a_client_trusts_the_session_ca_and_reads_a_refusal(
    session: LocalSession, upstreams: Upstreams, client: str
) -> None:
    allowed = f"https://api.test:{upstreams.https_port}/{client}"
    # An allowed loopback address is the host's: NO_PROXY leaves it to the proxy.
    loopback = f"http://127.0.0.1:{upstreams.http_port}/{client}-loopback"
    # Plain HTTP to a host the policy does not name: the proxy answers the request itself.
    denied = f"http://other.test:{upstreams.http_port}/{client}"
    urls = [allowed, loopback, denied]
    code = CLIENTS[client] + f"import json\nprint(json.dumps([get(url) for url in {urls!r}]))"
    result = await session.run_code(code)
    assert result.ok, result.render()
    (ok_code, ok_body), (host_code, host_body), (denied_code, denied_body) = json.loads(
        result.stdout
    )
    assert ok_code == 200, ok_body
    assert json.loads(ok_body)["path"] == f"/{client}"
    assert host_code == 200, host_body
    assert denied_code == 403, denied_body
    assert f"other.test:{upstreams.http_port} is not allowed" in denied_body
    assert [seen.path for seen in upstreams.seen] == [f"/{client}", f"/{client}-loopback"]
    assert any("network policy refused 1 request" in notice for notice in result.notices)


async def test_a_refused_https_connect_reads_as_403_in_every_client(
    session: LocalSession, upstreams: Upstreams
) -> None:
    """HTTPS to a host the policy does not name: the ``CONNECT`` itself is refused, and each
    client surfaces that status (and its reason, where the client shows the status line)."""
    url = f"https://other.test:{upstreams.https_port}/"
    code = """
import json, subprocess, urllib.request, httpx, requests
seen = {}
done = subprocess.run(["curl", "-sS", "URL"], capture_output=True, text=True, timeout=60)
seen["curl"] = done.stderr
try:
    httpx.get("URL", timeout=30)
except httpx.ProxyError as error:
    seen["httpx"] = str(error)
try:
    requests.get("URL", timeout=30)
except requests.exceptions.ProxyError as error:
    seen["requests"] = str(error)
try:
    urllib.request.urlopen("URL", timeout=30)
except OSError as error:
    seen["urllib"] = str(error)
print(json.dumps(seen))
""".replace("URL", url)
    result = await session.run_code(code)
    assert result.ok, result.render()
    seen = json.loads(result.stdout)
    assert sorted(seen) == ["curl", "httpx", "requests", "urllib"], seen
    for client, message in seen.items():
        assert "403" in message, (client, message)
    assert "is not allowed" in seen["urllib"], seen
    assert upstreams.seen == []
