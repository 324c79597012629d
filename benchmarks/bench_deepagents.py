"""Deep Agents backends side by side. Prints tables; asserts nothing.

    .venv/bin/python benchmarks/bench_deepagents.py [--calls 200]

1. ``execute("echo hi")`` round trip, warm, through:
   * ``SandboxBackend`` inside ``create_deep_agent`` with a checkpointer (``InMemorySaver``), with
     the runtime's defaults: the durable default, which also finds the record the conversation
     left and files the new one (each round is one agent turn; its ``execute`` alone is timed);
   * ``SandboxBackend`` (this package, local provider, bubblewrap) called directly, under both
     persist policies (``every_call`` also captures an incremental snapshot per call, which is
     what makes the thread durable);
   * ``deepagents_sandbox.Sandbox`` (the ``deepagents-sandbox`` package: bubblewrap, one new
     sandbox process per command), if installed (see benchmarks/README.md);
   * Deep Agents' own ``LocalShellBackend`` (a host subprocess, no isolation at all);
   one call of each per round, so load on the machine falls on all alike and the ratios printed
   hold; for the durable rows, the time the snapshot capture took inside the call.
2. ``write`` then ``read`` of a 1 MB text file: ``SandboxBackend`` (the provider's file API)
   vs Deep Agents' ``BaseSandbox`` scripts (a Python script through ``execute`` for ``read``, a
   preflight command plus an upload for ``write``) run on the very same sandbox.

Everything runs under a temporary directory; nothing touches the real home.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _timing import header, interleaved_ms, row, timings_ms
from deepagents import create_deep_agent
from deepagents.backends import LocalShellBackend
from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.providers.base import Session
from langchain_sandbox.runtime import PersistPolicy, SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, SnapshotInfo, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call

_WIDTH = 80


class _ScriptPath(BaseSandbox):
    """Deep Agents' ``BaseSandbox`` as shipped (its read/write/ls scripts), on our sandbox: only
    ``execute``, ``upload_files`` and ``download_files`` are ours, as in any partner backend."""

    def __init__(self, backend: SandboxBackend) -> None:
        self._backend = backend

    @property
    def id(self) -> str:
        return self._backend.id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return self._backend.execute(command, timeout=timeout)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self._backend.upload_files(files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self._backend.download_files(paths)


class _TimedSnapshotter(Snapshotter):
    """A snapshotter that notes how long each capture takes: the share of a durable call that
    is the snapshot."""

    def __init__(self, store: LocalDirectoryBlobStore) -> None:
        super().__init__(store)
        self.capture_ms: list[float] = []

    async def capture(self, session: Session, **kwargs: Any) -> SnapshotInfo:
        start = time.perf_counter()
        try:
            return await super().capture(session, **kwargs)
        finally:
            self.capture_ms.append((time.perf_counter() - start) * 1000)


class _TimedBackend(SandboxBackend):
    """A backend that notes how long each ``execute`` takes: inside an agent, the call alone."""

    def __init__(self, runtime: SandboxRuntime) -> None:
        super().__init__(runtime=runtime)
        self.execute_ms: list[float] = []

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        start = time.perf_counter()
        try:
            return super().execute(command, timeout=timeout)
        finally:
            self.execute_ms.append((time.perf_counter() - start) * 1000)


def _agent_turn(backend: SandboxBackend) -> Callable[[], object]:
    """One turn of a deep agent with a checkpointer: the model asks for ``echo hi``, then
    answers; every turn in the same thread, as in one long conversation."""

    def script(messages: list[BaseMessage]) -> Any:
        return "ok" if isinstance(messages[-1], ToolMessage) else call("execute", command="echo hi")

    agent = create_deep_agent(
        ScriptedToolModel(script=script), backend=backend, checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "bench"}}
    return lambda: agent.invoke({"messages": [HumanMessage("go")]}, config)


def _runtime(base: Path, persist: PersistPolicy, *, fsync: bool = True) -> SandboxRuntime:
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": base / "local"},
        snapshotter=_TimedSnapshotter(LocalDirectoryBlobStore(base / "blobs", durable=fsync)),
        persist=persist,
    )


def bench_execute(base: Path, calls: int) -> dict[str, float]:
    header(f'1. execute("echo hi"), warm, {calls} rounds, calls interleaved', _WIDTH)
    execute: dict[str, Callable[[], object]] = {}
    snapshotters: dict[str, _TimedSnapshotter] = {}
    with contextlib.ExitStack() as stack:
        agent_runtime = stack.enter_context(_runtime(base, "resumable"))
        in_agent = _TimedBackend(agent_runtime)
        agent_row = "SandboxBackend in create_deep_agent + checkpointer (durable default)"
        execute[agent_row] = _agent_turn(in_agent)
        snapshotters[agent_row] = agent_runtime.snapshotter  # type: ignore[assignment]
        # The third row is the first without the store's fsync: what a durable call's snapshot
        # costs apart from waiting for the disk.
        for persist, shell, fsync in (
            ("every_call", True, True),
            ("never", True, True),
            ("every_call", True, False),
            ("every_call", False, True),
            ("never", False, True),
        ):
            runtime = stack.enter_context(_runtime(base, persist, fsync=fsync))
            backend = SandboxBackend(runtime=runtime, persistent_shell=shell)
            name = f"SandboxBackend, local (persist={persist}, persistent_shell={shell})"
            if not fsync:
                name = name.replace(")", ", no fsync)")
            execute[name] = lambda b=backend: b.execute("echo hi")  # type: ignore[misc]
            if persist == "every_call":
                snapshotters[name] = runtime.snapshotter  # type: ignore[assignment]
        if importlib.util.find_spec("deepagents_sandbox") is not None:
            from deepagents_sandbox import Sandbox

            other = Sandbox()
            stack.callback(other.close)
            execute["deepagents-sandbox Sandbox (bubblewrap per command)"] = lambda: other.execute(
                "echo hi"
            )
        else:
            print("deepagents-sandbox is not installed: see benchmarks/README.md")
        shell_root = base / "local-shell"
        shell_root.mkdir()
        host = LocalShellBackend(root_dir=shell_root, virtual_mode=True)
        execute["LocalShellBackend (host shell, NO isolation)"] = lambda: host.execute("echo hi")
        for snapshotter in snapshotters.values():
            snapshotter.capture_ms.clear()
        samples = interleaved_ms(execute, calls)
        samples[agent_row] = in_agent.execute_ms[-calls:]
    for name, timings in samples.items():
        print(row(name, timings, _WIDTH))
        if name in snapshotters:
            captures = snapshotters[name].capture_ms[-calls:]
            print(row("   of which the snapshot capture", captures, _WIDTH))
    medians = {name: statistics.median(timings) for name, timings in samples.items()}
    ours = [name for name in medians if name.startswith("SandboxBackend")]
    for other_name in (name for name in medians if name not in ours):
        for name in ours:
            ratio = medians[other_name] / medians[name]
            print(
                f"   {other_name.split(' (')[0]} / {name.partition(', ')[2] or name}: {ratio:.2f}x"
            )
    return medians


def bench_files(base: Path, calls: int) -> None:
    text = "".join(f"line {i:07d} " + "x" * 50 + "\n" for i in range(16_500))  # ~1 MB
    path = "/home/user/big.txt"
    header(f"2. write + read of a {len(text.encode()) / 1e6:.2f} MB text file, warm", _WIDTH)
    with _runtime(base, "never") as runtime:
        native = SandboxBackend(runtime=runtime)
        scripts = _ScriptPath(native)
        rounds = max(calls // 10, 10)
        for name, backend in (
            ("SandboxBackend (provider file API)", native),
            ("BaseSandbox scripts, same sandbox", scripts),
        ):
            writes = timings_ms(lambda b=backend: b.write(path, text), rounds)  # type: ignore[misc]
            reads = timings_ms(lambda b=backend: b.read(path, 0, 20_000), rounds)  # type: ignore[misc]
            check = backend.read(path, 0, 20_000)
            assert check.file_data is not None
            print(row(f"write  {name}", writes, _WIDTH))
            print(row(f"read   {name}", reads, _WIDTH))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-deepagents-") as tmp:
        bench_execute(Path(tmp), args.calls)
        bench_files(Path(tmp), args.calls)


if __name__ == "__main__":
    main()
