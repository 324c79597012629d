"""What the local egress proxy adds to an HTTP request, warm: one kept-alive connection, plain
HTTP and HTTPS (the proxy terminates TLS with the session CA and opens its own verified TLS to
the upstream). Prints a table; asserts nothing.

    .venv/bin/python benchmarks/bench_egress.py [--requests 300] [--isolation gvisor]

The same client loop (``http.client``, one connection, ``GET /``) runs three times: on the host
straight to the upstream server; in a session (bubblewrap, or gVisor) with a NetworkPolicy, through
the proxy (sandbox loopback -> relay -> unix socket -> proxy -> upstream); and in that session
again with no proxy at all, by name on ports 80 and 443: the transparent path (the name resolves
to the stand-in address, whose listeners hand the connection to the same proxy). Upstreams are the
test suite's loopback servers (``tests/egress_servers.py``); nothing leaves this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from egress_servers import serve_upstreams

from langchain_sandbox import NetworkPolicy, SessionSpec
from langchain_sandbox.providers.local import EgressUpstream, LocalProvider

CLIENT = """
import http.client, json, ssl, statistics, time
def timed(scheme, host, port, proxy, n, cafile):
    context = ssl.create_default_context(cafile=cafile) if scheme == "https" else None
    if proxy is None:
        target = (host, port)
        path = "/"
    elif scheme == "https":
        target, path = proxy, "/"
    else:
        target, path = proxy, f"http://{host}:{port}/"
    if scheme == "https":
        connection = http.client.HTTPSConnection(*target, context=context, timeout=30)
        if proxy is not None:
            connection.set_tunnel(host, port)
    else:
        connection = http.client.HTTPConnection(*target, timeout=30)
    times = []
    for index in range(n + 20):
        started = time.perf_counter()
        connection.request("GET", path, headers={"Host": f"{host}:{port}"})
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{scheme}: HTTP {response.status} {response.reason}")
        if index >= 20:  # warm: the connection (and tunnel) is open
            times.append((time.perf_counter() - started) * 1e3)
    connection.close()
    return statistics.median(times)
"""


async def main(requests: int, isolation: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        # The transparent path's ports are 80 and 443: a name for each, sent to the servers'.
        servers = serve_upstreams(Path(scratch), ["api.test", "tls.test"])
        upstreams = next(servers)
        namespace: dict[str, object] = {}
        exec(CLIENT, namespace)
        timed = namespace["timed"]
        direct = {
            scheme: timed(scheme, "127.0.0.1", port, None, requests, upstreams.ca_file)  # type: ignore[operator]
            for scheme, port in (("http", upstreams.http_port), ("https", upstreams.https_port))
        }
        provider = LocalProvider(
            base_dir=Path(scratch) / "sandboxes",
            isolation=isolation,  # type: ignore[arg-type]
            egress_upstream=EgressUpstream(
                ca_file=upstreams.ca_file,
                hosts={
                    "api.test": "127.0.0.1",
                    "plain.test": f"127.0.0.1:{upstreams.http_port}",
                    "tls.test": f"127.0.0.1:{upstreams.https_port}",
                },
            ),
        )
        ports = (upstreams.http_port, upstreams.https_port)
        allow = [f"{h}:{p}" for h in ("api.test", "127.0.0.1") for p in ports]
        allow += ["plain.test:80", "tls.test:443"]
        session = await provider.create(SessionSpec(network=NetworkPolicy(allow=allow)))
        try:
            code = CLIENT + (
                "import os\nproxy = ('127.0.0.1', 3128)\nca = os.environ['SSL_CERT_FILE']\n"
                f"print(json.dumps({{s: timed(s, 'api.test', p, proxy, {requests}, ca) "
                f"for s, p in (('http', {ports[0]}), ('https', {ports[1]}))}}))\n"
                f"print(json.dumps({{s: timed(s, h, p, None, {requests}, ca) "
                "for s, h, p in (('http', 'plain.test', 80), ('https', 'tls.test', 443))}))"
            )
            result = await session.run_code(code)
            if not result.ok:
                raise SystemExit(result.render())
            proxied, transparent = (json.loads(line) for line in result.stdout.splitlines())
        finally:
            await session.close()
            await provider.aclose()
            servers.close()
    print(
        f"warm request ({isolation}), median of {requests} (ms)   direct   via proxy   added"
        "   transparent   added"
    )
    for scheme in ("http", "https"):
        added = proxied[scheme] - direct[scheme]
        through = transparent[scheme] - direct[scheme]
        print(
            f"  {scheme:<35} {direct[scheme]:7.3f}   {proxied[scheme]:9.3f}   {added:6.3f}"
            f"   {transparent[scheme]:11.3f}   {through:6.3f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--isolation", choices=("bubblewrap", "gvisor"), default="bubblewrap")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.requests, arguments.isolation))
