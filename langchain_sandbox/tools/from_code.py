"""The host side of tools called from sandboxed code (``SandboxExecTool(tools=[...])``).

Sandboxed code calls ``tools.search(query="x")``; the provider's channel brings the call here
(`langchain_sandbox.providers.tool_channel`). `ToolBridge` then, for each call in order:

1. counts it against the session's `Limits` (``max_tool_calls``, ``tool_calls_seconds``);
2. looks it up in the outer call's journal (`langchain_sandbox.snapshots.tool_journal`): a
   replayed outer call (a crash, a resume in another process) gets the recorded result and the
   tool does not run again;
3. runs the LangChain tool with the outer run's config (its callbacks, so the inner call is a
   child run of the sandbox call in traces and ``astream_events``; its thread and context),
   on the caller's event loop when the outer call was async, in a worker thread otherwise. The
   tool's own schema validates the arguments;
4. records the result in the journal the moment the tool returns, then answers the code.

A validation error or an exception of the tool comes back to the code as ``tools.ToolError``
with the tool's message: the code can catch it. Outputs reach the code as JSON values
(a Pydantic model as its dump; anything else JSON cannot hold as its ``str``).

A tool that calls ``interrupt()`` cannot pause the graph from inside the code: the interrupt is
turned into a ``ToolError`` saying so (see ``docs/tools-from-code.md``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as as_tool
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel, ValidationError

from langchain_sandbox.errors import InvalidInputError, SandboxError
from langchain_sandbox.providers.base import Limits
from langchain_sandbox.providers.tool_channel import error_reply
from langchain_sandbox.snapshots.tool_journal import JournalEntry, ToolJournal, arguments_digest


def host_tools(tools: Sequence[BaseTool | Callable[..., Any]]) -> dict[str, BaseTool]:
    """The tools code may call, by name, checked once when the exec tool is built.

    Each is a LangChain tool or a function (made one with ``@tool``). A copy is kept that raises
    its errors instead of returning them as text (``handle_tool_error``), so the code can tell
    an error from an output.

    Raises:
        InvalidInputError: a name is not a Python identifier, starts with ``_`` or is used twice.
    """
    found: dict[str, BaseTool] = {}
    for item in tools:
        tool = item if isinstance(item, BaseTool) else as_tool(item)
        name = tool.name
        if not name.isidentifier() or name.startswith("_"):
            raise InvalidInputError(
                f"Tool {name!r} cannot be called from code as tools.{name}: its name must be a "
                "Python identifier not starting with '_' (give the tool another name)."
            )
        if name in found:
            raise InvalidInputError(f"Two tools are named {name!r}; code calls them by name.")
        found[name] = tool.model_copy(
            update={"handle_tool_error": False, "handle_validation_error": False}
        )
    return found


def _parameters(tool: BaseTool) -> list[tuple[str, str]]:
    """``(name, "name: type = default")`` per argument, in schema order."""
    out = []
    for name, schema in tool.args.items():
        kind = schema.get("type") or (
            "|".join(str(s.get("type", "any")) for s in schema.get("anyOf", [])) or "any"
        )
        text = f"{name}: {kind}"
        if "default" in schema:
            text += f" = {json.dumps(schema['default'])}"
        out.append((name, text))
    return out


def tools_description(tools: dict[str, BaseTool]) -> str:
    """What the model reads about the tools in the exec tool's description."""
    lines = [
        "The code can call these host tools through the `tools` object (results are Python "
        "values; a failure raises tools.ToolError with the tool's message; `await tools.aNAME(...)` "
        "in async code; calls run one at a time). Prefer one code call that loops over many tool "
        "calls and returns only what matters:"
    ]
    for name, tool in tools.items():
        signature = ", ".join(text for _, text in _parameters(tool))
        summary = inspect.cleandoc(tool.description or "").replace("\n", " ")
        lines.append(f"- tools.{name}({signature}): {summary}")
    return "\n".join(lines)


@dataclass(frozen=True)
class InnerRun:
    """How inner calls run: the outer run's config with its callbacks as parents, and where.

    Attributes:
        config: The outer call's config, its callbacks the outer run's children.
        loop: The caller's event loop, for an async outer call (the tool's ``ainvoke`` runs
            there, where its callbacks belong); ``None``: ``invoke`` in a worker thread.
        context: The caller's context variables (LangGraph's runtime and config live there).
    """

    config: RunnableConfig
    loop: asyncio.AbstractEventLoop | None
    context: contextvars.Context

    @classmethod
    def of(
        cls, config: RunnableConfig, run_manager: Any, loop: asyncio.AbstractEventLoop | None
    ) -> InnerRun:
        """Made in the outer call's own thread, before it hands over to the runtime's loop."""
        child = (
            patch_config(config, callbacks=run_manager.get_child())
            if run_manager is not None
            else config
        )
        return cls(child, loop, contextvars.copy_context())

    async def invoke(self, tool: BaseTool, args: dict[str, Any]) -> Any:
        context = self.context.copy()
        if self.loop is None:
            return await asyncio.to_thread(context.run, tool.invoke, args, self.config)
        future = context.run(
            asyncio.run_coroutine_threadsafe, tool.ainvoke(args, self.config), self.loop
        )
        try:
            return await asyncio.wrap_future(future)
        finally:
            future.cancel()  # the outer call ended or ran out of time: stop the inner one


