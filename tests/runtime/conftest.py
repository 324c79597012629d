"""Fixtures for the runtime tests.

The lock, single-flight, eviction and rehydrate bookkeeping of the runtime is provider-neutral, so
those tests use :class:`CountingProvider`: an in-memory session that records how many sessions
exist, how many calls overlap, and what was closed. It is a test double for the runtime's own
logic only; everything about running code is tested on the real local provider
(``local_runtime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import pickle
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox.core.workspace import WORKSPACE_ROOT, relative_path, resolve_path
from langchain_sandbox.errors import InvalidPathError, SandboxGoneError
from langchain_sandbox.providers.base import (
    Capabilities,
    FileInfo,
    OutputCallback,
    Provider,
    Session,
    SessionRecord,
    SessionSpec,
    VariablesDump,
)
from langchain_sandbox.results import ExecutionError, ExecutionResult
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


class CountingSession(Session):
    """Files in a dict, variables in a dict, code run with ``exec`` after a short await."""

    def __init__(self, provider: CountingProvider, spec: SessionSpec) -> None:
        self.provider_name = "counting"
        self.session_id = uuid.uuid4().hex
        self.spec = spec
        self.capabilities = Capabilities(figures=False, install_packages=False)
        self._provider = provider
        self.files: dict[str, bytes] = {}
        self.namespace: dict[str, Any] = {}
        self.active = 0
        self.max_active = 0
        self.closed = False
        self.dead = False

    @property
    def record(self) -> SessionRecord:
        return SessionRecord(
            provider="counting",
            session_id=self.session_id,
            sandbox_id=self.session_id,
            metadata=dict(self.spec.metadata),
        )

    def _check(self) -> None:
        if self.closed or self.dead:
            raise SandboxGoneError("the counting sandbox is gone")

    async def _run_code(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
    ) -> ExecutionResult:
        self._check()
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(self._provider.delay)
            self._check()
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(code, self.namespace)
            except Exception as exc:
                return ExecutionResult(
                    stdout=out.getvalue(),
                    exit_code=1,
                    error=ExecutionError(name=type(exc).__name__, value=str(exc)),
                )
            if on_output is not None and out.getvalue():
                on_output("stdout", out.getvalue())
            return ExecutionResult(stdout=out.getvalue())
        finally:
            self.active -= 1

    async def _run_command(
        self,
        command: str,
        *,
        timeout: float,
        env: dict[str, str],
        cwd: str,
        on_output: OutputCallback | None,
    ) -> ExecutionResult:
        self._check()
        return ExecutionResult(kind="command", exit_code=127, stderr="no shell here")

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        self._check()
        for path, data in files.items():
            self.files[relative_path(path)] = bytes(data)

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        self._check()
        out = {}
        for path in paths:
            key = relative_path(path)
            if key not in self.files:
                raise InvalidPathError(f"{path} does not exist")
            out[path] = self.files[key]
        return out

    async def list_files(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        self._check()
        resolve_path(path)
        return [
            FileInfo(path=p, size=len(d), mtime_ns=0, mode=0o644) for p, d in self.files.items()
        ]

    async def remove_files(self, paths: Sequence[str]) -> None:
        self._check()
        for path in paths:
            self.files.pop(relative_path(path), None)

    async def _install_packages(
        self, names: list[str], *, timeout: float, on_output: OutputCallback | None
    ) -> ExecutionResult:
        return ExecutionResult(kind="command", exit_code=1, stderr="no installs here")

    async def _dump_variables(self, max_bytes: int) -> VariablesDump:
        self._check()
        values = {
            k: v for k, v in self.namespace.items() if not k.startswith("_") and _picklable(v)
        }
        return VariablesDump(data=pickle.dumps(values), saved=tuple(values))

    async def _load_variables(self, data: bytes) -> dict[str, str]:
        self._check()
        for name in [name for name in self.namespace if not name.startswith("_")]:
            del self.namespace[name]
        self.namespace.update(pickle.loads(data))
        return {}

    async def is_alive(self) -> bool:
        return not (self.closed or self.dead)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._provider.closed.append(self.session_id)


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


class CountingProvider(Provider):
    name = "counting"
    capabilities = Capabilities(figures=False, install_packages=False)

    def __init__(self, delay: float = 0.05, create_delay: float = 0.05) -> None:
        self.delay = delay
        self.create_delay = create_delay
        self.sessions: list[CountingSession] = []
        self.closed: list[str] = []

    async def create(self, spec: SessionSpec | None = None) -> Session:
        await asyncio.sleep(self.create_delay)
        session = CountingSession(self, spec or SessionSpec())
        self.sessions.append(session)
        return session

    async def _attach(self, record: SessionRecord) -> Session | None:
        return None

    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        return [s.record for s in self.sessions if not s.closed]

    async def _destroy(self, record: SessionRecord) -> bool:
        return False

    @property
    def live(self) -> list[CountingSession]:
        return [s for s in self.sessions if not s.closed]


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything built with defaults keeps its blobs and sessions under the test's directory."""
    monkeypatch.setenv("LANGCHAIN_SANDBOX_HOME", str(tmp_path / "home"))


@pytest.fixture
def counting_provider() -> CountingProvider:
    return CountingProvider()


@pytest.fixture
def snapshotter(tmp_path: Path) -> Snapshotter:
    return Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))


@pytest.fixture
def counting_runtime(
    counting_provider: CountingProvider, snapshotter: Snapshotter
) -> Iterator[SandboxRuntime]:
    # Captures after every changing call, as in a graph with a checkpointer: these tests are
    # about what snapshots do; when a call is captured is tested in tests/tools/test_persist_rule.py.
    runtime = SandboxRuntime(
        counting_provider, snapshotter=snapshotter, idle_ttl=None, persist="every_call"
    )
    try:
        yield runtime
    finally:
        runtime.close()


@pytest.fixture
async def local_runtime(tmp_path: Path) -> AsyncIterator[SandboxRuntime]:
    """A runtime on the real local provider (bubblewrap) with its own snapshot store."""
    runtime = SandboxRuntime(
        "local",
        provider_options={"base_dir": tmp_path / "local"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
        persist="every_call",
    )
    try:
        yield runtime
    finally:
        await runtime.aclose()


def wait_until(predicate: Any, timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


__all__ = ["WORKSPACE_ROOT", "CountingProvider", "CountingSession", "wait_until"]
