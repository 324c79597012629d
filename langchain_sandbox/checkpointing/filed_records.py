"""Where sandbox records are filed by their place in a conversation, readable without Deep Agents.

The Deep Agents backend cannot add a ``sandbox`` channel to a deep agent's graph, so it files each
record (naming the snapshot of the sandbox after a call) in the snapshot store under a key derived
from ``(thread, last human message id, AI message id, tool call id, step)``, the step being the id
of the checkpoint the call's tool step started from: a time-travel re-run of the same AI message's
calls starts from a fork checkpoint, so each branch files its own record. The step's checkpoint
holds the call's tool message among its pending writes, which is how a later call, and gc, find
it. Records filed before steps were part of the key (and under ``durability="exit"``, where no
step's checkpoint is saved) have no step; they are still read and kept. See
`langchain_sandbox.deepagents._lineage`. ``langchain-sandbox gc`` must find those records
from the checkpoints' conversations to keep them and their snapshots, and it runs where the
``deepagents`` extra may not be installed: so the key scheme lives here, below both.

A subagent (Deep Agents' ``task`` tool) runs on its own conversation, which the parent's does not
contain; its calls file their records under their own keys and, each time, under the key of the
parent's ``task`` call too (`subagent_key`), where the parent's next call and ``gc`` look.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

Turn = tuple[str, str]
"""An AI message's place: ``(id of the last human message before it, its own id)``."""

TASK_TOOL = "task"
"""The name of Deep Agents' tool that runs a subagent."""


def record_key(thread_id: str, turn: Turn, call_id: str, step: str | None = None) -> str:
    """The store key of the record the tool call ``call_id`` of ``turn`` filed in the step that
    started from checkpoint ``step`` (``None``: a record filed without its step)."""
    parts = [thread_id, *turn, call_id, *([step] if step is not None else [])]
    name = json.dumps(["langchain-sandbox/deepagents-record", *parts])
    return hashlib.sha256(name.encode()).hexdigest()


def subagent_key(thread_id: str, turn: Turn, call_id: str, step: str | None = None) -> str:
    """The store key of the newest record the subagent run by the ``task`` call ``call_id`` of
    ``turn`` in the step that started from checkpoint ``step`` filed (overwritten by each of its
    calls: the parent continues from its last; a replay of the step on another branch has a key
    of its own)."""
    parts = [thread_id, *turn, call_id, *([step] if step is not None else [])]
    name = json.dumps(["langchain-sandbox/deepagents-subagent", *parts])
    return hashlib.sha256(name.encode()).hexdigest()


def call_keys(
    thread_id: str, turn: Turn, calls: Iterable[tuple[str, str]], step: str | None = None
) -> set[str]:
    """The keys the tool calls ``(id, name)`` of ``turn`` may have filed records under in
    ``step`` (``None``: without a step): each call's own, and for a ``task`` call the one its
    subagent filed under."""
    keys: set[str] = set()
    for call_id, name in calls:
        keys.add(record_key(thread_id, turn, call_id, step))
        if name == TASK_TOOL:
            keys.add(subagent_key(thread_id, turn, call_id, step))
    return keys


def tool_calls(message: AIMessage) -> tuple[tuple[str, str], ...]:
    """The ``(id, name)`` of each tool call of ``message`` that has an id."""
    return tuple((str(c["id"]), str(c["name"])) for c in message.tool_calls if c.get("id"))


def messages_in(value: Any) -> list[BaseMessage]:
    """The messages in a ``messages`` channel's value or write (a list, one message, or a delta
    channel's snapshot wrapping the list)."""
    if isinstance(value, BaseMessage):
        return [value]
    if isinstance(value, list | tuple):
        return [m for item in value for m in messages_in(item)]
    return []


def conversation_turns(
    messages: Iterable[BaseMessage], *, human: str = ""
) -> list[tuple[Turn, AIMessage]]:
    """The AI messages that call tools, oldest first, each with its turn (``human``: the id of
    the last human message before ``messages``, for a conversation read in parts)."""
    turns: list[tuple[Turn, AIMessage]] = []
    for message in messages:
        if isinstance(message, HumanMessage):
            human = str(message.id or "")
        elif isinstance(message, AIMessage) and message.tool_calls and message.id:
            turns.append(((human, str(message.id)), message))
    return turns


def _last_human(messages: Sequence[BaseMessage], human: str) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return str(message.id or "")
    return human


