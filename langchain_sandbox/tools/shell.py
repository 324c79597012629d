"""SandboxShellTool: shell commands in the thread's sandbox."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from langchain_sandbox.tools.base import (
    SandboxCall,
    SandboxTool,
    SandboxToolArgs,
    ToolReply,
    execution_reply,
)
from langchain_sandbox.workspace import resolve_path


class SandboxShellArgs(SandboxToolArgs):
    """Arguments of :class:`SandboxShellTool`."""

    command: str = Field(description="The command line, run with bash -c.")
    cwd: str | None = Field(
        default=None,
        description="Directory to run in, relative to /home/user (default: /home/user).",
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Seconds before the command is stopped. At most the sandbox's time limit set by the "
            "operator (also the default); a larger value is lowered to that limit."
        ),
    )


class SandboxShellTool(SandboxTool):
    """Run a shell command in the thread's sandbox (the same workspace the Python tool sees)."""

    name: str = "sandbox_shell"
    description: str = (
        "Run a shell command (bash) in the isolated sandbox and get back its stdout, stderr and "
        "exit code. Use it for file management, git, grep, running scripts. Files live under "
        "/home/user and are shared with the Python tool. Each command starts a fresh shell, so "
        "`cd` and exported variables do not carry over: pass cwd instead. No network access."
    )
    args_schema: type[SandboxShellArgs] = SandboxShellArgs
    streams_output: ClassVar[bool] = True

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        cwd = args.get("cwd") or (call.record or {}).get("cwd")
        outcome = await call.runtime.arun_command(
            call.thread_id,
            args["command"],
            timeout=args.get("timeout"),
            cwd=resolve_path(cwd) if cwd else None,
            record=call.record,
            on_output=call.on_output,
            step_call=call.step_call,
        )
        return execution_reply(outcome, max_chars=self.max_output_chars)


__all__ = ["SandboxShellArgs", "SandboxShellTool"]
