"""Fixtures of the local provider's tests: real bubblewrap sandboxes under a temporary base dir."""

from __future__ import annotations

import base64
import hashlib
import socket
import threading
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[LocalProvider]:
    made = LocalProvider(base_dir=tmp_path / "sandboxes")
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
async def session(provider: LocalProvider) -> AsyncIterator[LocalSession]:
    made = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's 127.0.0.1 that answers every connection with b"pong"."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            with connection:
                connection.sendall(b"pong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


@pytest.fixture
def build_wheel() -> Callable[..., Path]:
    """Writes a minimal, valid pure-Python wheel (PEP 427) by hand: pip installs it offline."""
    return _build_wheel


def _build_wheel(directory: Path, name: str, version: str, source: str) -> Path:
    """Write a minimal, valid pure-Python wheel (PEP 427) by hand."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source.encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: handmade\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record_lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{path},sha256={digest},{len(data)}")
    record_lines.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
