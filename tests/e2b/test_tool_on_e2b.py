"""The issue's user story: ``SandboxExecTool(provider="e2b")`` with only the SDK's settings."""

from __future__ import annotations

from langchain_sandbox import SandboxExecTool
from langchain_sandbox.testing.e2b_emulator import E2BEmulator


def test_exec_tool_on_e2b_keeps_state_and_closes_its_sandbox(sdk_env: E2BEmulator) -> None:
    tool = SandboxExecTool(provider="e2b")  # E2B_API_KEY / E2B_*_URL come from the environment
    try:
        assert "value:\n42" in tool.invoke({"code": "answer = 6 * 7\nanswer"})
        reply = tool.invoke({"code": "print(answer + 1)\n1 / 0"})
        assert "43" in reply
        assert "ZeroDivisionError" in reply
        [sandbox_id] = sdk_env.sandbox_ids()
        # One sandbox for the thread, tagged for gc; warm calls are one request each.
        create = next(r for r in sdk_env.requests if r.route == "POST /v2/sandboxes")
        assert create.body["metadata"]["langchain_sandbox"] == "1"
        assert sdk_env.count("jupyter execute", sandbox_id) >= 2
    finally:
        runtime = tool._explicit_runtime()
        assert runtime is not None
        runtime.close()
    assert sdk_env.sandbox_ids() == []
