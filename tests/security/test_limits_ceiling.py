"""Class 9: the operator's time limit is a ceiling the model can lower, never raise."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_sandbox import SandboxExecTool, SandboxRuntime, SandboxShellTool
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider

_LIMIT = 2.0


@pytest.fixture
def runtime(tmp_path: Path, isolation: str) -> Iterator[SandboxRuntime]:
    made = SandboxRuntime(
        LocalProvider(base_dir=tmp_path / "sandboxes", isolation=isolation),
        spec=SessionSpec(limits=Limits(timeout=_LIMIT)),
        persist="never",
    )
    try:
        yield made
    finally:
        made.close()


def test_a_model_asking_for_an_hour_gets_the_operators_limit(runtime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=runtime)
    # The code would finish after 3 s: only a timeout above the operator's 2 s lets it.
    message = tool.invoke(
        {
            "type": "tool_call",
            "id": "call-1",
            "name": tool.name,
            "args": {"code": "import time\ntime.sleep(3)\n'finished'", "timeout": 3600},
        }
    )
    result = message.artifact["result"]
    assert result["timed_out"]
    assert result["value"] is None
    assert "lowered from 3600 s to the sandbox's limit of 2 s" in str(message.content)


def test_the_ceiling_holds_for_commands_and_direct_runtime_calls(runtime: SandboxRuntime) -> None:
    command = runtime.run_command("default", "sleep 3; echo finished", timeout=1000).value
    assert command.timed_out
    assert "finished" not in command.stdout
    code = runtime.run_code("default", "import time\ntime.sleep(3)\n'done'", timeout=50).value
    assert code.timed_out
    assert code.value is None
    # Lowering stays allowed.
    short = runtime.run_code("default", "import time\ntime.sleep(3)", timeout=0.5).value
    assert short.timed_out
    assert not any("lowered" in notice for notice in short.notices)


def test_the_schema_no_longer_promises_an_hour() -> None:
    for tool in (SandboxExecTool(), SandboxShellTool()):
        schema = tool.tool_call_schema.model_json_schema()
        timeout = schema["properties"]["timeout"]
        assert "maximum" not in str(timeout)
        assert "time limit set by the operator" in str(timeout)
