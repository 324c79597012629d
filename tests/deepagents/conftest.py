"""Backends for the Deep Agents tests: the local provider for real, E2B, Runloop and Kubernetes
through their real SDKs against the emulators in ``langchain_sandbox.testing``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from langchain_sandbox.runtime import SandboxRuntime


@contextlib.contextmanager
def local_runtime(base_dir: Path) -> Iterator[SandboxRuntime]:
    runtime = SandboxRuntime("local", provider_options={"base_dir": base_dir})
    try:
        yield runtime
    finally:
        runtime.close()


@contextlib.contextmanager
def e2b_runtime(base_dir: Path) -> Iterator[SandboxRuntime]:
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    with E2BEmulator(api_key="e2b_" + "0" * 40) as emulator:
        options = {
            "api_key": emulator.api_key,
            "api_url": emulator.url,
            "sandbox_url": emulator.url,
        }
        runtime = SandboxRuntime("e2b", provider_options=options)
        try:
            yield runtime
        finally:
            runtime.close()


@contextlib.contextmanager
def runloop_runtime(base_dir: Path) -> Iterator[SandboxRuntime]:
    from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

    with RunloopEmulator() as emulator:
        options = {"api_key": "emulator-key", "base_url": emulator.url}
        runtime = SandboxRuntime("runloop", provider_options=options)
        try:
            yield runtime
        finally:
            runtime.close()


@contextlib.contextmanager
def kubernetes_runtime(base_dir: Path) -> Iterator[SandboxRuntime]:
    from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator

    with KubernetesEmulator() as cluster:
        runtime = SandboxRuntime(cluster.provider())
        try:
            yield runtime
        finally:
            runtime.close()


RUNTIMES = {
    "local": local_runtime,
    "e2b": e2b_runtime,
    "runloop": runloop_runtime,
    "kubernetes": kubernetes_runtime,
}


@pytest.fixture(scope="class")
def class_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deepagents")


@pytest.fixture(scope="session")
def runtimes() -> dict[str, Any]:
    """``{provider name: context manager factory (base_dir) -> SandboxRuntime}``."""
    return RUNTIMES
