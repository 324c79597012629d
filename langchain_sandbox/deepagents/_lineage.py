"""Which sandbox record a Deep Agents call continues from, found through the conversation itself.

``create_agent`` graphs get a ``sandbox`` state channel from :class:`SandboxMiddleware`. A backend
cannot add one to ``create_deep_agent``'s graph: the graph's state is the union of its middleware's
schemas, none of which a backend contributes, and LangGraph drops writes to an undeclared channel.
What every Deep Agents graph does checkpoint is its conversation, and the conversation *is* the
lineage of a checkpoint: a resume, an ``interrupt()`` or a fork from an old checkpoint sees exactly
the AI messages and tool calls of its own branch.

So each call that changes the sandbox files its record (the snapshot of the sandbox after the
call) under the key ``(thread, last human message id, AI message id, tool call id)`` in the
snapshot store, next to the snapshot it names (the key scheme is
:mod:`langchain_sandbox.filed_records`, which ``gc`` reads too). The human message's id is there
because a fork usually starts with a new human message, while a deterministic model (a test's
scripted one) may reuse AI message and tool call ids on the new branch. A later call reads the
conversation (``messages``, through the same LangGraph read hook Deep Agents' own
``StateBackend`` uses) and continues from the newest record filed by a tool call of an earlier AI
message: the record its checkpoint implies, in this process or another.
Keys are written once and never change.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from langchain_sandbox.errors import SnapshotNotFoundError
from langchain_sandbox.filed_records import conversation_turns, record_key
from langchain_sandbox.runtime import SandboxRuntime, StepCall
from langchain_sandbox.snapshots import BlobStore, Snapshotter
from langchain_sandbox.state import SandboxState

_READ_KEY = "__pregel_read"
"""LangGraph's per-task channel reader in ``configurable`` (``CONFIG_KEY_READ``)."""


@dataclass(frozen=True)
class Position:
    """Where a backend call sits in the conversation of its graph run.

    Attributes:
        turn: The AI message whose tool call is running, as ``(last human message id, AI
            message id)``.
        step_call: That tool call and its siblings (for the runtime's parallel-call handling).
        earlier: The AI messages before it, newest first, each as its turn and tool call ids.
    """

    turn: tuple[str, str]
    step_call: StepCall
    earlier: tuple[tuple[tuple[str, str], tuple[str, ...]], ...]


def position_of(config: RunnableConfig | None) -> Position | None:
    """The position of the tool call running under ``config``; ``None`` outside a tool task.

    ``create_agent`` sends each pending tool call of the last AI message as its own task, in the
    order of the message; the task's path (``metadata.langgraph_path``) holds that index.
    """
    configurable = (config or {}).get("configurable", {})
    read = configurable.get(_READ_KEY)
    path = (config or {}).get("metadata", {}).get("langgraph_path")
    if read is None or not isinstance(path, tuple) or len(path) < 2:
        return None
    if path[0] != "__pregel_push" or not isinstance(path[1], int):
        return None
    try:
        messages: Sequence[BaseMessage] = read("messages", False) or []
    except (KeyError, TypeError):
        return None
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    turns = conversation_turns(messages)
    if not turns:
        return None
    turn, current = turns[-1]
    pending = [c for c in current.tool_calls if c.get("id") not in answered]
    if path[1] >= len(pending):
        return None
    call_id = pending[path[1]].get("id")
    if not call_id:
        return None
    ids = frozenset(_call_ids(current))
    earlier = tuple((t, _call_ids(m)) for t, m in reversed(turns[:-1]))
    return Position(turn, StepCall(call_id, ids - {call_id}), earlier)


def _call_ids(message: AIMessage) -> tuple[str, ...]:
    return tuple(str(c["id"]) for c in message.tool_calls if c.get("id"))


class RecordBook:
    """Records filed by tool call, in a snapshot store (see the module docstring)."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    @classmethod
    def of(cls, runtime: SandboxRuntime, resumable: bool) -> RecordBook | None:
        """The book of a runtime that persists this call's snapshots (``resumable``: a checkpoint
        can resume from it) to a store; ``None`` otherwise (its records could name no snapshot a
        new process could restore)."""
        snapshotter = runtime.snapshotter
        if not runtime.persists(resumable) or not isinstance(snapshotter, Snapshotter):
            return None
        return cls(snapshotter.store)

    async def file(self, thread_id: str, position: Position, record: SandboxState) -> None:
        """File the record a tool call left the sandbox in."""
        data = json.dumps(dict(record), sort_keys=True).encode()
        await self.store.put(record_key(thread_id, position.turn, position.step_call.call_id), data)

    async def latest(self, thread_id: str, position: Position) -> SandboxState | None:
        """The record the conversation before ``position`` left the sandbox in (``None``: no
        earlier call changed it)."""
        for turn, call_ids in position.earlier:
            keys = {record_key(thread_id, turn, c) for c in call_ids}
            present = keys - await self.store.missing(keys)
            found = await self.store.get_many(present) if present else {}
            records = [_parse(data) for data in found.values()]
            if records:
                return max(records, key=lambda r: r.get("revision", 0))
        return None


def _parse(data: bytes) -> SandboxState:
    value: Any = json.loads(data)
    if not isinstance(value, dict):
        raise SnapshotNotFoundError("A Deep Agents sandbox record in the store is malformed.")
    value["exec_count"] = 0
    return value  # type: ignore[return-value]


__all__ = ["Position", "RecordBook", "position_of"]
