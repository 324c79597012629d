"""SandboxExecTool: stateful Python for a model, like a Jupyter kernel it cannot escape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from langchain_core.tools import BaseTool
from pydantic import Field, PrivateAttr

from langchain_sandbox.snapshots.tool_journal import ToolJournal
from langchain_sandbox.tools.base import (
    SandboxCall,
    SandboxTool,
    SandboxToolArgs,
    ToolReply,
    execution_reply,
)
from langchain_sandbox.tools.descriptions import sandbox_facts
from langchain_sandbox.tools.from_code import InnerRun, ToolBridge, host_tools, tools_description
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

    Args:
        tools: Host tools the code may call as ``tools.name(**args)`` (LangChain tools or
            functions): each call runs on the host with the run's config, and its result is
            recorded so a replayed call does not repeat it. See ``docs/tools-from-code.md``.
    """

    name: str = "sandbox_exec"
    about: ClassVar[str | None] = _ABOUT
    description: str = f"{_ABOUT} {sandbox_facts(None, None)}"
    args_schema: type[SandboxExecArgs] = SandboxExecArgs
    streams_output: ClassVar[bool] = True
    tools: Sequence[BaseTool | Callable[..., Any]] = Field(default_factory=list, exclude=True)

    _host_tools: dict[str, BaseTool] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any) -> None:
        described = "description" in self.model_fields_set  # the base class sets it
        super().model_post_init(context)
        self._host_tools = host_tools(self.tools)
        if self._host_tools and not described:
            self.description = f"{self.description}\n\n{tools_description(self._host_tools)}"

    def _bridge(self, call: SandboxCall) -> ToolBridge | None:
        """The host side of this call's tools, journaled where the call can be replayed."""
        if not self._host_tools:
            return None
        journal = None
        store = getattr(call.runtime.snapshotter, "store", None)
        if call.resumable and call.step_call is not None and store is not None:
            journal = ToolJournal(store, call.thread_id, call.step_call.call_id)
        run = InnerRun.of(call.config or {}, call.run_manager, call.caller_loop)
        return ToolBridge(self._host_tools, run, call.runtime.spec.limits, journal)

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        outcome = await call.runtime.arun_code(
            call.thread_id,
            args["code"],
            timeout=args.get("timeout"),
            record=call.record,
            on_output=listener(call.on_output),
            step_call=call.step_call,
            resumable=call.resumable,
            tools=self._bridge(call),
        )
        return execution_reply(
            outcome, max_chars=self.max_output_chars, images_inline=call.images_inline
        )


__all__ = ["SandboxExecArgs", "SandboxExecTool"]