class RecordKeys:
    """The keys of every record the tool calls of a thread's checkpoints may have filed.

    Fed one checkpoint at a time, in any order (``BaseCheckpointSaver.alist`` order). A
    checkpoint holds its conversation either in full (a plain ``messages`` channel, or the
    periodic snapshot of a LangGraph delta channel, as Deep Agents uses) or not at all (a delta
    channel between snapshots: the messages are the writes stored with its ancestors). Each
    turn needs the last human message before its AI message, which for written messages may sit
    in an ancestor, so writes are resolved once every checkpoint is known. Messages a
    ``RemoveMessage`` took out still count: more keys only keep more. A tool message among a
    checkpoint's writes names the step its call ran in: the call's records are kept under that
    step, and without one (records filed before steps were keyed).
    """

    def __init__(self) -> None:
        self._keys: set[str] = set()
        # thread -> tool call id -> the turns whose AI message made that call
        self._turns: dict[str, dict[str, set[Turn]]] = {}
        # (thread, namespace, checkpoint id) -> parent id, last human of a full conversation
        # stored there (None: not stored), messages written with it
        self._nodes: dict[
            tuple[str, str, str], tuple[str | None, str | None, list[BaseMessage]]
        ] = {}

    def add(
        self,
        thread_id: str,
        namespace: str,
        checkpoint_id: str,
        parent_id: str | None,
        stored: Sequence[BaseMessage] | None,
        written: Sequence[BaseMessage],
    ) -> None:
        """One checkpoint: its ``stored`` conversation (``None``: not stored there) and the
        messages ``written`` with it (its pending writes)."""
        human = None
        if stored is not None:
            self._note(thread_id, conversation_turns(stored))
            human = _last_human(stored, "")
        self._nodes[(thread_id, namespace, checkpoint_id)] = (parent_id, human, list(written))

    def keys(self) -> set[str]:
        """Every key the checkpoints added so far name."""
        humans: dict[tuple[str, str, str], str] = {}
        for node, (_, _, written) in self._nodes.items():
            if written:
                self._note(node[0], conversation_turns(written, human=self._human_at(node, humans)))
        found = set(self._keys)
        for (thread_id, _, checkpoint_id), (_, _, written) in self._nodes.items():
            calls = self._turns.get(thread_id, {})
            for message in written:
                if isinstance(message, ToolMessage):
                    # Every call as if it ran a subagent: a key nothing was filed under keeps
                    # nothing, and a tool message need not name its tool.
                    as_task = [(message.tool_call_id, TASK_TOOL)]
                    for turn in calls.get(message.tool_call_id, ()):
                        found |= call_keys(thread_id, turn, as_task, checkpoint_id)
        return found

    def _note(self, thread_id: str, turns: list[tuple[Turn, AIMessage]]) -> None:
        self._keys |= _keys_of(thread_id, turns)
        calls = self._turns.setdefault(thread_id, {})
        for turn, message in turns:
            for call in message.tool_calls:
                if call.get("id"):
                    calls.setdefault(str(call["id"]), set()).add(turn)

    def _human_at(self, node: tuple[str, str, str], memo: dict[tuple[str, str, str], str]) -> str:
        """The last human message id of the conversation at ``node`` (before its own writes)."""
        chain: list[tuple[str, str, str]] = []
        human = ""
        cursor: tuple[str, str, str] | None = node
        while cursor is not None:
            if cursor in memo:
                human = memo[cursor]
                break
            entry = self._nodes.get(cursor)
            if entry is None:
                break
            parent_id, stored_human, _ = entry
            if stored_human is not None:
                human = stored_human
                memo[cursor] = human
                break
            chain.append(cursor)
            cursor = (cursor[0], cursor[1], parent_id) if parent_id else None
        # Walk back down: each checkpoint sees its parent's conversation plus the parent's writes.
        for below in reversed(chain):
            parent_id = self._nodes[below][0]
            parent = (below[0], below[1], parent_id) if parent_id else None
            if parent is not None and parent in self._nodes:
                human = _last_human(self._nodes[parent][2], memo.get(parent, human))
            memo[below] = human
        return memo.get(node, human)


def _keys_of(thread_id: str, turns: list[tuple[Turn, AIMessage]]) -> set[str]:
    return {key for turn, m in turns for key in call_keys(thread_id, turn, tool_calls(m))}


__all__ = [
    "TASK_TOOL",
    "RecordKeys",
    "Turn",
    "call_keys",
    "conversation_turns",
    "messages_in",
    "record_key",
    "subagent_key",
    "tool_calls",
]
