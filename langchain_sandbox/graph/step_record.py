"""The record a sandbox tool call in a graph continues from, when its own state does not say.

A tool call reads its record from the state its node was given (``state["sandbox"]``). Three graph
shapes hand a call less than the whole story, and without help each lost work silently:

* **parallel calls re-run after a crash.** LangGraph saves each finished task's writes (its
  *pending writes*) as soon as it finishes. When the process dies mid-step, the resume keeps those
  writes and re-runs only the calls that had not finished, with the state from before the step.
  The finished calls' records are in the step checkpoint's pending writes: written to the
  ``sandbox`` channel (a ``Send`` per call, as under ``create_agent``), or returned by a
  ``sandbox_tool_call`` task (`tool_calls`). The re-run continues
  from them merged with the state's record (by the channel's reducer), so it starts from their
  files and variables, and its own record's revision is above theirs, so the step's merge keeps
  everything. A time-travel re-run starts a fork checkpoint of its own, whose pending writes hold
  only what the re-run itself did, so nothing of the abandoned run leaks in.
* **``Send`` payloads without ``sandbox``.** A node sent ``{"messages": [...]}`` does not see the
  graph's ``sandbox`` channel; the call continues from the channel's value at the start of the
  step, read through LangGraph's per-task reader.
* **a subgraph whose parent does not pass ``sandbox``.** A subgraph added as a node keeps its state
  only for one invocation (unless compiled with ``checkpointer=True``); the record survives the
  invocation only in the parent's state. If the parent's state does not declare the channel, the
  subgraph's first checkpoint has no ``sandbox`` version, and the call is refused with a
  [`ConfigurationError`][langchain_sandbox.ConfigurationError] that says how to wire it (under
  ``create_agent``, ``SandboxMiddleware.before_agent`` checks the same before the model runs).
  Nested subgraphs are checked level by level, up to the first graph that keeps its state per
  thread (the root, or a ``checkpointer=True`` subgraph): a parent that declares ``sandbox`` but
  is itself a one-invocation subgraph of a graph without it loses the record just the same. So
  is a node in a graph with no ``sandbox`` channel at all: LangGraph would drop every record it
  returns.

A graph with no ``sandbox`` channel at all (Deep Agents) learns the same about a re-run call
from `finished_calls`: which of its siblings' tool messages the step saved; a call in a
graph that a tool of another graph runs (a Deep Agents subagent) learns which tool calls that
step of the graph above sent, and the conversation it started from, from `step_above`.
It also learns from `ToolSteps` which step of its own branch ran an earlier turn's calls:
the checkpoint whose pending writes hold their tool messages (LangGraph gives every saved message
an id of its own, so a tool message names one branch; a time-travel re-run of a step starts from
a fork checkpoint with an id of its own).

What this reads from LangGraph: the task config's ``checkpoint_ns``, ``checkpoint_map`` and
``thread_id``, the public ``CONFIG_KEY_CHECKPOINTER`` (through `run_checkpointer`) and ``TASKS``
channel, and the private names LangGraph offers no public API for, all in
`langchain_sandbox.graph._pregel_keys` (the task's channel reader, its id, the run's durability,
the ``@task`` result channel). The checks and reads only happen in a graph run with a checkpointer:
without one nothing outlives the process. ``tests/graph/test_tool_node_hooks.py`` pins their
behaviour and ``tests/graph/test_langgraph_private_keys.py`` their names on the installed LangGraph.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any, TypeVar, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TASKS
from langgraph.errors import EmptyChannelError
from langgraph.prebuilt.tool_node import ToolCallRequest
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
)

from langchain_sandbox.checkpointer_names import run_checkpointer
from langchain_sandbox.errors import ConfigurationError
from langchain_sandbox.filed_records import messages_in
from langchain_sandbox.graph._pregel_keys import (
    DURABILITY_KEY,
    READ_KEY,
    RETURN_CHANNEL,
    TASK_ID_KEY,
)
from langchain_sandbox.state import SandboxState, merge_sandbox_state
from langchain_sandbox.tools.base import graph_record

CHANNEL = "sandbox"

_NO_CHANNEL = (
    "This sandbox tool runs in a graph whose state has no `sandbox` channel, so LangGraph would "
    "drop the record of every call and a resume would find an empty sandbox. Declare it in the "
    "state schema: `sandbox: NotRequired[SandboxChannel]` (or use SandboxGraphState)."
)
_NOT_PASSED = (
    "This sandbox tool runs in a subgraph, and the subgraph `{graph}` is not passed a `sandbox` "
    "record by its parent graph: its state lasts one invocation, so the record of the tool's "
    "calls would be lost and the next invocation (or a resume in a new process) would find an "
    "empty sandbox. Declare `sandbox: NotRequired[SandboxChannel]` in the parent graph's state "
    "too (in every graph above the tool node, up to one that keeps its state per thread), or "
    "compile the subgraph with `checkpointer=True` so LangGraph keeps its state per thread."
)


@dataclass(frozen=True)
class _Step:
    """Where in a checkpointed graph run a tool call's node runs."""

    config: RunnableConfig
    checkpointer: Any
    graph_ns: str
    checkpoint_id: str
    thread_id: str
    task_id: str | None
    checkpoints: Mapping[str, str]
    """The run's checkpoint id of every graph from the root down to the node's (by namespace)."""

    @classmethod
    def of(cls, config: RunnableConfig | None) -> _Step | None:
        config = config or {}
        configurable = config.get("configurable") or {}
        checkpointer = run_checkpointer(config)
        task_ns = configurable.get("checkpoint_ns")
        checkpoints = configurable.get("checkpoint_map")
        thread_id = configurable.get("thread_id")
        if checkpointer is None or not isinstance(task_ns, str) or thread_id is None:
            return None
        graph_ns = task_ns.rpartition("|")[0]
        if not isinstance(checkpoints, Mapping) or not checkpoints.get(graph_ns):
            return None
        return cls(
            config, checkpointer, graph_ns, checkpoints[graph_ns], str(thread_id),
            configurable.get(TASK_ID_KEY), checkpoints,
        )  # fmt: skip

    def above(self) -> RunnableConfig | None:
        """The checkpoint of the step of the graph above whose task runs this graph, if a task
        runs it (its namespace segment carries a task id, ``node:<task id>``)."""
        parent_ns, _, own = self.graph_ns.rpartition("|")
        checkpoint_id = self.checkpoints.get(parent_ns)
        if ":" not in own or not checkpoint_id:
            return None
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": parent_ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    @property
    def checkpoint_config(self) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": self.graph_ns,
                "checkpoint_id": self.checkpoint_id,
            }
        }

    def transient_levels(self) -> list[tuple[str, RunnableConfig | None, RunnableConfig]]:
        """The node's graph and the graphs above it whose state LangGraph keeps for one
        invocation only, innermost first, up to the first that keeps it per thread: each as its
        namespace, its checkpoint of this run (``None`` if unknown) and its newest one.

        Such a graph's namespace segment carries a task id (``node:<task id>``);
        ``checkpointer=True`` subgraphs (and the root) have stable ones (``node``, ``""``).
        """
        parts = self.graph_ns.split("|") if self.graph_ns else []
        levels: list[tuple[str, RunnableConfig | None, RunnableConfig]] = []
        while parts and ":" in parts[-1]:
            ns = "|".join(parts)
            latest = {"thread_id": self.thread_id, "checkpoint_ns": ns}
            checkpoint_id = self.checkpoints.get(ns)
            at_run: RunnableConfig | None = (
                {"configurable": {**latest, "checkpoint_id": checkpoint_id}}
                if checkpoint_id
                else None
            )
            levels.append((ns, at_run, {"configurable": latest}))
            parts.pop()
        return levels

    def channel_value(self) -> tuple[bool, SandboxState | None]:
        """Whether the node's graph declares the channel, and its value at the step's start."""
        read = (self.config.get("configurable") or {}).get(READ_KEY)
        if read is None:
            return True, None
        try:
            value = read(CHANNEL, False)
        except KeyError:
            return False, None
        except EmptyChannelError:
            return True, None
        return True, _as_record(value)


