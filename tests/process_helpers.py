"""Helpers of the process tests: a local runtime (bubblewrap, network off) under a directory, a web
server command, and an HTTP GET that waits for a server that is still starting."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

SERVER = "python3 -u -m http.server 8000 --bind 127.0.0.1"
"""A web server in the sandbox; ``-u`` so its first line is not held in a buffer."""


def make_runtime(root: Path, **kwargs: object) -> SandboxRuntime:
    """A local runtime whose sessions and blobs live under ``root`` (two runtimes on one root
    are two processes' worth of the same store)."""
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / "sessions"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        **kwargs,  # type: ignore[arg-type]
    )


def http_get(url: str, *, patience: float = 30.0) -> str:
    """The body at ``url``, retried while the server is not listening yet (a guard against a
    hang, not a timing assertion)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return str(response.read().decode())
        except (urllib.error.URLError, ConnectionError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not answer: {exc}") from exc
            time.sleep(0.1)