class ToolBridge:
    """Runs the tools one ``run_code`` call's code asks for (a
    [`ToolHost`][langchain_sandbox.providers.tool_channel.ToolHost]); see the module docstring.

    Args:
        tools: From `host_tools`.
        run: How to run them (`InnerRun`).
        limits: The session's limits (``max_tool_calls``, ``tool_calls_seconds``).
        journal: Where results are recorded and replayed from; ``None`` when nothing can replay
            the outer call (no checkpointer, or no tool call id).
    """

    def __init__(
        self,
        tools: dict[str, BaseTool],
        run: InnerRun,
        limits: Limits,
        journal: ToolJournal | None,
    ) -> None:
        self._tools = tools
        self._run = run
        self._limits = limits
        self._journal = journal
        self._count = 0
        self._seconds = 0.0
        self._notices: list[str] = []
        self.replayed = 0
        """Inner calls answered from the journal instead of running again."""

    @property
    def specs(self) -> list[dict[str, Any]]:
        return [
            {"name": name, "params": [param for param, _ in _parameters(tool)]}
            for name, tool in self._tools.items()
        ]

    def notices(self) -> list[str]:
        notes = list(self._notices)
        if self.replayed:
            notes.append(
                f"{self.replayed} tool call(s) from the code returned the result recorded before "
                "this call was replayed; they did not run again."
            )
        return notes

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        tool = self._tools.get(name)
        if tool is None:
            return error_reply(
                "invalid", f"no tool named {name!r}; tools: {', '.join(self._tools)}"
            )
        limited = self._over_limit()
        if limited is not None:
            return limited
        seq, self._count = self._count, self._count + 1
        digest = arguments_digest(name, args)
        recorded = await self._recorded(seq, digest)
        if recorded is not None:
            self.replayed += 1
            return _reply(recorded)
        budget = self._limits.tool_calls_seconds - self._seconds
        started = time.monotonic()
        try:
            async with asyncio.timeout(budget):
                entry = await self._invoke(tool, args)
        except TimeoutError:
            self._limit_notice(f"took more than {self._limits.tool_calls_seconds:g} s in all")
            return error_reply("limit", self._notices[-1])
        finally:
            self._seconds += time.monotonic() - started
        if self._journal is not None:
            try:
                await self._journal.record(seq, digest, entry)
            except SandboxError as exc:
                self._notices.append(
                    f"the result of tool call {seq + 1} ({name}) could not be recorded ({exc}); "
                    "a replay of this call would run it again."
                )
        return _reply(entry)

    def _over_limit(self) -> dict[str, Any] | None:
        if self._count >= self._limits.max_tool_calls:
            self._limit_notice(f"reached the limit of {self._limits.max_tool_calls} calls")
            return error_reply("limit", self._notices[-1])
        if self._seconds >= self._limits.tool_calls_seconds:
            self._limit_notice(f"took more than {self._limits.tool_calls_seconds:g} s in all")
            return error_reply("limit", self._notices[-1])
        return None

    def _limit_notice(self, what: str) -> None:
        notice = (
            f"Tool calls from the code {what} (the session's limits); later calls were refused."
        )
        if notice not in self._notices:
            self._notices.append(notice)

    async def _recorded(self, seq: int, digest: str) -> JournalEntry | None:
        if self._journal is None:
            return None
        try:
            return await self._journal.find(seq, digest)
        except SandboxError:
            return None  # an unreadable journal: the call runs (and its record is retried)

    async def _invoke(self, tool: BaseTool, args: dict[str, Any]) -> JournalEntry:
        try:
            output = await self._run.invoke(tool, args)
        except ValidationError as exc:
            return JournalEntry(False, error=f"invalid arguments for {tool.name}: {_errors(exc)}")
        except GraphBubbleUp:
            return JournalEntry(
                False,
                error=(
                    f"{tool.name} asked to pause the graph (interrupt()), which a tool called "
                    "from code cannot do; call it as a tool of the agent instead"
                ),
            )
        except Exception as exc:
            return JournalEntry(False, error=_tool_message(exc))
        return JournalEntry(True, value=_json_value(output))


def _reply(entry: JournalEntry) -> dict[str, Any]:
    return {"ok": True, "value": entry.value} if entry.ok else error_reply("tool", entry.error)


def _errors(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error.get("loc", ())) or "arguments"
        parts.append(f"{where}: {error.get('msg')}")
    return "; ".join(parts)


def _tool_message(exc: Exception) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


def _json_value(output: Any) -> Any:
    """The tool's output as a JSON value (what the journal keeps and the code receives)."""

    def fallback(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        if isinstance(value, (set, frozenset)):
            return list(value)
        return str(value)

    return json.loads(json.dumps(output, default=fallback))


__all__ = ["InnerRun", "ToolBridge", "host_tools", "tools_description"]
