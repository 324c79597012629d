"""Every public constructor refuses an argument it does not take, and says what was meant.

A typo (``providr=``) or an option of another object (``isolation=``, the local provider's)
used to be dropped without a word by the pydantic tools; here each one fails at construction
with :class:`UnknownArgumentError`, naming the closest valid argument or where the option
belongs. ``provider=`` takes a configured provider object wherever it takes a name, and
``provider_options`` are checked against that provider's own parameters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox import (
    AuthenticationError,
    ConfigurationError,
    LocalProvider,
    SandboxExecTool,
    SandboxMiddleware,
    SandboxRuntime,
    SandboxShellTool,
    SandboxToolkit,
    SandboxToolNode,
    UnknownArgumentError,
)
from langchain_sandbox.providers import get_provider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator

FAKE_KEY = "e2b_test_constructor_key"


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGCHAIN_SANDBOX_HOME", str(tmp_path / "home"))
    for name in ("E2B_API_KEY", "RUNLOOP_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _refused(build: Any, **kwargs: Any) -> str:
    with pytest.raises(UnknownArgumentError) as caught:
        build(**kwargs)
    # A TypeError as Python's own, and a ConfigurationError: the developer's, never the model's.
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, ConfigurationError)
    return str(caught.value)


@pytest.mark.parametrize(
    ("build", "typo", "meant"),
    [
        (SandboxExecTool, "providr", "provider"),
        (SandboxShellTool, "max_output_char", "max_output_chars"),
        (SandboxToolkit, "provder", "provider"),
        (SandboxToolkit, "includes", "include"),
        (SandboxRuntime, "idle_tl", "idle_ttl"),
        (SandboxMiddleware, "run_onc", "run_once"),
    ],
)
def test_a_typo_names_the_argument_meant(build: Any, typo: str, meant: str) -> None:
    message = _refused(build, **{typo: "x"})
    assert f"unknown argument {typo!r}" in message
    assert f"Did you mean {meant!r}?" in message


def test_tool_node_names_the_argument_meant() -> None:
    with pytest.raises(UnknownArgumentError, match="Did you mean 'run_once'"):
        SandboxToolNode([], run_onc=True)  # type: ignore[call-arg]


def test_deepagents_backend_names_the_argument_meant() -> None:
    pytest.importorskip("deepagents")
    from langchain_sandbox.deepagents import SandboxBackend

    message = _refused(SandboxBackend, provider_option={"isolation": "none"})
    assert "Did you mean 'provider_options'?" in message


def test_a_provider_option_says_where_it_belongs() -> None:
    message = _refused(SandboxExecTool, isolation="none")
    assert message == (
        "SandboxExecTool got an unknown argument 'isolation': isolation is an option of the "
        "local provider: pass provider=LocalProvider(isolation='none') or "
        "provider_options={'isolation': 'none'}."
    )
    # An owner without provider= says how to reach the provider through the runtime.
    message = _refused(SandboxMiddleware, isolation="none")
    assert "pass runtime=SandboxRuntime(provider=LocalProvider(isolation='none'))" in message
    assert "E2BProvider(template='py')" in _refused(SandboxToolkit, template="py")


def test_runtime_and_limit_options_say_where_they_belong() -> None:
    message = _refused(SandboxExecTool, idle_ttl=5)
    assert "idle_ttl is an option of SandboxRuntime: pass runtime=SandboxRuntime(idle_ttl=5)" in (
        message
    )
    message = _refused(SandboxExecTool, memory_mb=512)
    assert "runtime=SandboxRuntime(spec=SessionSpec(limits=Limits(memory_mb=512)))" in message
    message = _refused(SandboxRuntime, network=True)
    assert "pass spec=SessionSpec(network=True)" in message


@pytest.mark.parametrize("build", [SandboxExecTool, SandboxToolkit, SandboxRuntime])
def test_a_typo_in_provider_options_fails(build: Any) -> None:
    message = _refused(build, provider="local", provider_options={"isolaton": "none"})
    assert "The local provider has no option 'isolaton'" in message
    assert "Did you mean 'isolation'?" in message


def test_get_provider_checks_its_options() -> None:
    with pytest.raises(UnknownArgumentError, match="Did you mean 'base_dir'"):
        get_provider("local", basedir="/x")


def test_deepagents_backend_checks_provider_options() -> None:
    pytest.importorskip("deepagents")
    from langchain_sandbox.deepagents import SandboxBackend

    message = _refused(SandboxBackend, provider="local", provider_options={"isolaton": "none"})
    assert "Did you mean 'isolation'?" in message
    assert "need a provider" in _refused(SandboxBackend, provider_options={"isolation": "none"})


def test_options_with_a_provider_object_are_refused(tmp_path: Path) -> None:
    provider = LocalProvider(base_dir=tmp_path / "sessions")
    message = _refused(SandboxExecTool, provider=provider, provider_options={"isolation": "none"})
    assert "configure the LocalProvider you pass instead" in message


def test_a_configured_local_provider_runs_the_tool_and_toolkit(tmp_path: Path) -> None:
    tool = SandboxExecTool(provider=LocalProvider(base_dir=tmp_path / "tool"))
    try:
        assert "value:\n42" in tool.invoke({"code": "6 * 7"})
        assert any((tmp_path / "tool").iterdir()), "the provider's own base_dir was not used"
    finally:
        tool.close()
    toolkit = SandboxToolkit(provider=LocalProvider(base_dir=tmp_path / "kit"))
    try:
        shell = next(t for t in toolkit.get_tools() if t.name == "sandbox_shell")
        assert "hi" in str(shell.invoke({"command": "echo hi"}))
    finally:
        toolkit.close()


def test_a_configured_e2b_provider_runs_the_tool() -> None:
    from langchain_sandbox import E2BProvider

    with E2BEmulator(api_key=FAKE_KEY) as emulator:
        provider = E2BProvider(
            api_key=FAKE_KEY,
            api_url=emulator.url,
            sandbox_url=emulator.url,
            template="analysis-tpl",
        )
        tool = SandboxExecTool(provider=provider)
        try:
            assert "value:\n42" in tool.invoke({"code": "6 * 7"})
            create = next(r for r in emulator.requests if r.route == "POST /v2/sandboxes")
            assert create.body["templateID"] == "analysis-tpl"
        finally:
            tool.close()


def test_missing_key_fails_at_construction() -> None:
    with pytest.raises(AuthenticationError, match="No E2B API key"):
        SandboxExecTool(provider="e2b")
    pytest.importorskip("deepagents")
    from langchain_sandbox.deepagents import SandboxBackend

    with pytest.raises(AuthenticationError, match="No Runloop API key"):
        SandboxBackend(provider="runloop")
