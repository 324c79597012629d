"""Helpers of the process tests: a local runtime (bubblewrap, network off) under a directory, a web
server command, how a test opens a port's URL (directly, or through an emulator's edge), and an
HTTP GET that waits for a server that is still starting."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing._edge import EdgeClient

URLOpener = Callable[[str], bytes]
"""GET a URL ``expose_port`` gave: its body, or ``OSError`` while nothing answers there."""


def server_command(port: int) -> str:
    """A web server in the sandbox on ``port``; ``-u`` so its first line is not held in a buffer."""
    return f"python3 -u -m http.server {port} --bind 127.0.0.1"


SERVER = server_command(8000)
"""The web server for sandboxes without network (their loopback is their own)."""


def make_runtime(root: Path, **kwargs: object) -> SandboxRuntime:
    """A local runtime whose sessions and blobs live under ``root`` (two runtimes on one root
    are two processes' worth of the same store)."""
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / "sessions"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        **kwargs,  # type: ignore[arg-type]
    )


def open_directly(url: str) -> bytes:
    """A local provider's port URL: on this machine's loopback."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


def through_edge(emulator: EdgeClient) -> URLOpener:
    """A remote sandbox's public port URL cannot be resolved here: the emulator's edge routes
    it on its host name, as the real one does."""

    def get(url: str) -> bytes:
        answer = emulator.open(url)
        if answer.status != 200:
            raise ConnectionRefusedError(f"{answer.status}: {answer.text()}")
        return answer.body

    return get


def http_get(url: str, *, opener: URLOpener = open_directly, patience: float = 30.0) -> str:
    """The body at ``url`` (opened with ``opener``), retried while the server is not listening
    yet (a guard against a hang, not a timing assertion)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return opener(url).decode()
        except (urllib.error.URLError, ConnectionError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not answer: {exc}") from exc
            time.sleep(0.1)
