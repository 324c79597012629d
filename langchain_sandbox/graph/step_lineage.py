"""What a sandbox call in a graph with no ``sandbox`` channel (Deep Agents) learns from the
checkpoints, where a graph with one reads its record (``step_record.py``): which of its siblings'
tool messages its step saved before a crash (`finished_calls`); which step of its own branch ran
an earlier turn's calls (`ToolSteps`: the checkpoint whose pending writes hold their tool
messages; LangGraph gives every saved message an id of its own, so a tool message names one
branch, and a time-travel re-run of a step starts from a fork checkpoint with an id of its own);
and, for a call in a graph that a tool of another graph runs (a Deep Agents subagent), which tool
calls that step of the graph above sent and the conversation it started from (`step_above`).
Besides the step (``step.py``) it reads LangGraph's public ``TASKS`` channel, and the ``@task``
result channel and the run's durability (`langchain_sandbox.graph._pregel_keys`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TASKS
from tenacity import AsyncRetrying, Retrying

from langchain_sandbox.checkpointing.filed_records import messages_in
from langchain_sandbox.graph._pregel_keys import DURABILITY_KEY, RETURN_CHANNEL
from langchain_sandbox.graph.step import Step, until_saved


def _answered(checkpoint: Any, step: Step, call_ids: frozenset[str]) -> frozenset[str]:
    """Which of ``call_ids`` other tasks of the step have answered: their tool message is among
    the step checkpoint's pending writes (``None``: not saved yet, so none)."""
    answered: set[str] = set()
    for task_id, channel, value in checkpoint.pending_writes or [] if checkpoint else []:
        if task_id == step.task_id or channel == RETURN_CHANNEL:
            continue
        for message in value if isinstance(value, list | tuple) else [value]:
            if isinstance(message, ToolMessage) and message.tool_call_id in call_ids:
                answered.add(message.tool_call_id)
    return frozenset(answered)


def finished_calls(config: RunnableConfig | None, call_ids: frozenset[str]) -> frozenset[str]:
    """Which of ``call_ids`` (the other calls of a tool call's model message) finished in this
    run of the step: LangGraph saved their tool messages and re-runs only the others after a
    crash. A graph without a ``sandbox`` channel (Deep Agents) continues from their work through
    this. Empty outside a checkpointed graph run, and in a time-travel re-run (a fork of its
    own, whose pending writes hold only what the re-run did)."""
    step = Step.of(config)
    if step is None or not call_ids:
        return frozenset()
    return _answered(step.checkpointer.get_tuple(step.checkpoint_config), step, call_ids)


async def afinished_calls(
    config: RunnableConfig | None, call_ids: frozenset[str]
) -> frozenset[str]:
    """Async twin of `finished_calls`."""
    step = Step.of(config)
    if step is None or not call_ids:
        return frozenset()
    return _answered(await step.checkpointer.aget_tuple(step.checkpoint_config), step, call_ids)


STEPS_REMEMBERED = 10_000
"""Tool messages whose step `ToolSteps` remembers (a fact that never changes)."""

_steps_lock = threading.Lock()
_steps: OrderedDict[tuple[str, str], str] = OrderedDict()


def _remember_step(thread_id: str, message_id: str, checkpoint_id: str) -> None:
    with _steps_lock:
        _steps[(thread_id, message_id)] = checkpoint_id
        _steps.move_to_end((thread_id, message_id))
        while len(_steps) > STEPS_REMEMBERED:
            _steps.popitem(last=False)


def _remembered_step(thread_id: str, message_ids: Collection[str]) -> str | None:
    with _steps_lock:
        return next((_steps[k] for m in message_ids if (k := (thread_id, m)) in _steps), None)


