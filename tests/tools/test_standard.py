"""langchain-tests' standard suites for every sandbox tool, on the real local provider.

The suites build tools from class properties, which cannot take fixtures; one runtime per module
(under a temporary directory, closed at module teardown) is handed to them through
``tool_constructor_params``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.tools import (
    SandboxExecTool,
    SandboxInstallPackagesTool,
    SandboxListFilesTool,
    SandboxReadFileTool,
    SandboxShellTool,
    SandboxTool,
    SandboxWriteFileTool,
)

from .conftest import make_local_runtime

_RUNTIME: list[SandboxRuntime] = []
_THREAD = "standard-tests"
"""The suite builds a new tool for each test: they share one sandbox by naming its thread."""


@pytest.fixture(scope="module", autouse=True)
def _module_runtime() -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="lcsb-standard-") as root:
        runtime = make_local_runtime(Path(root))
        _RUNTIME.append(runtime)
        try:
            # The read test reads what the write test's example writes; make it exist up front.
            runtime.write_files(_THREAD, {"notes/hello.txt": b"hello from the sandbox\n"})
            yield
        finally:
            _RUNTIME.remove(runtime)
            runtime.close()


class _Standard:
    tool_class: type[SandboxTool]
    example: dict[str, Any]

    @property
    def tool_constructor(self) -> type[SandboxTool]:
        return self.tool_class

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"runtime": _RUNTIME[0], "default_thread_id": _THREAD} if _RUNTIME else {}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return self.example


class _Exec(_Standard):
    tool_class = SandboxExecTool
    example = {"code": "x = 6 * 7\nprint(x)"}


class _Shell(_Standard):
    tool_class = SandboxShellTool
    example = {"command": "echo hello && ls"}


class _Write(_Standard):
    tool_class = SandboxWriteFileTool
    example = {"path": "notes/hello.txt", "content": "hello from the sandbox\n"}


class _Read(_Standard):
    tool_class = SandboxReadFileTool
    example = {"path": "notes/hello.txt"}


class _List(_Standard):
    tool_class = SandboxListFilesTool
    example = {"path": ".", "recursive": True}


class _Install(_Standard):
    tool_class = SandboxInstallPackagesTool
    example = {"packages": ["six"]}


class TestExecUnit(_Exec, ToolsUnitTests): ...


class TestExecIntegration(_Exec, ToolsIntegrationTests): ...


class TestShellUnit(_Shell, ToolsUnitTests): ...


class TestShellIntegration(_Shell, ToolsIntegrationTests): ...


class TestWriteFileUnit(_Write, ToolsUnitTests): ...


class TestWriteFileIntegration(_Write, ToolsIntegrationTests): ...


class TestReadFileUnit(_Read, ToolsUnitTests): ...


class TestReadFileIntegration(_Read, ToolsIntegrationTests): ...


class TestListFilesUnit(_List, ToolsUnitTests): ...


class TestListFilesIntegration(_List, ToolsIntegrationTests): ...


class TestInstallPackagesUnit(_Install, ToolsUnitTests): ...


class TestInstallPackagesIntegration(_Install, ToolsIntegrationTests): ...
