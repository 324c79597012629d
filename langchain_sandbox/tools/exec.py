"""SandboxExecTool: stateful Python for a model, like a Jupyter kernel it cannot escape."""

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
from langchain_sandbox.tools.descriptions import sandbox_facts
from langchain_sandbox.tools.streaming import listener


class SandboxExecArgs(SandboxToolArgs):
    """Arguments of [`SandboxExecTool`][langchain_sandbox.SandboxExecTool]."""

    code: str = Field(
        description=(
            "Python source to run. Variables, imports and functions persist between calls; "
            "the value of a final bare expression is shown, as in a notebook."
        )
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Seconds before the run is stopped. At most the sandbox's time limit set by the "
            "operator (also the default); a larger value is lowered to that limit."
        ),
    )


_ABOUT = (
    "Run Python code in an isolated sandbox and get back stdout, stderr, errors and the value "
    "of the last expression. State persists between calls like a Jupyter notebook: define "
    "variables, import modules and write functions once, then reuse them. The working "
    "directory is /home/user, where files persist too. matplotlib figures are returned as "
    "images. Errors in the code come back as a traceback to fix."
)


class SandboxExecTool(SandboxTool):
    """Run Python in the thread's isolated sandbox; variables persist between calls.

    Outside a graph, ``SandboxExecTool().invoke({"code": "print(1 + 1)"})`` runs in the default
    local sandbox. In a graph, the call joins the thread's sandbox (``configurable.thread_id``),
    streams its output while it runs (``stream_mode="custom"`` and ``astream_events``), and reports the updated sandbox
    record in its artifact.
    """

    name: str = "sandbox_exec"
    about: ClassVar[str | None] = _ABOUT
    description: str = f"{_ABOUT} {sandbox_facts(None, None)}"
    args_schema: type[SandboxExecArgs] = SandboxExecArgs
    streams_output: ClassVar[bool] = True

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        outcome = await call.runtime.arun_code(
            call.thread_id,
            args["code"],
            timeout=args.get("timeout"),
            record=call.record,
            on_output=listener(call.on_output),
            step_call=call.step_call,
            resumable=call.resumable,
        )
        return execution_reply(
            outcome, max_chars=self.max_output_chars, images_inline=call.images_inline
        )


__all__ = ["SandboxExecArgs", "SandboxExecTool"]