class ToolSteps:
    """Which step of a tool call's branch ran an earlier call: the id of the checkpoint whose
    pending writes hold the call's tool message, found by walking the checkpoints back from
    the call's own step (one read per checkpoint; what was found is remembered per process).

    Attributes:
        step_id: The checkpoint the call's own step started from.
        saved: Whether that checkpoint was saved when the walk began. Under
            ``durability="async"`` it may not be yet: the walk then starts from the newest saved
            checkpoint of the graph, and a tool message written by this run may not be saved
            either (the caller knows its own filings).
    """

    def __init__(self, step: Step, get: Callable[[RunnableConfig], Awaitable[Any]]) -> None:
        self.step_id = step.checkpoint_id
        self.saved = True
        self._step = step
        self._get = get
        self._cursor: Any = None
        self._started = False
        self._looked = False
        self._fallback: RunnableConfig | None = None
        self._found: str | None = None

    @classmethod
    def of(cls, config: RunnableConfig | None, *, blocking: bool) -> ToolSteps | None:
        """The walker for a tool call running under ``config`` (``blocking``: the checkpointer
        is read through its blocking methods, in a worker thread); ``None`` without saved
        steps (no checkpointer, or ``durability="exit"``: no step before the last is saved)."""
        step = Step.of(config)
        if step is None or ((config or {}).get("configurable") or {}).get(DURABILITY_KEY) == "exit":
            return None
        saver = step.checkpointer

        async def _blocking_get(checkpoint: RunnableConfig) -> Any:
            return await asyncio.to_thread(saver.get_tuple, checkpoint)

        return cls(step, _blocking_get if blocking else saver.aget_tuple)

    def above(self) -> ToolSteps | None:
        """The walker of the step of the graph above whose task runs this call's graph (a Deep
        Agents subagent's parent), if a task runs it."""
        above = self._step.above()
        if above is None:
            return None
        where = above["configurable"]
        step = dataclasses.replace(
            self._step,
            graph_ns=where["checkpoint_ns"],
            checkpoint_id=where["checkpoint_id"],
            task_id=None,
        )
        return ToolSteps(step, self._get)

    async def find(self, message_ids: Collection[str], issued_by: str) -> str | None:
        """The checkpoint whose step wrote one of ``message_ids`` (the tool messages answering
        the AI message ``issued_by``); ``None`` if no checkpoint back to the step that wrote
        ``issued_by`` did. Calls ask for older turns after newer ones: the walk goes on."""
        while (wanted := self._next(message_ids, issued_by)) is not None:
            self._read(wanted, await self._get(wanted))
        return self._found

    def find_blocking(self, message_ids: Collection[str], issued_by: str) -> str | None:
        """`find` with the checkpointer's blocking reads, in the calling thread (a tool's
        own thread: no hop to a worker thread per checkpoint). What it finds is remembered in
        the process, so a `find` after it for the same turn reads nothing."""
        saver = self._step.checkpointer
        while (wanted := self._next(message_ids, issued_by)) is not None:
            self._read(wanted, saver.get_tuple(wanted))
        return self._found

    async def human_before(self, step_id: str, issued_by: str) -> str | None:
        """The id of the last human message before the AI message ``issued_by`` as the
        conversation was when the model wrote it, read from the writes of the checkpoints
        from the step ``step_id`` back (a few reads). A middleware that rewrites the list
        later (a summary in place of the first messages) changes what the conversation shows
        before that AI message, not what the calls' records were filed under."""
        wanted: RunnableConfig | None = {
            "configurable": {
                **self._step.checkpoint_config["configurable"],
                "checkpoint_id": step_id,
            }
        }
        issued = False
        while wanted is not None and (checkpoint := await self._get(wanted)) is not None:
            for _, channel, value in reversed(checkpoint.pending_writes or ()):
                messages = messages_in(value) if channel == "messages" else []
                issued |= _issues(messages, issued_by)
                humans = [m for m in messages if isinstance(m, HumanMessage)]
                if issued and humans:
                    return str(humans[-1].id or "")
            whole = checkpoint.checkpoint.get("channel_values", {}).get("messages")
            humans = [m for m in messages_in(whole) if isinstance(m, HumanMessage)]
            if issued and humans:
                return str(humans[-1].id or "")
            wanted = checkpoint.parent_config
        return None

    def _next(self, message_ids: Collection[str], issued_by: str) -> RunnableConfig | None:
        """The checkpoint the walk must read next, or ``None`` when it is over (``_found``
        then holds the answer). One step of the walk: a checkpoint just read (``_read``) is
        looked through first."""
        thread_id = self._step.thread_id
        self._found = _remembered_step(thread_id, message_ids)
        if self._found is not None:
            return None
        if not self._started:
            return self._step.checkpoint_config
        cursor = self._cursor
        if cursor is None:
            if self._fallback is not None:
                wanted, self._fallback = self._fallback, None
                return wanted
            return None
        if not self._looked:
            self._looked = True
            issued_here = False
            sent = {str(c["id"]) for c in _sent_calls(cursor)}
            for _, _, value in cursor.pending_writes or ():
                messages = value if isinstance(value, list | tuple) else [value]
                for message in messages:
                    # Only the step that sent a call ran it: a middleware that rewrites the
                    # list (Deep Agents patching a dangling call, a summarizer) writes the
                    # same tool messages again, in a step of its own.
                    if (
                        isinstance(message, ToolMessage)
                        and message.id
                        and message.tool_call_id in sent
                    ):
                        _remember_step(
                            thread_id, message.id, cursor.config["configurable"]["checkpoint_id"]
                        )
                issued_here |= _issues(messages, issued_by)
            self._found = _remembered_step(thread_id, message_ids)
            if self._found is not None or issued_here:
                # A step's calls can only have run after the step that wrote their message.
                return None
        parent: RunnableConfig | None = cursor.parent_config
        return parent

    def _read(self, wanted: RunnableConfig, checkpoint: Any) -> None:
        """Take the checkpoint read for ``wanted`` as the walk's position."""
        if not self._started:
            self._started = True
            if checkpoint is None:
                # Not saved yet (durability="async"): start from the newest saved checkpoint.
                self.saved = False
                latest = {"thread_id": self._step.thread_id, "checkpoint_ns": self._step.graph_ns}
                self._fallback = {"configurable": latest}
        self._cursor = checkpoint
        self._looked = False


