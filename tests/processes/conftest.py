"""Fixtures of the process tests: runtimes on the real local provider with their sessions and
snapshot blobs under the test's directory, closed after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from process_helpers import make_runtime

from langchain_sandbox.runtime import SandboxRuntime


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., SandboxRuntime]]:
    made: list[SandboxRuntime] = []

    def build(**kwargs: object) -> SandboxRuntime:
        runtime = make_runtime(tmp_path, **kwargs)
        made.append(runtime)
        return runtime

    yield build
    for runtime in made:
        runtime.close()


@pytest.fixture
def runtime(make: Callable[..., SandboxRuntime]) -> SandboxRuntime:
    return make()
