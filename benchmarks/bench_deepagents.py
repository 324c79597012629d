"""Deep Agents backends side by side. Prints tables; asserts nothing.

    .venv/bin/python benchmarks/bench_deepagents.py [--calls 200]

1. ``execute("echo hi")`` round trip, warm, through:
   * ``SandboxBackend`` (this package, local provider, bubblewrap) under both persist policies
     (``every_call`` also captures an incremental snapshot per call, which is what makes the
     thread durable);
   * ``deepagents_sandbox.Sandbox`` (the ``deepagents-sandbox`` package: bubblewrap, one new
     sandbox process per command), if installed (see benchmarks/README.md);
   * Deep Agents' own ``LocalShellBackend`` (a host subprocess, no isolation at all).
2. ``write`` then ``read`` of a 1 MB text file: ``SandboxBackend`` (the provider's file API)
   vs Deep Agents' ``BaseSandbox`` scripts (a Python script through ``execute`` for ``read``, a
   preflight command plus an upload for ``write``) run on the very same sandbox.

Everything runs under a temporary directory; nothing touches the real home.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
from pathlib import Path

from _timing import header, row, timings_ms
from deepagents.backends import LocalShellBackend
from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.runtime import PersistPolicy, SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

_WIDTH = 68


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


def _runtime(base: Path, persist: PersistPolicy) -> SandboxRuntime:
    snapshotter = Snapshotter(LocalDirectoryBlobStore(base / "blobs"))
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": base / "local"},
        snapshotter=snapshotter,
        persist=persist,
    )


def bench_execute(base: Path, calls: int) -> dict[str, float]:
    medians: dict[str, float] = {}
    header('1. execute("echo hi"), warm', _WIDTH)
    for persist, shell in (
        ("every_call", True),
        ("never", True),
        ("every_call", False),
        ("never", False),
    ):
        with _runtime(base, persist) as runtime:
            backend = SandboxBackend(runtime=runtime, persistent_shell=shell)
            samples = timings_ms(lambda b=backend: b.execute("echo hi"), calls)  # type: ignore[misc]
        name = f"SandboxBackend, local (persist={persist}, persistent_shell={shell})"
        medians[name] = statistics.median(samples)
        print(row(name, samples, _WIDTH))
    if importlib.util.find_spec("deepagents_sandbox") is not None:
        from deepagents_sandbox import Sandbox

        other = Sandbox()
        try:
            samples = timings_ms(lambda: other.execute("echo hi"), calls)
        finally:
            other.close()
        name = "deepagents-sandbox Sandbox (bubblewrap per command)"
        medians[name] = statistics.median(samples)
        print(row(name, samples, _WIDTH))
    else:
        print("deepagents-sandbox is not installed: see benchmarks/README.md")
    shell_root = base / "local-shell"
    shell_root.mkdir()
    host = LocalShellBackend(root_dir=shell_root, virtual_mode=True)
    samples = timings_ms(lambda: host.execute("echo hi"), calls)
    name = "LocalShellBackend (host shell, NO isolation)"
    medians[name] = statistics.median(samples)
    print(row(name, samples, _WIDTH))
    fastest = min(v for k, v in medians.items() if k.startswith("SandboxBackend"))
    for other_name, value in medians.items():
        if not other_name.startswith("SandboxBackend"):
            print(f"   {other_name}: {value / fastest:.1f}x the fastest SandboxBackend row")
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