def _issues(messages: Collection[Any], issued_by: str) -> bool:
    """Whether a write is the model's writing the AI message ``issued_by``: a write of AI
    messages only. A rewrite of the whole list (which holds human messages, tool messages or a
    ``RemoveMessage``) carries the message again, long after the model wrote it."""
    return any(isinstance(m, AIMessage) and m.id == issued_by for m in messages) and all(
        isinstance(m, AIMessage) for m in messages
    )


def _sent_calls(checkpoint: Any) -> tuple[Mapping[str, Any], ...]:
    """The tool calls among the ``Send`` packets of a saved step (``None``: not saved)."""
    values = checkpoint.checkpoint.get("channel_values", {}) if checkpoint else {}
    found: list[Mapping[str, Any]] = []
    # TASKS holds the ``Send`` packets a step runs (``create_agent``: one per tool call).
    for packet in values.get(TASKS) or ():
        arg = getattr(packet, "arg", None)
        if isinstance(arg, Mapping) and isinstance(arg.get("tool_call"), Mapping):
            arg = [arg["tool_call"]]  # ToolCallWithContext
        for item in arg if isinstance(arg, list) else []:
            if isinstance(item, Mapping) and item.get("id") and item.get("name"):
                found.append(item)
    return tuple(found)


@dataclass(frozen=True)
class StepAbove:
    """The step of the graph above whose task runs this call's graph (a Deep Agents subagent,
    run by the parent's ``task`` tool call), as saved in its checkpoint.

    Attributes:
        sent: The tool calls the step sent (one task each).
        messages: The conversation the step started from (``messages``, rebuilt from the
            writes of the checkpoint's ancestors when a delta channel stores only changes).
        answered: Tool calls of the step whose tool messages it saved (they finished).
    """

    sent: tuple[Mapping[str, Any], ...]
    messages: tuple[BaseMessage, ...]
    answered: frozenset[str]


_CONVERSATIONS_CACHED = 256
_conversations: OrderedDict[tuple[str, str, str], tuple[BaseMessage, ...]] = OrderedDict()
_conversations_lock = threading.Lock()


def _above(config: RunnableConfig | None) -> tuple[Step, RunnableConfig] | None:
    """The call's step and the checkpoint of the step above (see `Step.above`)."""
    step = Step.of(config)
    above = step.above() if step is not None else None
    return (step, above) if step is not None and above is not None else None


def _key(config: RunnableConfig) -> tuple[str, str, str]:
    c = config["configurable"]
    return (str(c["thread_id"]), str(c["checkpoint_ns"]), str(c["checkpoint_id"]))