def _as_record(value: Any) -> SandboxState | None:
    return cast("SandboxState", value) if isinstance(value, dict) and value else None


def _record_of_write(channel: str, value: Any) -> SandboxState | None:
    """The sandbox record in one pending write: a ``sandbox`` channel write, or the result of a
    ``sandbox_tool_call`` task (a tool message carrying the record in its artifact)."""
    if channel == CHANNEL:
        return _as_record(value)
    if channel == RETURN_CHANNEL and isinstance(value, ToolMessage):
        artifact = value.artifact
        return _as_record(artifact.get(CHANNEL) if isinstance(artifact, Mapping) else None)
    return None


def _start_record(request: ToolCallRequest, step: _Step) -> SandboxState | None:
    """The record before the step: the state's, else the graph channel's (a ``Send`` payload
    without it).

    Raises:
        ConfigurationError: the node's graph has no ``sandbox`` channel.
    """
    record = graph_record(request.runtime)
    if record is not None:
        return record
    declared, record = step.channel_value()
    if not declared:
        raise ConfigurationError(_NO_CHANNEL)
    return record


SAVED_WITHIN = 10.0
"""Seconds a call waits for a checkpoint of its run that is not saved yet, when it needs it:
under ``durability="async"`` (LangGraph's default) a step's checkpoint is saved beside its
tasks, so with a slow checkpointer a task can run first. A Deep Agents subagent needs its
parent's step (else its records are not filed under the parent's ``task`` call, and the parent's
next call continues from before the subagent), and a subgraph's first node its own first
checkpoint (else a parent that does not pass ``sandbox`` is not refused, and the record is lost
with the invocation)."""


