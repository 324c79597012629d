"""The top level is complete for users, ``providers.base`` for provider authors, ``snapshots`` for
store authors; a toolkit owns the runtime it builds exactly as a tool does."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

import langchain_sandbox
from langchain_sandbox.providers import base
from langchain_sandbox.runtime import SandboxRuntime


def test_every_top_level_name_resolves_and_documented_signatures_use_exported_types() -> None:
    for name in langchain_sandbox.__all__:
        assert getattr(langchain_sandbox, name) is not None, name
    runtime_hints = typing.get_type_hints(SandboxRuntime.arun_code)
    for used in ("Outcome", "StepCall"):
        assert used in langchain_sandbox.__all__
        assert used in str(runtime_hints), used
    assert "OutputCallback" in langchain_sandbox.__all__
    from langchain_sandbox.graph import SandboxGraphState

    channel = typing.get_type_hints(SandboxGraphState, include_extras=True)["sandbox"]
    assert typing.get_args(channel)[0] == langchain_sandbox.SandboxChannel


def test_a_provider_can_be_written_from_providers_base_alone() -> None:
    needed = {
        "Provider",
        "Session",
        "Capabilities",
        "SessionSpec",
        "SessionRecord",
        "FileInfo",
        "VariablesDump",
        "OutputCallback",
        "ExecutionResult",
        "ExecutionError",
        "Artifact",
        "OutputCapture",
        "resolve_path",
        "relative_path",
        "WORKSPACE_ROOT",
        "install_spec_packages",
    }
    assert needed <= set(base.__all__)
    for name in base.__all__:
        assert getattr(base, name) is not None
    abstract = {
        name
        for cls in (base.Session, base.Provider)
        for name, member in inspect.getmembers(cls)
        if getattr(member, "__isabstractmethod__", False)
    }
    assert {"_run_code", "_run_command", "_install_packages", "_attach", "_destroy"} <= abstract


def test_a_store_can_be_written_from_snapshots_alone() -> None:
    from langchain_sandbox import snapshots

    assert {"BlobStore", "BlobInfo", "check_key", "digest"} <= set(snapshots.__all__)
    assert snapshots.check_key(snapshots.digest(b"x")) == snapshots.digest(b"x")


@pytest.mark.parametrize("make", ["toolkit", "tool"])
def test_toolkit_and_tool_own_the_runtime_they_build_and_nothing_else(
    make: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_sandbox import SandboxExecTool, SandboxToolkit

    monkeypatch.setenv("LANGCHAIN_SANDBOX_HOME", str(tmp_path))
    options = {"base_dir": str(tmp_path / "local")}
    owner = (
        SandboxToolkit(provider="local", provider_options=options)
        if make == "toolkit"
        else SandboxExecTool(provider="local", provider_options=options)
    )
    tools = owner.get_tools() if isinstance(owner, SandboxToolkit) else [owner]
    built = {id(t._explicit_runtime()) for t in tools}  # type: ignore[attr-defined]
    assert len(built) == 1, "one runtime for every tool of the owner"
    runtime = tools[0]._explicit_runtime()  # type: ignore[attr-defined]
    owner.close()
    assert runtime.closed
    owner.close()  # idempotent

    passed = SandboxRuntime(provider_options=options, idle_ttl=None)
    try:
        lender = (
            SandboxToolkit(runtime=passed) if make == "toolkit" else SandboxExecTool(runtime=passed)
        )
        lender.close()
        assert not passed.closed, "a runtime passed in belongs to the caller"
    finally:
        passed.close()
