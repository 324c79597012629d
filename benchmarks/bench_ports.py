"""Benchmark of the local provider's exposed ports: time to first byte through ``expose_port``.

Run it with ``python benchmarks/bench_ports.py`` (``--quick`` for fewer repetitions). The same
server (``python3 -m http.server``, a 1 KB file) runs twice: in a sandbox with the network off,
reached through ``expose_port`` (host listener -> unix socket -> the relay in the sandbox ->
``127.0.0.1:PORT`` inside), and directly on the host's loopback. Each sample opens a new
connection, sends a ``GET`` and stops at the first byte of the answer; the two are measured
interleaved, on both isolation levels where gVisor runs, and the ratio is printed.

No assertions: numbers on a shared machine vary; the table is for people.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from _timing import header, interleaved_ms, row

from langchain_sandbox.processes import ProcessSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.providers.local._launcher import Isolation

_BODY = b"x" * 1024
_REQUEST = b"GET /page.html HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"


def _first_byte(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(_REQUEST)
        if not connection.recv(1):
            raise RuntimeError("the server closed without answering")


def _wait_answering(host: str, port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            _first_byte(host, port)
            return
        except (OSError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextlib.contextmanager
def _host_server(directory: str) -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_answering("127.0.0.1", port)
        yield port
    finally:
        server.kill()
        server.wait()


async def _measure(isolation: Isolation, repeat: int, base_dir: str, site: str) -> None:
    provider = LocalProvider(base_dir=os.path.join(base_dir, isolation), isolation=isolation)
    try:
        session = await provider.create()
        await session.write_files({"page.html": _BODY})
        await session.start_process(
            ProcessSpec("web", "exec python3 -m http.server 8000 --bind 127.0.0.1")
        )
        url = urllib.parse.urlsplit(await session.expose_port(8000))
        assert url.hostname is not None
        assert url.port is not None
        relayed = (url.hostname, url.port)
        await asyncio.to_thread(_wait_answering, *relayed)
        with _host_server(site) as direct:
            samples = await asyncio.to_thread(
                interleaved_ms,
                {
                    "through expose_port": lambda: _first_byte(*relayed),
                    "direct, host loopback": lambda: _first_byte("127.0.0.1", direct),
                },
                repeat,
            )
        width = 24
        header(f"Time to first byte, {isolation} ({repeat} GETs each, new connection)", width)
        for name, values in samples.items():
            print(row(name, values, width))
        ratio = statistics.median(samples["through expose_port"]) / statistics.median(
            samples["direct, host loopback"]
        )
        print(f"{'ratio relayed / direct':<{width}} {ratio:>9.2f}x")
    finally:
        await provider.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    repeat = 20 if args.quick else 200
    with tempfile.TemporaryDirectory(prefix="lcsbx-bench-ports-") as base_dir:
        site = os.path.join(base_dir, "site")
        os.mkdir(site)
        await asyncio.to_thread(Path(site, "page.html").write_bytes, _BODY)
        levels: list[Isolation] = ["bubblewrap"]
        if os.geteuid() == 0:
            levels.append("gvisor")
        for isolation in levels:
            await _measure(isolation, repeat, base_dir, site)


if __name__ == "__main__":
    asyncio.run(main())