_R = TypeVar("_R", Retrying, AsyncRetrying)


def _until_saved(step: _Step, retrying: type[_R]) -> _R:
    """Reads of a checkpoint of the run, repeated while it is not saved yet (not under
    ``durability="exit"``, which saves no step before the last): ``None`` after
    `SAVED_WITHIN`."""
    durability = (step.config.get("configurable") or {}).get(DURABILITY_KEY)
    within = 0.0 if durability == "exit" else SAVED_WITHIN
    return retrying(
        stop=stop_after_delay(within),
        wait=wait_exponential(multiplier=0.002, max=0.05),
        retry=retry_if_result(lambda checkpoint: checkpoint is None),
        retry_error_callback=lambda state: None,
    )


def _check_passed(ns: str, checkpoint: Any) -> None:
    """For one one-invocation graph level: refuse unless its parent passed it the ``sandbox``
    key (its checkpoints then carry a version of it from its input on). ``checkpoint`` is
    ``None`` where none is saved (``durability="exit"``): nothing to tell by.
    """
    if checkpoint is not None and CHANNEL not in checkpoint.checkpoint.get("channel_versions", {}):
        graph = " > ".join(part.partition(":")[0] for part in ns.split("|"))
        raise ConfigurationError(_NOT_PASSED.format(graph=graph))


def _require_home(step: _Step, own: Any = None) -> None:
    """Refuse (see `_check_passed`) unless every one-invocation graph from the node's up to
    the first that keeps its state per thread is passed ``sandbox`` by its parent. ``own``: the
    node's graph's checkpoint of this step, if already read. A checkpoint of this run that is
    not saved yet (``durability="async"``) is waited for: the level's newest could be its
    invocation's input checkpoint, which carries no channel versions but the input's. The
    newest stands in only where the run's checkpoint is not known."""
    saver = step.checkpointer
    for index, (ns, at_run, latest) in enumerate(step.transient_levels()):
        checkpoint = own if index == 0 else None
        if checkpoint is None:
            checkpoint = _until_saved(step, Retrying)(saver.get_tuple, at_run or latest)
        _check_passed(ns, checkpoint)


async def _arequire_home(step: _Step, own: Any = None) -> None:
    """Async twin of `_require_home`."""
    saver = step.checkpointer
    for index, (ns, at_run, latest) in enumerate(step.transient_levels()):
        checkpoint = own if index == 0 else None
        if checkpoint is None:
            checkpoint = await _until_saved(step, AsyncRetrying)(saver.aget_tuple, at_run or latest)
        _check_passed(ns, checkpoint)


