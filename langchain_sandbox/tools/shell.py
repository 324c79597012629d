"""SandboxShellTool: shell commands in the thread's sandbox."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from pydantic import Field

from langchain_sandbox.tools.base import (
    SandboxCall,
    SandboxTool,
    SandboxToolArgs,
    ToolReply,
    execution_reply,
    notice_lines,
)
from langchain_sandbox.tools.descriptions import sandbox_facts
from langchain_sandbox.tools.processes import info_line
from langchain_sandbox.tools.streaming import listener


class SandboxShellArgs(SandboxToolArgs):
    """Arguments of [`SandboxShellTool`][langchain_sandbox.SandboxShellTool]."""

    command: str = Field(description="The command line, run by bash.")
    cwd: str | None = Field(
        default=None,
        description=(
            "Directory to change to first, relative to /home/user; the shell stays there, "
            "as after cd (default: where the last command left it)."
        ),
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Seconds before the command is stopped. At most the sandbox's time limit set by the "
            "operator (also the default); a larger value is lowered to that limit."
        ),
    )
    background: bool = Field(
        default=False,
        description=(
            "Start the command as a background process that keeps running (a server, a "
            "watcher) and return at once with its name and first output; manage it with "
            "sandbox_process. It runs in a new bash (exports of this shell do not apply)."
        ),
    )
    name: str | None = Field(
        default=None,
        description="With background=true: a name for the process (default: from the program).",
    )


_ABOUT = (
    "Run a shell command (bash) in the isolated sandbox and get back its stdout, stderr and "
    "exit code. Use it for file management, git, grep, running scripts. Files live under "
    "/home/user and are shared with the Python tool. The shell is persistent: the working "
    "directory (cd) and exported variables (export) carry over to later commands; shell "
    "functions, aliases and unexported variables do not. For a server or anything that "
    "keeps running, set background=true and manage it with sandbox_process."
)


class SandboxShellTool(SandboxTool):
    """Run a command in the thread's persistent shell (the same workspace the Python tool sees):
    ``cd`` and exported variables carry over to the thread's next commands, also after a resume
    or a fork (see [`SandboxRuntime.arun_shell`][langchain_sandbox.SandboxRuntime.arun_shell])."""

    name: str = "sandbox_shell"
    about: ClassVar[str | None] = _ABOUT
    description: str = f"{_ABOUT} {sandbox_facts(None, None)}"
    args_schema: type[SandboxShellArgs] = SandboxShellArgs
    streams_output: ClassVar[bool] = True

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        if args.get("background"):
            return await start_in_background(call, args)
        outcome = await call.runtime.arun_shell(
            call.thread_id,
            args["command"],
            timeout=args.get("timeout"),
            cwd=args.get("cwd"),
            record=call.record,
            on_output=listener(call.on_output),
            step_call=call.step_call,
            resumable=call.resumable,
        )
        return execution_reply(
            outcome, max_chars=self.max_output_chars, images_inline=call.images_inline
        )


async def start_in_background(call: SandboxCall, args: dict[str, Any]) -> ToolReply:
    """Start the shell tool's command as a service (it is started again after a restore)."""
    started = await call.runtime.astart_process(
        call.thread_id,
        args["command"],
        name=args.get("name"),
        cwd=args.get("cwd"),
        record=call.record,
        step_call=call.step_call,
        resumable=call.resumable,
    )
    info = started.value
    text = (
        f"Started in the background: {info_line(info)}\n"
        f"First output:\n{info.output or '(none yet)'}\n"
        f"Read more with sandbox_process action='output' name={info.name!r} "
        f"since={len(info.output.encode())}."
    )
    result = {"process": dataclasses.asdict(info)}
    return ToolReply(notice_lines(started.notices) + text, result, started.record)


__all__ = ["SandboxShellArgs", "SandboxShellTool", "start_in_background"]
