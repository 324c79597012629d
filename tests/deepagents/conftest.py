"""Backends for the Deep Agents tests: the local provider for real, E2B, Runloop and Kubernetes
through their real SDKs against the emulators in ``langchain_sandbox.testing``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents")

from emulated_providers import EMULATED, emulated_runtime

from langchain_sandbox.runtime import SandboxRuntime


@contextlib.contextmanager
def local_runtime(base_dir: Path) -> Iterator[SandboxRuntime]:
    runtime = SandboxRuntime("local", provider_options={"base_dir": base_dir})
    try:
        yield runtime
    finally:
        runtime.close()


def _emulated(name: str) -> Any:
    return lambda base_dir: emulated_runtime(name)


RUNTIMES = {"local": local_runtime, **{name: _emulated(name) for name in EMULATED}}


@pytest.fixture(scope="class")
def class_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deepagents")


@pytest.fixture(scope="session")
def runtimes() -> dict[str, Any]:
    """``{provider name: context manager factory (base_dir) -> SandboxRuntime}``."""
    return RUNTIMES