def _with_record(
    request: ToolCallRequest, step: _Step, record: SandboxState | None, checkpoint: Any
) -> ToolCallRequest:
    """``request`` continuing from ``record`` merged with the records of the step's finished
    calls saved in ``checkpoint`` (``None`` if the step's checkpoint is not saved yet: the step
    then has no saved writes either)."""
    finished = [
        found
        for task_id, channel, value in (checkpoint.pending_writes or [] if checkpoint else [])
        if task_id != step.task_id and (found := _record_of_write(channel, value)) is not None
    ]
    if not finished and record is graph_record(request.runtime):
        return request
    merged = reduce(merge_sandbox_state, finished, record or SandboxState())
    return request.override(state={**request.state, CHANNEL: merged})


def _answered(checkpoint: Any, step: _Step, call_ids: frozenset[str]) -> frozenset[str]:
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
    step = _Step.of(config)
    if step is None or not call_ids:
        return frozenset()
    return _answered(step.checkpointer.get_tuple(step.checkpoint_config), step, call_ids)


async def afinished_calls(
    config: RunnableConfig | None, call_ids: frozenset[str]
) -> frozenset[str]:
    """Async twin of `finished_calls`."""
    step = _Step.of(config)
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

    def __init__(self, step: _Step, get: Callable[[RunnableConfig], Awaitable[Any]]) -> None:
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
        step = _Step.of(config)
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


def _above(config: RunnableConfig | None) -> tuple[_Step, RunnableConfig] | None:
    """The call's step and the checkpoint of the step above (see `_Step.above`)."""
    step = _Step.of(config)
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
    checkpoint = _until_saved(step, Retrying)(step.checkpointer.get_tuple, above)
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
    checkpoint: Any = await _until_saved(step, AsyncRetrying)(step.checkpointer.aget_tuple, above)
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


def _config(request: ToolCallRequest) -> RunnableConfig:
    return cast("RunnableConfig", getattr(request.runtime, "config", None) or {})


def require_record_home(config: RunnableConfig | None) -> None:
    """For a node that starts a sandbox's life in a graph run with no record in its state
    (``SandboxMiddleware.before_agent``): refuse a one-invocation subgraph whose parent does
    not pass ``sandbox`` (see the module docstring).

    Raises:
        ConfigurationError: the record would be lost at the end of the invocation.
    """
    step = _Step.of(config)
    if step is not None:
        _require_home(step)


async def arequire_record_home(config: RunnableConfig | None) -> None:
    """Async twin of `require_record_home`."""
    step = _Step.of(config)
    if step is not None:
        await _arequire_home(step)


def continue_from_step(request: ToolCallRequest) -> ToolCallRequest:
    """``request``, its state's ``sandbox`` set to the record the call continues from (see the
    module docstring).

    Raises:
        ConfigurationError: the record has nowhere to live in this graph.
    """
    step = _Step.of(_config(request))
    if step is None or not isinstance(request.state, Mapping):
        return request
    record = _start_record(request, step)
    checkpoint = step.checkpointer.get_tuple(step.checkpoint_config)
    if record is None:
        _require_home(step, checkpoint)
    return _with_record(request, step, record, checkpoint)


async def acontinue_from_step(request: ToolCallRequest) -> ToolCallRequest:
    """Async twin of `continue_from_step`."""
    step = _Step.of(_config(request))
    if step is None or not isinstance(request.state, Mapping):
        return request
    record = _start_record(request, step)
    checkpoint = await step.checkpointer.aget_tuple(step.checkpoint_config)
    if record is None:
        await _arequire_home(step, checkpoint)
    return _with_record(request, step, record, checkpoint)


__all__ = [
    "StepAbove",
    "ToolSteps",
    "acontinue_from_step",
    "afinished_calls",
    "arequire_record_home",
    "astep_above",
    "continue_from_step",
    "finished_calls",
    "require_record_home",
    "step_above",
]
