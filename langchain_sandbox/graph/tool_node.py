"""SandboxToolNode: a ``ToolNode`` for hand-built graphs that keeps the ``sandbox`` channel current.

```python
graph = StateGraph(SandboxGraphState)
graph.add_node("tools", SandboxToolNode(SandboxToolkit().get_tools()))
```

It is a plain ``ToolNode`` (any tool may sit next to the sandbox tools; errors, injection and
``Send`` inputs work as usual) with [`SandboxToolCallWrapper`][langchain_sandbox.SandboxToolCallWrapper]
as its ``wrap_tool_call`` / ``awrap_tool_call``, and a default ``handle_tool_errors`` that lets
misconfiguration reach the developer. Of ToolNode it uses the public hooks only
(``wrap_tool_call``, ``awrap_tool_call``, ``ToolCallRequest.override``, and the request's
``state``, ``tool_call`` and ``runtime.config``); of the task config, the few keys
`step` reads. Both are pinned by
``tests/graph/test_tool_node_hooks.py``: each sandbox tool's record lands in the state's
``sandbox`` key, each sandbox call runs once even if the node is re-run after an interrupt, and
each starts from the record of its step (``Send`` fan-out, calls re-run after a crash).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import TOOL_CALL_ERROR_TEMPLATE

from langchain_sandbox.core.arguments import checked_init
from langchain_sandbox.errors import ConfigurationError
from langchain_sandbox.graph.tool_calls import (
    SandboxToolCallWrapper,
    bind_runtime,
    is_sandbox_tool,
)
from langchain_sandbox.runtime import SandboxRuntime


def _errors_for_the_model(error: Exception) -> str:
    """``SandboxToolNode``'s ``handle_tool_errors=True``: a tool's failure becomes a message the
    model reads, except misconfiguration (a graph that cannot keep the sandbox's record, a
    missing extra...), which no model can fix and which reaches the developer."""
    if isinstance(error, ConfigurationError):
        raise error
    return TOOL_CALL_ERROR_TEMPLATE.format(error=repr(error))


class SandboxToolNode(ToolNode):
    """A ``ToolNode`` whose sandbox tools update the graph's ``sandbox`` channel.

    The graph's state must declare the channel (``SandboxGraphState``, or ``sandbox:
    NotRequired[SandboxChannel]`` in your schema): LangGraph drops updates to undeclared keys.

    Args:
        tools: The tools; sandbox tools and any others.
        runtime: The [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] sandbox tools without one of their own use. Without
            it they find one per call: the run's context (``sandbox_runtime``),
            ``configurable["sandbox_runtime"]``, or the process-wide default on the local provider.
        run_once: Run each sandbox call as a LangGraph task, so a node re-run after an
            ``interrupt()`` (another tool of the same message asking a human, say) replays the
            call's result instead of running it again.
        name, tags, handle_tool_errors, messages_key: As for ``ToolNode``.
    """

    @checked_init
    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        runtime: SandboxRuntime | None = None,
        run_once: bool = True,
        name: str = "tools",
        tags: list[str] | None = None,
        handle_tool_errors: Any = True,
        messages_key: str = "messages",
    ) -> None:
        wrapper = SandboxToolCallWrapper(
            runtime=runtime,
            messages_key=messages_key,
            run_once=run_once,
            ordered_tools=[t.name for t in tools if isinstance(t, BaseTool) and is_sandbox_tool(t)],
        )
        super().__init__(
            [bind_runtime(t, runtime) if isinstance(t, BaseTool) else t for t in tools],
            name=name,
            tags=tags,
            handle_tool_errors=(
                _errors_for_the_model if handle_tool_errors is True else handle_tool_errors
            ),
            messages_key=messages_key,
            wrap_tool_call=wrapper.wrap,
            awrap_tool_call=wrapper.awrap,
        )
        self.sandbox_runtime = runtime


__all__ = ["SandboxToolNode"]
