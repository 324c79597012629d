"""The hand-built agent loop of the graph tests and the durable workers, written once.

A model node and a tools node in a ``StateGraph``, looping until the model asks for no tool: the
graph `docs/graph.md` shows users who wire ``SandboxToolNode`` themselves. The durable workers run
as scripts from ``tests/durable``; they put this directory on ``sys.path`` to import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import tools_condition

from langchain_sandbox.graph import SandboxGraphState, SandboxToolNode
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.scripted_model import ScriptedToolModel


def agent_loop(
    model: ScriptedToolModel,
    tools: Sequence[BaseTool],
    *,
    runtime: SandboxRuntime | None = None,
    tool_node: Any = None,
    schema: Any = SandboxGraphState,
) -> StateGraph[Any]:
    """The loop over ``model`` (bound to ``tools`` here) and ``tool_node``, not compiled.

    ``tool_node`` defaults to ``SandboxToolNode(tools, runtime=runtime)``; the model node runs the
    model sync or async as the graph is run, so one loop serves ``invoke`` and ``ainvoke``.
    """
    bound = model.bind_tools(list(tools))

    def agent(state: Any) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    async def aagent(state: Any) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(schema)
    graph.add_node("agent", RunnableLambda(agent, afunc=aagent))
    graph.add_node("tools", tool_node or SandboxToolNode(list(tools), runtime=runtime))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph
