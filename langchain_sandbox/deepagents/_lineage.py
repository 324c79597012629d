"""Which sandbox record a Deep Agents call continues from, found through the conversation itself.

``create_agent`` graphs get a ``sandbox`` state channel from [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware]. A backend
cannot add one to ``create_deep_agent``'s graph: the graph's state is the union of its middleware's
schemas, none of which a backend contributes, and LangGraph drops writes to an undeclared channel.
What every Deep Agents graph does checkpoint is its conversation, and the conversation *is* the
lineage of a checkpoint: a resume, an ``interrupt()`` or a fork from an old checkpoint sees exactly
the AI messages and tool calls of its own branch.

So each call that changes the sandbox files its record (the snapshot of the sandbox after the
call) under the key ``(thread, last human message id, AI message id, tool call id, step)`` in
the snapshot store, next to the snapshot it names (the key scheme is
`langchain_sandbox.checkpointing.filed_records`, which ``gc`` reads too). The step is the checkpoint the
call's tool step started from: time travel to the checkpoint between a model call and its tools
runs the very same AI message's calls again (whatever the model), from a fork checkpoint, so the
two runs file apart. A later call reads the conversation (``messages``, through the same
LangGraph read hook Deep Agents' own ``StateBackend`` uses) and continues from the newest record
filed by a tool call of an earlier AI message: the record its checkpoint implies, in this process
or another. Which step ran that earlier call on this branch is the checkpoint that saved its tool
message (whose id LangGraph made for this branch), found by walking the checkpoints back
(`ToolSteps`: a few reads of the checkpointer per
turn, remembered per process). A record filed without a step (by an earlier version, or under
``durability="exit"``, which saves no step's checkpoint) is read when none with it is there. A call re-run after a
crash in the middle of its step continues instead from the records of the siblings that finished
before the crash (`Position.finished`, from the step's saved writes), as a ``create_agent``
call does through its ``sandbox`` channel.
Keys are written once and never change, but one: a subagent (run by the parent's ``task`` tool
on a conversation of its own, which the parent's does not contain) files each record under the
parent's ``task`` call too (`Position.tasks`, learnt from the ``task`` calls the parent's
step sent), overwriting it (``BlobStore.replace``), so that the parent's next call, in this
process or another, continues from the subagent's last record.

Two things keep this off the path of a call, in a process that keeps running:

* the records this process filed or read are remembered by key (`_Remembered`), so finding
  the previous call's record usually costs no store access;
* a call that left the sandbox exactly as its snapshot was (``echo hi``: the capture found
  nothing changed and named the same snapshot as the record it continued from) is remembered but
  not filed, on providers whose sandboxes do not outlive the process. Its record differs from the
  one it continued from only in the head and revision, which name the live sandbox of this
  process; another process (a resume, a fork) walks back to that earlier record, which names the
  same snapshot, and restores the same files and variables. Filing it would cost a durable write
  per call that changed nothing.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from langchain_sandbox.checkpointing.filed_records import (
    TASK_TOOL,
    Turn,
    call_keys,
    record_key,
    subagent_key,
    tool_calls,
)
from langchain_sandbox.core.restoring import store_unavailable
from langchain_sandbox.errors import SnapshotNotFoundError
from langchain_sandbox.graph._pregel_keys import PUSH, READ_KEY
from langchain_sandbox.graph.step_lineage import StepAbove, ToolSteps
from langchain_sandbox.runtime import SandboxRuntime, StepCall
from langchain_sandbox.snapshots import BlobStore, Snapshotter
from langchain_sandbox.state import SandboxState

CHANGING_TOOLS = frozenset({"execute", "write_file", "edit_file"})
"""Deep Agents' tools whose calls change the sandbox (and file a record)."""


@dataclass(frozen=True)
class Position:
    """Where a backend call sits in the conversation of its graph run.

    Attributes:
        turn: The AI message whose tool call is running, as ``(last human message id, AI
            message id)``.
        step_call: That tool call and its siblings (for the runtime's parallel-call handling).
        messages: The conversation, up to and including that AI message.
        finished: Siblings that finished in this run of the step before it (a call re-run
            after a crash continues from their records, not from the earlier turn's).
        tasks: In a subagent, the parent's ``task`` call (or calls) running it: each record
            is filed under their `subagent_key` too
            (in the turn of ``parent``).
        parent: In a subagent, the position of that ``task`` call in the parent's
            conversation: a subagent call before any of its own records continues from the
            record the parent's call would.
        steps: Which steps of the branch ran earlier calls (``None``: no saved steps; records
            are then filed and read without one).
    """

    turn: Turn
    step_call: StepCall
    messages: Sequence[BaseMessage]
    finished: frozenset[str] = frozenset()
    tasks: tuple[str, ...] = ()
    parent: Position | None = None
    steps: ToolSteps | None = None

    @property
    def step(self) -> str | None:
        """The checkpoint the call's step started from, which its record's key names."""
        return self.steps.step_id if self.steps is not None else None

    def find_step_blocking(self) -> None:
        """Find, with the checkpointer's blocking reads in the calling thread, the step of the
        newest earlier turn whose calls were answered (what the record lookup asks first), so
        the lookup on the runtime's loop reads no checkpoint for it (each read there is a hop
        to a worker thread)."""
        if self.steps is None:
            return
        for turn, _, answers in self.earlier():
            if answers:
                self.steps.find_blocking(list(answers.values()), turn[1])
                return

    def earlier(self) -> Iterator[tuple[Turn, tuple[tuple[str, str], ...], dict[str, str]]]:
        """The AI messages that call tools before this one, newest first, each as its turn, tool
        calls ``(id, name)`` and the ids of the tool messages answering them; read backwards
        only as far as the caller goes (usually one turn)."""
        block: list[AIMessage] = []
        answers: dict[str, str] = {}
        for index in range(len(self.messages) - 2, -2, -1):
            message = self.messages[index] if index >= 0 else None
            if message is None or isinstance(message, HumanMessage):
                human = str(message.id or "") if message is not None else ""
                for ai in block:
                    calls = tool_calls(ai)
                    answered = {c: answers[c] for c, _ in calls if c in answers}
                    yield (human, str(ai.id)), calls, answered
                block = []
            elif isinstance(message, ToolMessage) and message.id:
                answers[message.tool_call_id] = str(message.id)
            elif _calls_tools(message):
                block.append(message)  # type: ignore[arg-type]

    def ran_changes(self) -> list[str]:
        """The earlier calls of the conversation that changed the sandbox (answered ``execute``,
        ``write_file`` and ``edit_file`` calls, not failed ones), as ``name call_id``."""
        return [
            f"{m.name} {m.tool_call_id}"
            for m in self.messages
            if isinstance(m, ToolMessage) and m.name in CHANGING_TOOLS and m.status != "error"
        ]

    def finished_calls(self) -> tuple[tuple[str, str], ...]:
        """The finished siblings as tool calls ``(id, name)``."""
        current: AIMessage = self.messages[-1]  # type: ignore[assignment]
        return tuple(c for c in tool_calls(current) if c[0] in self.finished)

    def under(self, above: StepAbove) -> Position:
        """This position, in a subagent run by one of the ``task`` calls of the parent's step
        ``above``: the one whose description opens the subagent's conversation (that of a forked
        subagent ends its first message). Calls with the same description all count: the
        parent continues from the newest record of any of its turn's calls."""
        first = next((m for m in self.messages if isinstance(m, HumanMessage)), None)
        if first is None:
            return self
        text = first.text
        tasks = tuple(
            str(c["id"])
            for c in above.sent
            if c.get("name") == TASK_TOOL
            and isinstance(description := (c.get("args") or {}).get("description"), str)
            and description
            and text.endswith(description)
        )
        if not tasks:
            return self
        steps = self.steps.above() if self.steps is not None else None
        parent = _position_in(above.messages, tasks[0], steps)
        if parent is None:
            return self
        finished = above.answered & parent.step_call.siblings
        return dataclasses.replace(
            self, tasks=tasks, parent=dataclasses.replace(parent, finished=finished)
        )


def position_of(config: RunnableConfig | None, *, blocking: bool) -> Position | None:
    """The position of the tool call running under ``config``; ``None`` outside a tool task
    (``blocking``: the call reads the checkpointer through its blocking methods).

    ``create_agent`` sends each pending tool call of the last AI message as its own task, in the
    order of the message; the task's path (``metadata.langgraph_path``) holds that index. The
    conversation is read from its end: a call costs what follows the last human message, not the
    whole conversation.
    """
    configurable = (config or {}).get("configurable", {})
    read = configurable.get(READ_KEY)
    path = (config or {}).get("metadata", {}).get("langgraph_path")
    if read is None or not isinstance(path, tuple) or len(path) < 2:
        return None
    if path[0] != PUSH or not isinstance(path[1], int):
        return None
    try:
        messages: Sequence[BaseMessage] = read("messages", False) or []
    except (KeyError, TypeError):
        return None
    last = next((i for i in range(len(messages) - 1, -1, -1) if _calls_tools(messages[i])), None)
    if last is None:
        return None
    current: AIMessage = messages[last]  # type: ignore[assignment]
    answered = {m.tool_call_id for m in messages[last + 1 :] if isinstance(m, ToolMessage)}
    pending = [c for c in current.tool_calls if c.get("id") not in answered]
    if path[1] >= len(pending):
        return None
    call_id = pending[path[1]].get("id")
    if not call_id:
        return None
    return _position_in(messages[: last + 1], str(call_id), ToolSteps.of(config, blocking=blocking))


def _position_in(
    messages: Sequence[BaseMessage], call_id: str, steps: ToolSteps | None
) -> Position | None:
    """The position of the tool call ``call_id`` of the last AI message of ``messages`` that
    calls tools, and the conversation up to it."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if _calls_tools(messages[i])), None)
    if last is None:
        return None
    current: AIMessage = messages[last]  # type: ignore[assignment]
    ids = frozenset(c for c, _ in tool_calls(current))
    if call_id not in ids:
        return None
    human = next(
        (str(m.id or "") for m in reversed(messages[:last]) if isinstance(m, HumanMessage)), ""
    )
    return Position(
        (human, str(current.id)),
        StepCall(call_id, ids - {call_id}),
        messages[: last + 1],
        steps=steps,
    )


def _calls_tools(message: BaseMessage) -> bool:
    """Whether ``message`` is an AI message that calls tools and has an id (a turn)."""
    return isinstance(message, AIMessage) and bool(message.tool_calls) and bool(message.id)


class _Remembered:
    """The records of one store this process filed or read, by key, the most recent
    `REMEMBERED_RECORDS` of them (keys are written once, so a remembered record is what
    the store holds, or what this process skipped filing: see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one store may serve runtimes on several loops
        self._records: OrderedDict[str, SandboxState] = OrderedDict()
        # the step a call was last filed in by this process (key without a step -> step)
        self._steps: OrderedDict[str, str] = OrderedDict()

    def get(self, keys: Iterable[str]) -> dict[str, SandboxState]:
        with self._lock:
            found = {key: self._records[key].copy() for key in keys if key in self._records}
            for key in found:
                self._records.move_to_end(key)
        return found

    def put(self, key: str, record: SandboxState) -> None:
        with self._lock:
            self._records[key] = record
            self._records.move_to_end(key)
            while len(self._records) > REMEMBERED_RECORDS:
                self._records.popitem(last=False)

    def put_step(self, call: str, step: str) -> None:
        with self._lock:
            self._steps[call] = step
            self._steps.move_to_end(call)
            while len(self._steps) > REMEMBERED_RECORDS:
                self._steps.popitem(last=False)

    def last_step(self, calls: Iterable[str]) -> str | None:
        with self._lock:
            return next((self._steps[c] for c in calls if c in self._steps), None)


REMEMBERED_RECORDS = 10_000
"""Records remembered per store: one per changing call of the live conversations. A record
forgotten is read from the store again (one skipped is found through its predecessor)."""

_remembered: weakref.WeakKeyDictionary[BlobStore, _Remembered] = weakref.WeakKeyDictionary()
_remembered_lock = threading.Lock()


def _remembered_for(store: BlobStore) -> _Remembered:
    with _remembered_lock:
        memory = _remembered.get(store)
        if memory is None:
            memory = _remembered[store] = _Remembered()
        return memory


class RecordBook:
    """Records filed by tool call, in a snapshot store (see the module docstring).

    Args:
        store: Where records are filed.
        skip_unchanged: Whether a record naming the same snapshot as the record its call
            continued from may be only remembered (sandboxes that do not outlive the process:
            nothing could attach to the head it alone names).
    """

    def __init__(self, store: BlobStore, *, skip_unchanged: bool = False) -> None:
        self.store = store
        self.skip_unchanged = skip_unchanged
        self._memory = _remembered_for(store)

    @classmethod
    def of(cls, runtime: SandboxRuntime, resumable: bool) -> RecordBook | None:
        """The book of a runtime that persists this call's snapshots (``resumable``: a checkpoint
        can resume from it) to a store; ``None`` otherwise (its records could name no snapshot a
        new process could restore)."""
        snapshotter = runtime.snapshotter
        if not runtime.persists(resumable) or not isinstance(snapshotter, Snapshotter):
            return None
        attachable = runtime.capabilities.attach_across_processes
        return cls(snapshotter.store, skip_unchanged=not attachable)

    async def file(
        self,
        thread_id: str,
        position: Position,
        record: SandboxState,
        continued_from: SandboxState | None,
    ) -> None:
        """File the record a tool call left the sandbox in (``continued_from``: the record
        `latest` gave the call)."""
        call_id = position.step_call.call_id
        key = record_key(thread_id, position.turn, call_id, position.step)
        parent = position.parent
        newest = (
            [subagent_key(thread_id, parent.turn, t, parent.step) for t in position.tasks]
            if parent
            else []
        )
        if not (self.skip_unchanged and _same_snapshot(record, continued_from)):
            data = json.dumps(dict(record), sort_keys=True).encode()
            await self.store.put(key, data)
            for overwritten in newest:  # atomic on the stores this package ships
                await self.store.replace(overwritten, data)
        for remembered in (key, *newest):
            self._memory.put(remembered, {**record, "exec_count": 0})
        if position.step is not None:
            self._memory.put_step(record_key(thread_id, position.turn, call_id), position.step)
        if parent is not None and parent.step is not None:
            # The parent's next call looks for the task call's step; under
            # durability="async" its tool message may not be saved yet when it asks.
            for task in position.tasks:
                self._memory.put_step(record_key(thread_id, parent.turn, task), parent.step)

    async def latest(self, thread_id: str, position: Position) -> SandboxState | None:
        """The record the conversation before ``position`` left the sandbox in (``None``: no
        earlier call changed it): that of the finished siblings of its step, if any filed one
        (they built on the earlier turns), else that of the newest earlier turn."""
        if position.finished:
            finished = position.finished_calls()
            if found := await self._filed_in(thread_id, position.turn, finished, position.step):
                return _newest(found)
        for turn, calls, answers in position.earlier():
            step = await self._step_of(thread_id, position, turn, calls, answers)
            if found := await self._filed_in(thread_id, turn, calls, step):
                return _newest(found)
            steps = position.steps
            human = await steps.human_before(step, turn[1]) if steps and step else None
            # A middleware may have replaced the messages before the AI message (a summary).
            if (
                human is not None
                and human != turn[0]
                and (found := await self._filed_in(thread_id, (human, turn[1]), calls, step))
            ):
                return _newest(found)
        if position.parent is not None:  # a subagent's first changes build on its parent's
            return await self.latest(thread_id, position.parent)
        return None

    async def _step_of(
        self,
        thread_id: str,
        position: Position,
        turn: Turn,
        calls: tuple[tuple[str, str], ...],
        answers: dict[str, str],
    ) -> str | None:
        """The step that ran the calls of ``turn`` on the position's branch: the checkpoint
        that saved their tool messages. When the walk cannot tell while the position's own
        checkpoint is not saved yet (``durability="async"``), this live run ran them: the step
        this process last filed them in."""
        steps = position.steps
        if steps is None:
            return None
        step = await steps.find(list(answers.values()), turn[1]) if answers else None
        if step is None and not steps.saved:
            step = self._memory.last_step(record_key(thread_id, turn, c) for c, _ in calls)
        return step

    async def _filed_in(
        self, thread_id: str, turn: Turn, calls: tuple[tuple[str, str], ...], step: str | None
    ) -> list[SandboxState]:
        """The records the tool calls ``calls`` of ``turn`` filed in ``step`` (with what their
        subagents filed); else those filed without a step (by an earlier version, or under
        ``durability="exit"``)."""
        if step is not None:
            found = await self._filed(call_keys(thread_id, turn, calls, step))
            if found:
                return found
        return await self._filed(call_keys(thread_id, turn, calls))

    async def _filed(self, keys: set[str]) -> list[SandboxState]:
        """The records filed under ``keys`` (remembered, else read from the store)."""
        found = self._memory.get(keys)
        rest = keys - found.keys()
        try:
            present = rest - await self.store.missing(rest) if rest else set()
            read = await self.store.get_many(present) if present else {}
        except OSError as exc:  # a store of the application's own, unreachable
            raise store_unavailable(exc) from exc
        for key, data in read.items():
            found[key] = _parse(data)
            self._memory.put(key, found[key])
        return list(found.values())


def _newest(records: list[SandboxState]) -> SandboxState:
    """Calls of one turn run one at a time: the highest revision saw the others."""
    return max(records, key=lambda r: r.get("revision", 0))


def _same_snapshot(record: SandboxState, before: SandboxState | None) -> bool:
    """Whether ``record`` names, fully captured, the snapshot ``before`` names: restoring
    either gives the same sandbox."""
    snapshot = record.get("snapshot")
    return (
        before is not None
        and snapshot is not None
        and snapshot == before.get("snapshot")
        and record.get("snapshot_revision") == record.get("revision")
    )


def _parse(data: bytes) -> SandboxState:
    value: Any = json.loads(data)
    if not isinstance(value, dict):
        raise SnapshotNotFoundError("A Deep Agents sandbox record in the store is malformed.")
    value["exec_count"] = 0
    return value  # type: ignore[return-value]


__all__ = ["Position", "RecordBook", "position_of"]
