"""One thread's sandbox as the runtime keeps it, shared by the session pool, the rehydration
engine and the runtime's operations: where it stands in its history (`Position`), the graph step
its calls belong to (`Batch`, from each call's `StepCall`), the snapshot being written behind
(`WriteBehind`), its live session (`ThreadSandbox`), what a call returns (`Outcome`), and what the
engine needs of its collaborators (`SessionHost` for sessions, `SnapshotterLike` for snapshots).
Plain data and protocols: the rules that move a thread are ``rehydration.py``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

from langchain_sandbox.core.services import Services
from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.state import SandboxState

T = TypeVar("T")


class SnapshotInfoLike(Protocol):
    """What the engine needs from a captured snapshot: its reference, and what the model should
    read about it (variables that were not saved, and why)."""

    @property
    def ref(self) -> str: ...

    @property
    def notices(self) -> Sequence[str]: ...


class RestoreReportLike(Protocol):
    """What the engine needs from a restore: the notices the model should read, and whether
    they only say that it happened (nothing lost or left)."""

    @property
    def notices(self) -> Sequence[str]: ...

    @property
    def complete(self) -> bool: ...


class SnapshotterLike(Protocol):
    """The snapshot engine the runtime persists with
    ([`langchain_sandbox.snapshots.Snapshotter`][langchain_sandbox.Snapshotter] by default)."""

    async def capture(
        self, session: Session, *, base: str | None, revision: int
    ) -> SnapshotInfoLike: ...

    async def restore(self, session: Session, ref: str) -> RestoreReportLike: ...

    async def name_head(self, head: str, ref: str) -> None: ...

    async def find_head(self, head: str) -> str | None: ...


@dataclass(frozen=True)
class StepCall:
    """Which tool call a runtime call is, and the calls of the same model message or graph step.

    Parallel tool calls of one graph step all see the state from before the step, so they all
    carry the same (soon stale) record. Naming the message's calls, or the graph step itself,
    lets the runtime tell such a sibling (share the live session) from a replay of a call already
    applied, or a call of another step carrying an old record (a fork or time travel: restore
    that record).

    Attributes:
        call_id: The tool call's id.
        siblings: The other calls of the same model message.
        step: An opaque key of the graph step the call runs in (its checkpoint and namespace),
            or ``None``: calls of one step are siblings even when each came from a ``Send`` of
            its own, with no message naming the others.
    """

    call_id: str
    siblings: frozenset[str] = frozenset()
    step: str | None = None

    @property
    def members(self) -> frozenset[str]:
        return self.siblings | {self.call_id}


class Outcome(NamedTuple, Generic[T]):
    """What a runtime call returns.

    Attributes:
        value: The operation's result.
        record: The thread's updated [`SandboxState`][langchain_sandbox.SandboxState], as an update for the graph's
            ``sandbox`` channel (``exec_count`` is a delta, as the channel's reducer expects).
        notices: Infrastructure messages the model should read (a restore happened, a snapshot
            could not be saved...). Operations returning an ``ExecutionResult`` also carry them
            in ``result.notices``.
    """

    value: T
    record: SandboxState
    notices: list[str]


@dataclass
class Position:
    """Where a thread's sandbox stands in its history: the fields of its record."""

    head: str | None = None
    revision: int = 0
    snapshot: str | None = None
    snapshot_revision: int = 0
    services: Services = field(default_factory=Services)

    @property
    def known(self) -> bool:
        return self.head is not None or self.revision > 0

    def adopt(self, record: SandboxState) -> None:
        """Take the record's position (after a restore or an attach to match it)."""
        self.head = record.get("head")
        self.revision = record.get("revision", 0)
        self.snapshot = record.get("snapshot")
        self.snapshot_revision = record.get("snapshot_revision", 0)
        self.services = Services.of(record)


@dataclass
class Batch:
    """The head the current graph step started from, the heads its calls issued since, and the
    tool calls already applied: parallel calls of one step carry one of those heads (the one
    before the step, or that of a finished sibling whose saved record they were re-run with) and
    must share the live session, while a replayed call (a fork re-running the step) must not."""

    base: str | None = None
    members: frozenset[str] = frozenset()
    step: str | None = None
    heads: set[str | None] = field(default_factory=set)
    applied: set[str] = field(default_factory=set)

    def start(self, head: str | None, step_call: StepCall | None) -> None:
        """The next calls build on ``head``; those of ``step_call``'s message or step are
        siblings."""
        self.base = head
        self.members = step_call.members if step_call is not None else frozenset()
        self.step = step_call.step if step_call is not None else None
        self.heads = {head}
        self.applied = set()

    def includes(self, step_call: StepCall | None) -> bool:
        """Whether ``step_call`` belongs to this batch's message or graph step."""
        return step_call is not None and (
            step_call.call_id in self.members
            or (step_call.step is not None and step_call.step == self.step)
        )

    def issued(self, head: str | None) -> None:
        """A call of this batch moved the live session to ``head``."""
        self.heads.add(head)

    def is_sibling(self, head: str | None, step_call: StepCall | None) -> bool:
        """Whether a call carrying ``head`` is a not-yet-applied call of this batch."""
        return (
            step_call is not None
            and head in self.heads
            and self.includes(step_call)
            and step_call.call_id not in self.applied
        )


@dataclass(frozen=True)
class WriteBehind:
    """A snapshot being captured after its call returned: the task, and the revision it captures."""

    task: asyncio.Task[None]
    revision: int


@dataclass(eq=False)
class ThreadSandbox:
    """What the engine knows about one thread: its live session, position and current batch,
    the snapshot being written behind, and notices about it for the thread's next call."""

    thread_id: str
    session: Session | None = None
    position: Position = field(default_factory=Position)
    batch: Batch = field(default_factory=Batch)
    behind: WriteBehind | None = None
    late_notices: list[str] = field(default_factory=list)
    capture_notices: tuple[str, ...] = ()
    """What the last capture said; a capture that says the same again is not repeated."""
    spilled: str | None = None
    """The head the thread was at when its session was spilled (captured, then closed to make
    room): restoring that head again loses nothing, so it is done without a notice."""
    ran_processes: bool = False
    """A process was started in the live session: a rewind must stop those the record lacks."""

    async def settle(self) -> None:
        """Wait for the snapshot being written behind, if any: nothing may change or close the
        session while it is read. Cancelling the waiter does not cancel the capture."""
        behind = self.behind
        if behind is not None:
            await asyncio.shield(behind.task)
            if self.behind is behind:
                self.behind = None

    def as_record(self) -> SandboxState:
        position = self.position
        record = SandboxState(
            revision=position.revision,
            head=position.head,
            snapshot=position.snapshot,
            snapshot_revision=position.snapshot_revision,
            exec_count=0,
        )
        if position.services:
            record["services"] = position.services.to_json()
        if self.session is not None:
            record["session"] = self.session.record
        return record

    def take_session(self) -> Session | None:
        """Detach the live session (to close it); the thread then has none."""
        session, self.session = self.session, None
        self.ran_processes = False
        return session


class SessionHost(Protocol):
    """Where the engine gets sessions and gives them back (the runtime's session pool)."""

    async def provider(self) -> Provider:
        """The provider sessions come from (built on first use)."""

    async def create(self, thread_id: str) -> Session:
        """A new session for ``thread_id``."""

    async def close(self, session: Session) -> None:
        """Destroy a session now; a failure is logged, never raised."""

    def close_soon(self, session: Session) -> None:
        """Destroy a session in the background (the caller is being cancelled)."""


__all__ = [
    "Batch",
    "Outcome",
    "Position",
    "RestoreReportLike",
    "SessionHost",
    "SnapshotInfoLike",
    "SnapshotterLike",
    "StepCall",
    "ThreadSandbox",
    "WriteBehind",
]
