"""The ``sandbox`` state channel: how a graph declares it.

The record itself ([`SandboxState`][langchain_sandbox.SandboxState]) and its reducer live below the
graph layer; this module only gives them the LangGraph shape. Declaring the channel matters:
LangGraph silently drops ``Command(update=...)`` keys the state schema does not declare, so a graph
without it would never persist its sandbox.
"""

from __future__ import annotations

from typing import Annotated, NotRequired, TypeAlias, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

from langchain_sandbox.state import SandboxState, merge_sandbox_state

SandboxChannel: TypeAlias = Annotated[SandboxState, merge_sandbox_state]
"""Annotation of the ``sandbox`` key: ``sandbox: NotRequired[SandboxChannel]`` in your own state.

The reducer lets parallel tool calls of one step each send an update; the one with the highest
revision wins and ``exec_count`` deltas add up.
"""


class SandboxGraphState(TypedDict):
    """State of a hand-built tool-calling graph: the conversation plus the sandbox record.

    Use it as ``StateGraph(SandboxGraphState)``, or copy its two keys into your own schema.
    """

    messages: Annotated[list[AnyMessage], add_messages]
    sandbox: NotRequired[SandboxChannel]


__all__ = ["SandboxChannel", "SandboxGraphState"]
