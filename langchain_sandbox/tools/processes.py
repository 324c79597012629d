"""SandboxProcessTool: the model's handle on processes that keep running, and their ports.

A process is started with ``sandbox_shell`` and ``background=true`` (`start_in_background`); this
tool lists them, reads their output from an offset, stops them and exposes a port as a URL. The
replies are short text the model reads, with the full values as the JSON result.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

from pydantic import Field

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.processes import ProcessInfo, ProcessOutput
from langchain_sandbox.results import truncate_middle
from langchain_sandbox.tools.base import (
    SandboxCall,
    SandboxTool,
    SandboxToolArgs,
    ToolReply,
    notice_lines,
)

_ABOUT = (
    "Manage processes that keep running in the sandbox after a call (web servers, watchers, "
    "long jobs). Start one with sandbox_shell and background=true: it returns the process's "
    "name and first output. Then: action='list' shows every process and its state; "
    "action='output' with its name returns what it printed since byte offset `since` (pass "
    "the next_offset of the previous reply to read only what is new); action='stop' stops it "
    "and its children; action='expose' with a port returns a URL where the user (and code "
    "outside the sandbox) can reach a server listening on that port in the sandbox (serve on "
    "0.0.0.0 or 127.0.0.1). Background processes started this way, and exposed ports, are "
    "started again if the sandbox is restored (you are told the new URLs)."
)


class SandboxProcessArgs(SandboxToolArgs):
    """Arguments of [`SandboxProcessTool`][langchain_sandbox.SandboxProcessTool]."""

    action: Literal["list", "output", "stop", "expose"] = Field(
        description="list | output | stop | expose."
    )
    name: str | None = Field(default=None, description="The process (for output and stop).")
    since: int = Field(
        default=0,
        ge=0,
        description="For output: the byte offset to read from (the previous next_offset).",
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="For expose: the port the server listens on."
    )


def info_line(info: ProcessInfo) -> str:
    """One line about a process: name, state (exit code), command and where it runs."""
    state = info.state if info.exit_code is None else f"{info.state}, exit code {info.exit_code}"
    return f"{info.name} ({state}): {info.command}  [cwd {info.cwd}]"


def output_text(output: ProcessOutput, max_chars: int) -> str:
    """What the model reads of a process's output: the text, then where to go on from."""
    parts = []
    if output.dropped:
        parts.append(f"[{output.dropped} bytes before this were dropped from the output buffer]")
    parts.append(truncate_middle(output.text, max_chars) if output.text else "(no new output)")
    state = (
        output.state
        if output.exit_code is None
        else f"{output.state}, exit code {output.exit_code}"
    )
    parts.append(f"[process {output.name}: {state}; next_offset={output.next_offset}]")
    return "\n".join(parts)


class SandboxProcessTool(SandboxTool):
    """List, read, stop and expose the thread's background processes (see the module
    docstring; the runtime calls are `SandboxRuntime.alist_processes` and its neighbours)."""

    name: str = "sandbox_process"
    about: ClassVar[str | None] = None
    description: str = _ABOUT
    args_schema: type[SandboxProcessArgs] = SandboxProcessArgs

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        action, name = args["action"], args.get("name")
        runtime, thread, common = call.runtime, call.thread_id, _common(call)
        if action == "list":
            listed = await runtime.alist_processes(thread, **common)
            lines = [info_line(i) for i in listed.value] or ["No background processes."]
            result: dict[str, Any] = {"processes": [dataclasses.asdict(i) for i in listed.value]}
            return _reply(listed.notices, "\n".join(lines), result, listed.record)
        if action == "expose":
            port = args.get("port")
            if port is None:
                raise InvalidInputError("action='expose' needs the port the server listens on.")
            exposed = await runtime.aexpose_port(thread, port, resumable=call.resumable, **common)
            text = f"Port {port} is served at {exposed.value}"
            return _reply(
                exposed.notices, text, {"port": port, "url": exposed.value}, exposed.record
            )
        if not name:
            raise InvalidInputError(f"action={action!r} needs the name of the process.")
        if action == "output":
            read = await runtime.aprocess_output(
                thread, name, since=args.get("since") or 0, **common
            )
            text = output_text(read.value, self.max_output_chars)
            return _reply(read.notices, text, dataclasses.asdict(read.value), read.record)
        stopped = await runtime.astop_process(thread, name, resumable=call.resumable, **common)
        text = f"Stopped. {info_line(stopped.value)}"
        return _reply(stopped.notices, text, dataclasses.asdict(stopped.value), stopped.record)


def _common(call: SandboxCall) -> dict[str, Any]:
    return {"record": call.record, "step_call": call.step_call}


def _reply(notices: list[str], text: str, result: dict[str, Any], record: Any) -> ToolReply:
    return ToolReply(notice_lines(notices) + text, result, record)


__all__ = ["SandboxProcessArgs", "SandboxProcessTool", "info_line", "output_text"]
