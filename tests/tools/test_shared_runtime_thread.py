"""Tools given one runtime share its sandbox outside a graph (no thread id); a tool without a
runtime and without a thread keeps a private one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from langchain_sandbox import SandboxRuntime
from langchain_sandbox.providers.local import PackageIndex
from langchain_sandbox.tools import (
    SandboxExecTool,
    SandboxInstallPackagesTool,
    SandboxWriteFileTool,
)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[SandboxRuntime]:
    with SandboxRuntime("local", provider_options={"base_dir": tmp_path}) as made:
        yield made


def test_a_file_one_tool_writes_is_there_for_another_on_the_same_runtime(
    runtime: SandboxRuntime,
) -> None:
    SandboxWriteFileTool(runtime=runtime).invoke({"path": "notes.txt", "content": "shared"})
    shown = SandboxExecTool(runtime=runtime).invoke({"code": "print(open('notes.txt').read())"})
    assert "shared" in shown


def test_a_package_one_tool_installs_is_importable_by_another_on_the_same_runtime(
    tmp_path: Path, build_wheel: Callable[..., Path]
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "tinypkg", "0.1", "VALUE = 'installed'\n")
    options = {
        "base_dir": tmp_path / "sandboxes",
        "package_index": PackageIndex(find_links=(wheels,), no_index=True),
    }
    with SandboxRuntime("local", provider_options=options) as runtime:
        installed = SandboxInstallPackagesTool(runtime=runtime).invoke({"packages": ["tinypkg"]})
        assert "tinypkg" in installed
        shown = SandboxExecTool(runtime=runtime).invoke(
            {"code": "import tinypkg\nprint(tinypkg.VALUE)"}
        )
    assert "installed" in shown
    assert "ModuleNotFoundError" not in shown


def test_variables_carry_between_tools_on_the_same_runtime(runtime: SandboxRuntime) -> None:
    SandboxExecTool(runtime=runtime).invoke({"code": "answer = 42"})
    assert "42" in SandboxExecTool(runtime=runtime).invoke({"code": "print(answer)"})


def test_a_tool_given_its_own_thread_or_no_runtime_stays_apart(runtime: SandboxRuntime) -> None:
    SandboxExecTool(runtime=runtime).invoke({"code": "answer = 42"})
    own = SandboxExecTool(runtime=runtime, default_thread_id="mine")
    assert "NameError" in own.invoke({"code": "print(answer)"})
    # No runtime (the process-wide default) and no thread: each tool instance is its own owner.
    SandboxExecTool().invoke({"code": "secret = 1"})
    assert "NameError" in SandboxExecTool().invoke({"code": "print(secret)"})