def _cached(config: RunnableConfig) -> tuple[BaseMessage, ...] | None:
    with _conversations_lock:
        return _conversations.get(_key(config))


def _remember(config: RunnableConfig, messages: tuple[BaseMessage, ...]) -> None:
    # Saved checkpoints never change: the conversation a step started from is read once.
    with _conversations_lock:
        _conversations[_key(config)] = messages
        while len(_conversations) > _CONVERSATIONS_CACHED:
            _conversations.popitem(last=False)


def _message_writes(checkpoint: Any) -> list[BaseMessage]:
    return [
        m for _, channel, value in checkpoint.pending_writes or () if channel == "messages"
        for m in messages_in(value)
    ]  # fmt: skip


def _step_above(checkpoint: Any, messages: tuple[BaseMessage, ...]) -> StepAbove:
    answered = {
        m.tool_call_id
        for _, channel, value in checkpoint.pending_writes or ()
        if channel != RETURN_CHANNEL
        for m in (value if isinstance(value, list | tuple) else [value])
        if isinstance(m, ToolMessage)
    }
    return StepAbove(_sent_calls(checkpoint), messages, frozenset(answered))


class _Conversation:
    """The conversation a saved step started from, rebuilt from its checkpoint back to the last
    one holding the whole ``messages`` channel (a delta channel stores only the changes between
    such snapshots, as the writes of the checkpoints in between). The walk's reads are the
    caller's, blocking or async: `wanted` names the next checkpoint to read."""

    def __init__(self, checkpoint: Any) -> None:
        self._cursor = checkpoint
        self._chunks: list[list[BaseMessage]] = []

    def wanted(self) -> RunnableConfig | None:
        """The next checkpoint to read; ``None`` once the walk is over."""
        cursor = self._cursor
        if cursor is None or "messages" in cursor.checkpoint["channel_values"]:
            return None
        parent: RunnableConfig | None = cursor.parent_config
        if not parent:
            self._cursor = None
        return parent or None

    def take(self, checkpoint: Any) -> None:
        """The checkpoint read for `wanted` (``None``: not saved)."""
        self._cursor = checkpoint
        if checkpoint is not None:
            self._chunks.append(_message_writes(checkpoint))

    def messages(self) -> tuple[BaseMessage, ...]:
        """The conversation, oldest first (once the walk is over)."""
        chunks = list(self._chunks)
        if self._cursor is not None:
            chunks.append(messages_in(self._cursor.checkpoint["channel_values"]["messages"]))
        return tuple(m for chunk in reversed(chunks) for m in chunk)


def step_above(config: RunnableConfig | None) -> StepAbove | None:
    """The step of the graph above, when a task of that step runs this call's graph; ``None``
    otherwise, or if that step's checkpoint is not saved (``durability="exit"``, or not within
    `SAVED_WITHIN`). Its conversation is read once per step and process; its writes
    on every call."""
    found = _above(config)
    if found is None:
        return None
    step, above = found
    checkpoint = until_saved(step, Retrying)(step.checkpointer.get_tuple, above)
    if checkpoint is None:
        return None
    messages = _cached(above)
    if messages is None:
        walk = _Conversation(checkpoint)
        while (wanted := walk.wanted()) is not None:
            walk.take(step.checkpointer.get_tuple(wanted))
        messages = walk.messages()
        _remember(above, messages)
    return _step_above(checkpoint, messages)


async def astep_above(config: RunnableConfig | None) -> StepAbove | None:
    """Async twin of `step_above`."""
    found = _above(config)
    if found is None:
        return None
    step, above = found
    checkpoint: Any = await until_saved(step, AsyncRetrying)(step.checkpointer.aget_tuple, above)
    if checkpoint is None:
        return None
    messages = _cached(above)
    if messages is None:
        walk = _Conversation(checkpoint)
        while (wanted := walk.wanted()) is not None:
            walk.take(await step.checkpointer.aget_tuple(wanted))
        messages = walk.messages()
        _remember(above, messages)
    return _step_above(checkpoint, messages)


__all__ = [
    "STEPS_REMEMBERED",
    "StepAbove",
    "ToolSteps",
    "afinished_calls",
    "astep_above",
    "finished_calls",
    "step_above",
]
