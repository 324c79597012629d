"""The process tools for a Deep Agents agent: ``sandbox_shell`` (``background=true``) and
``sandbox_process``, and ``sandbox_exec`` with host tools its code may call, going through a
[`SandboxBackend`][langchain_sandbox.SandboxBackend].

Deep Agents' graph has no ``sandbox`` channel: the backend files each changing call's record by
its place in the conversation (``_lineage``), and continues from there. These tools take the same
road: the record they start from is the one the backend's next call would use, and the record
they leave (a service started, a port exposed) is filed where the backend finds it, so a resume
in a new process or a fork starts the services of its checkpoint like any other thread's.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from pydantic import Field

from langchain_sandbox.tools.base import Content, SandboxCall, SandboxTool, ToolReply
from langchain_sandbox.tools.exec import SandboxExecTool
from langchain_sandbox.tools.processes import SandboxProcessTool
from langchain_sandbox.tools.shell import SandboxShellTool

if TYPE_CHECKING:
    from langchain_sandbox.deepagents._call import Call
    from langchain_sandbox.deepagents.backend import SandboxBackend


class _ThroughBackend(SandboxTool):
    """Runs the tool's own `_acall` inside a backend call, and files what it changed; it comes
    after the tool class in the bases (so the tool's name and description are the fields') and
    before `SandboxTool` (so its `_run` and `_arun` are the ones used)."""

    backend: Any = Field(default=None, exclude=True)

    async def _filed(
        self, backend_call: Call, args: dict[str, Any], config: RunnableConfig, run_manager: Any
    ) -> ToolReply:
        record = await backend_call.record()
        call = SandboxCall(
            runtime=backend_call.runtime,
            thread_id=backend_call.thread_id,
            record=record,
            step_call=backend_call.step_call,
            resumable=backend_call.resumable,
            on_output=None,
            config=config,
            run_manager=run_manager,
            caller_loop=None if isinstance(run_manager, CallbackManagerForToolRun) else _loop(),
        )
        reply = await self._acall(call, args)
        if reply.record.get("head") != (record or {}).get("head"):
            await backend_call.file(reply.record, record)
        return reply

    def _run(
        self, *, config: RunnableConfig, runtime: Any = None, run_manager: Any = None, **args: Any
    ) -> tuple[Content, dict[str, Any]]:
        backend: SandboxBackend = self.backend
        with self._tool_errors():
            reply = backend._sync(lambda call: self._filed(call, args, config, run_manager))
        return reply.content, reply.artifact

    async def _arun(
        self, *, config: RunnableConfig, runtime: Any = None, run_manager: Any = None, **args: Any
    ) -> tuple[Content, dict[str, Any]]:
        backend: SandboxBackend = self.backend
        with self._tool_errors():
            reply = await backend._async(lambda call: self._filed(call, args, config, run_manager))
        return reply.content, reply.artifact


class BackendShellTool(SandboxShellTool, _ThroughBackend):
    """``sandbox_shell`` through a backend (for ``background=true``; Deep Agents' own
    ``execute`` runs foreground commands)."""


class BackendProcessTool(SandboxProcessTool, _ThroughBackend):
    """``sandbox_process`` through a backend."""


class BackendExecTool(SandboxExecTool, _ThroughBackend):
    """``sandbox_exec`` through a backend (its ``tools`` are the backend's ``code_tools``)."""


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def process_tools(backend: SandboxBackend) -> list[Any]:
    """The two tools, bound to ``backend``."""
    return [BackendShellTool(backend=backend), BackendProcessTool(backend=backend)]


__all__ = ["BackendExecTool", "BackendProcessTool", "BackendShellTool", "process_tools"]
