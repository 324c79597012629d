"""Suite-wide set-up: every test run keeps its sandboxes and blobs in a directory of its own."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from isolation_levels import require_gvisor
from langgraph.checkpoint.memory import InMemorySaver
from leftover_sessions import reap_orphaned_sessions
from network_probe import LoopbackListener
from source_tree import REPO, built_once, source_tree

from langchain_sandbox.core.paths import ENVIRONMENTS_ENV, environments_dir
from langchain_sandbox.providers.base import Provider
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

_HOME = tempfile.mkdtemp(prefix="lcsbx-tests-")


def pytest_configure(config: pytest.Config) -> None:
    # Sandbox environments are content-addressed and built once per machine: the suite shares
    # the user's cache (resolved before the override below), so the default one is built at most
    # once, by the first test that needs it, and later runs reuse it.
    os.environ.setdefault(ENVIRONMENTS_ENV, str(environments_dir()))
    # Set before any test (and any subprocess a test starts) can reach the default locations, so
    # the suite never touches the user's sessions or snapshot blobs.
    os.environ["LANGCHAIN_SANDBOX_HOME"] = _HOME
    # A Python process the suite starts that dies of a signal (a rare abort seen once in CI)
    # then prints every thread's stack to the stderr its test reports.
    os.environ["PYTHONFAULTHANDLER"] = "1"
    # Bytecode is cached even where the environment turns that off (some CI images set
    # PYTHONDONTWRITEBYTECODE): the suite starts hundreds of Python processes that import this
    # package, each of which compiled it again, and every pytest worker rewrote the asserts of
    # every test module again (docs/testing.md). Sandboxes keep their own setting.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


@pytest.fixture
def isolation(request: pytest.FixtureRequest) -> str:
    """The local provider's isolation level for this test: bubblewrap unless a suite (or a
    ``parametrize(..., indirect=True)``) asks for others."""
    level = str(getattr(request, "param", "bubblewrap"))
    if level == "gvisor":
        require_gvisor()
    return level


@pytest.fixture(scope="session")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Makes a virtualenv the way a user does (``python -m venv``, then ``pip install -c
    .ci/constraints.txt '.[extras]'``: no dev extra, no editable install); returns its directory.
    One per set of extras and packages per test run, shared by the run's workers
    (:func:`source_tree.built_once`), installed from a copy of the checkout."""

    def make(extras: str, *packages: str) -> Path:
        key = hashlib.sha256("\0".join((extras, *packages)).encode()).hexdigest()[:12]

        def build(venv: Path) -> None:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            constraints = REPO / ".ci" / "constraints.txt"
            install = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run(
                [*install, "-c", str(constraints), f"{source_tree(venv)}[{extras}]", *packages],
                check=True,
                timeout=1800,
                cwd=venv,
            )

        return built_once(tmp_path_factory, f"user-venv-{key}", build)

    return make


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first, each group in its collection order.

    pytest-xdist hands tests out in this order; the slowest files (the notebooks, the user
    install) were collected last, so one worker ran them alone while the others' cores idled.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_unconfigure(config: pytest.Config) -> None:
    reap_orphaned_sessions(Path(_HOME))
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_leftover_mounts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Sessions of processes a test killed are reaped after it (`leftover_sessions`): their
    mounts would make every later sandbox start slower. Only this worker's directories are
    looked at."""
    yield
    reap_orphaned_sessions(Path(_HOME), tmp_path_factory.getbasetemp())


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


@pytest.fixture
def blob_snapshotter(tmp_path: Path) -> Snapshotter:
    """A snapshotter on a blob directory of the test's own."""
    return Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))


@pytest.fixture
def warm_runtime(
    provider: Provider, blob_snapshotter: Snapshotter
) -> Callable[..., contextlib.AbstractAsyncContextManager[SandboxRuntime]]:
    """Runtimes on the directory's ``provider``: ``async with warm_runtime(**options)`` gives one
    whose thread ``"t"`` made one call a checkpoint could resume from (``n = 0``), its snapshot
    complete, and closes it afterwards."""

    @contextlib.asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[SandboxRuntime]:
        runtime = SandboxRuntime(provider, snapshotter=blob_snapshotter, **options)
        try:
            await runtime.arun_code("t", "n = 0", resumable=True)
            await runtime.aflush()
            yield runtime
        finally:
            await runtime.aclose()

    return make


class LateSaver(InMemorySaver):
    """Saves every checkpoint and write late, as a remote database under load does: under
    ``durability="async"`` (LangGraph's default) a step's tasks run before the step's checkpoint
    is saved, and the next step's before the last one's writes are."""

    delay = 0.2

    def put(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.delay)
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(self.delay)
        super().put_writes(*args, **kwargs)

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(self.delay)
        return super().put(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(self.delay)
        super().put_writes(*args, **kwargs)


@pytest.fixture(params=["prompt", "late"])
def memory_saver(request: pytest.FixtureRequest) -> InMemorySaver:
    """An ``InMemorySaver`` that saves at once, then one that saves late (:class:`LateSaver`)."""
    return LateSaver() if request.param == "late" else InMemorySaver()


@pytest.fixture
def loopback_listener() -> Iterator[LoopbackListener]:
    """See :class:`LoopbackListener`."""
    listener = LoopbackListener()
    try:
        yield listener
    finally:
        listener.close()
