"""LangGraph glue: the ``sandbox`` state channel, SandboxToolNode and SandboxMiddleware.

Three ways to wire a sandbox into a graph (see ``docs/graph.md``):

* a sandbox tool on its own (``create_agent(model, tools=[SandboxExecTool()])``): the sandbox
  lives per thread in the runtime, but is not checkpointed with the graph;
* [`SandboxToolNode`][langchain_sandbox.SandboxToolNode] in a hand-built ``StateGraph`` whose state declares the channel
  ([`SandboxGraphState`][langchain_sandbox.SandboxGraphState]);
* [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware] for ``create_agent``.

The middleware needs the ``langchain`` package (the ``agents`` extra); it is imported only when
asked for, so the rest works with langchain-core and langgraph alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from langchain_sandbox.graph.channel import SandboxChannel, SandboxGraphState
from langchain_sandbox.graph.images import ImagePolicy, image_placement, messages_for_model
from langchain_sandbox.graph.tool_calls import SandboxToolCallWrapper, to_graph_update
from langchain_sandbox.graph.tool_node import SandboxToolNode

if TYPE_CHECKING:
    from langchain_sandbox.graph.middleware import SandboxAgentState, SandboxMiddleware

_NEEDS_LANGCHAIN = {"SandboxAgentState", "SandboxMiddleware"}


def __getattr__(name: str) -> Any:
    if name not in _NEEDS_LANGCHAIN:
        raise AttributeError(f"module 'langchain_sandbox.graph' has no attribute {name!r}")
    try:
        module = importlib.import_module("langchain_sandbox.graph.middleware")
    except ImportError as exc:
        if exc.name != "langchain" and not (exc.name or "").startswith("langchain."):
            raise
        from langchain_sandbox.errors import MissingDependencyError

        raise MissingDependencyError("langchain", "agents", purpose=name) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "ImagePolicy",
    "SandboxAgentState",
    "SandboxChannel",
    "SandboxGraphState",
    "SandboxMiddleware",
    "SandboxToolCallWrapper",
    "SandboxToolNode",
    "image_placement",
    "messages_for_model",
    "to_graph_update",
]
