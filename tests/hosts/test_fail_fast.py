"""Misconfiguration reaches the developer as an exception, never the model as a tool result.

Each case is run the way a user meets it: an agent built with ``create_agent`` and
``SandboxMiddleware`` (or a tool), in a fresh interpreter whose environment lacks the piece in
question (an extra, an API key, bubblewrap). The error must be raised by the constructor (off any
event loop) or, where it is built on a loop, by the agent's run, and no model call may see it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_AGENT = """
import asyncio, sys
from langchain.agents import create_agent
from langchain_sandbox import ConfigurationError, SandboxExecTool, SandboxMiddleware, SandboxRuntime
from langchain_sandbox.testing import ScriptedToolModel, call

seen = []

def script(messages):
    seen.append(messages[-1])
    return call("sandbox_exec", code="1 + 1") if len(seen) == 1 else "done"

def report(where, exc):
    assert isinstance(exc, ConfigurationError), repr(exc)
    assert all(m.type != "tool" for m in seen), "the model saw the error"
    print(where, type(exc).__name__, exc, sep="|")

# 1. At construction: a runtime (and a tool) built off the event loop.
try:
    SandboxRuntime(PROVIDER, provider_options=OPTIONS)
except ConfigurationError as exc:
    report("runtime", exc)
else:
    sys.exit("SandboxRuntime was built")
try:
    SandboxExecTool(provider=PROVIDER, provider_options=OPTIONS)
except ConfigurationError as exc:
    report("tool", exc)
else:
    sys.exit("SandboxExecTool was built")

# 2. Built on an event loop (where checking would block it): the agent's first run raises.
async def main():
    runtime = SandboxRuntime(PROVIDER, provider_options=OPTIONS)
    agent = create_agent(
        ScriptedToolModel(script=script), middleware=[SandboxMiddleware(runtime=runtime)]
    )
    try:
        await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]},
                            {"configurable": {"thread_id": "t"}})
    except ConfigurationError as exc:
        report("run", exc)
    else:
        sys.exit("the run went on")
    finally:
        await runtime.aclose()
    # A tool used on its own in a graph-less async program: raised by the call, not returned.
    tool = SandboxExecTool(provider=PROVIDER, provider_options=OPTIONS)
    try:
        await tool.ainvoke({"type": "tool_call", "id": "c", "name": "sandbox_exec",
                            "args": {"code": "1"}})
    except ConfigurationError as exc:
        report("call", exc)
    else:
        sys.exit("the tool returned")

asyncio.run(main())
"""

_BLOCK_MODULES = """
import sys
for name in BLOCKED:
    sys.modules[name] = None  # "import name" now raises ImportError
"""


def _run(
    provider: str,
    options: dict[str, str],
    *,
    env: dict[str, str],
    blocked: tuple[str, ...] = (),
) -> list[list[str]]:
    prelude = f"PROVIDER = {provider!r}\nOPTIONS = {options!r}\nBLOCKED = {blocked!r}\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + _BLOCK_MODULES + textwrap.dedent(_AGENT)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # One short line per case; no traceback logged on the way (the Runloop path logged 44 lines).
    assert "Traceback" not in done.stderr, done.stderr
    return [line.split("|") for line in done.stdout.splitlines()]


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@pytest.mark.parametrize(
    ("provider", "blocked", "extra"),
    [
        ("e2b", ("e2b", "e2b_code_interpreter"), "e2b"),
        ("runloop", ("runloop_api_client",), "runloop"),
    ],
)
def test_a_missing_extra_is_raised_to_the_developer(
    provider: str, blocked: tuple[str, ...], extra: str
) -> None:
    env = _env(E2B_API_KEY="e2b_test_key", RUNLOOP_API_KEY="rl_test_key")
    cases = _run(provider, {}, env=env, blocked=blocked)
    assert [c[0] for c in cases] == ["runtime", "tool", "run", "call"]
    for _, kind, message in cases:
        assert kind == "MissingDependencyError"
        assert f"pip install 'langchain-sandbox[{extra}]'" in message


@pytest.mark.parametrize(
    ("provider", "variable"), [("e2b", "E2B_API_KEY"), ("runloop", "RUNLOOP_API_KEY")]
)
def test_a_missing_api_key_is_raised_to_the_developer(provider: str, variable: str) -> None:
    cases = _run(provider, {}, env=_env())
    assert [c[0] for c in cases] == ["runtime", "tool", "run", "call"]
    for _, kind, message in cases:
        assert kind == "AuthenticationError"
        assert variable in message


def test_missing_bubblewrap_is_raised_to_the_developer(tmp_path: Path) -> None:
    # A PATH with Python's own directory but no bwrap.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = _env(PATH=f"{bin_dir}:{Path(sys.executable).parent}")
    cases = _run("local", {}, env=env)
    assert [c[0] for c in cases] == ["runtime", "tool", "run", "call"]
    for _, kind, message in cases:
        assert kind == "IsolationUnavailableError"
        assert "apt-get install bubblewrap" in message


def test_bubblewrap_without_user_namespaces_is_raised_to_the_developer(tmp_path: Path) -> None:
    # What bubblewrap prints where unprivileged user namespaces are disabled.
    failing = tmp_path / "bwrap"
    failing.write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    failing.chmod(0o755)
    cases = _run("local", {"bwrap": str(failing)}, env=_env())
    assert [c[0] for c in cases] == ["runtime", "tool", "run", "call"]
    for _, kind, message in cases:
        assert kind == "IsolationUnavailableError"
        assert "user namespaces" in message
