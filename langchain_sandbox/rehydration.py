"""Keeping one thread's sandbox in step with its record: rehydrate before a call, persist after.

The engine decides, for one call of one thread, which session the call runs in and what record it
returns. It knows nothing of event-loop threads, locks, caps or idle eviction (the
:mod:`~langchain_sandbox.session_pool` does those) and nothing of LangGraph (the tools pass it a
record and turn the returned record into a state update). Its rules:

* **rehydrate** (before a call): the live session is used when its head equals the record's;
  otherwise (a new process, a resume, a fork, time travel) the engine attaches to the sandbox the
  record names if the provider can and its head still matches, or creates a new session and
  restores the record's snapshot into it (copy-on-divergence: the other branch later does the
  same in reverse);
* **parallel calls** of one graph step all carry the record from before the step: a call of the
  same model message that has not run yet shares the live session; a call already applied (a fork
  re-running the step) or a call of another message is a divergence and restores its record;
* **persist** (after a call that can change the sandbox): the revision goes up, a new head token
  is issued, and with ``persist="every_call"`` an incremental snapshot is captured and its
  reference written into the returned record;
* **recover**: a sandbox that died under a call is replaced (restored from the last snapshot); the
  call is repeated only if it is safe to repeat, since user code never runs twice silently;
* **cancel**: a session cancelled mid-change cannot be trusted and is destroyed in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, NamedTuple, Protocol, TypeVar

from langchain_sandbox.errors import SandboxError, SandboxGoneError
from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.retries import retry_async
from langchain_sandbox.state import SandboxState

T = TypeVar("T")

logger = logging.getLogger(__name__)

PersistPolicy = Literal["every_call", "never"]

HEAD_VARIABLE = "_langchain_sandbox_head"
"""Global of the sandbox's Python interpreter holding its head, so a later attach can check it.

In the interpreter, not in a file: attaching is worth it for the memory it keeps, so a sandbox
whose interpreter restarted (variables lost) must not match and is restored from its snapshot
instead. The leading underscore keeps it out of variable snapshots."""


class SnapshotInfoLike(Protocol):
    """What the engine needs from a captured snapshot: its reference."""

    @property
    def ref(self) -> str: ...


class RestoreReportLike(Protocol):
    """What the engine needs from a restore: the notices the model should read."""

    @property
    def notices(self) -> Sequence[str]: ...


class SnapshotterLike(Protocol):
    """The snapshot engine the runtime persists with
    (:class:`langchain_sandbox.snapshots.Snapshotter` by default)."""

    async def capture(
        self, session: Session, *, base: str | None, revision: int
    ) -> SnapshotInfoLike: ...

    async def restore(self, session: Session, ref: str) -> RestoreReportLike: ...


@dataclass(frozen=True)
class StepCall:
    """Which tool call a runtime call is, and the calls of the same model message.

    Parallel tool calls of one graph step all see the state from before the step, so they all
    carry the same (soon stale) record. Naming the message's calls lets the runtime tell such a
    sibling (share the live session) from a replay of a call already applied, or a call of
    another message carrying an old record (a fork or time travel: restore that record).
    """

    call_id: str
    siblings: frozenset[str] = frozenset()

    @property
    def members(self) -> frozenset[str]:
        return self.siblings | {self.call_id}


class Outcome(NamedTuple, Generic[T]):
    """What a runtime call returns.

    Attributes:
        value: The operation's result.
        record: The thread's updated :class:`SandboxState`, as an update for the graph's
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

    @property
    def known(self) -> bool:
        return self.head is not None or self.revision > 0

    def adopt(self, record: SandboxState) -> None:
        """Take the record's position (after a restore or an attach to match it)."""
        self.head = record.get("head")
        self.revision = record.get("revision", 0)
        self.snapshot = record.get("snapshot")
        self.snapshot_revision = record.get("snapshot_revision", 0)


@dataclass
class Batch:
    """The head the current graph step started from, and the tool calls already applied on top
    of it: parallel calls of one step all carry that stale head and must share the live session,
    while a replayed call (a fork re-running the step) must not."""

    base: str | None = None
    members: frozenset[str] = frozenset()
    applied: set[str] = field(default_factory=set)

    def start(self, head: str | None, step_call: StepCall | None) -> None:
        """The next calls build on ``head``; those of ``step_call``'s message are siblings."""
        self.base = head
        self.members = step_call.members if step_call is not None else frozenset()
        self.applied = set()

    def is_sibling(self, head: str | None, step_call: StepCall | None) -> bool:
        """Whether a call carrying ``head`` is a not-yet-applied call of this batch."""
        return (
            step_call is not None
            and head == self.base
            and step_call.call_id in self.members
            and step_call.call_id not in self.applied
        )


@dataclass(eq=False)
class ThreadSandbox:
    """What the engine knows about one thread: its live session, position and current batch."""

    thread_id: str
    session: Session | None = None
    position: Position = field(default_factory=Position)
    batch: Batch = field(default_factory=Batch)

    def as_record(self) -> SandboxState:
        position = self.position
        record = SandboxState(
            revision=position.revision,
            head=position.head,
            snapshot=position.snapshot,
            snapshot_revision=position.snapshot_revision,
            exec_count=0,
        )
        if self.session is not None:
            record["session"] = self.session.record
        return record

    def take_session(self) -> Session | None:
        """Detach the live session (to close it); the thread then has none."""
        session, self.session = self.session, None
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


class RehydrationEngine:
    """Runs one call of one thread against the right session; see the module docstring.

    Args:
        host: Where sessions come from and go back to.
        snapshotter: Captures and restores snapshots.
        persist: ``"every_call"`` captures a snapshot after every changing call; ``"never"``.
    """

    def __init__(
        self, host: SessionHost, *, snapshotter: SnapshotterLike, persist: PersistPolicy
    ) -> None:
        if persist not in ("every_call", "never"):
            raise ValueError(f"persist must be 'every_call' or 'never', not {persist!r}.")
        self._host = host
        self.snapshotter = snapshotter
        self.persist: PersistPolicy = persist

    async def run(
        self,
        thread: ThreadSandbox,
        operation: Callable[[Session], Awaitable[T]],
        *,
        record: SandboxState | None = None,
        mutates: bool = True,
        repeatable: bool = False,
        step_call: StepCall | None = None,
    ) -> Outcome[T]:
        """Rehydrate ``thread`` to ``record``, run ``operation``, persist; one call at a time
        per thread (the caller holds the thread's lock).

        ``record=None`` uses the thread's own latest record (outside a graph, state lives in the
        runtime). See :meth:`langchain_sandbox.runtime.SandboxRuntime.aexecute` for the flags.
        """
        notices: list[str] = []
        wanted = record if record is not None else thread.as_record()
        session = await self._rehydrate(thread, wanted, step_call, notices)
        try:
            value = await operation(session)
        except SandboxGoneError as exc:
            value, session = await self._recover(
                thread, operation, exc, repeatable, step_call, notices
            )
        except asyncio.CancelledError:
            if mutates:
                self._retire(thread)
            raise
        if mutates:
            await self._advance(thread, session, step_call, notices)
        return Outcome(value, thread.as_record(), notices)

    async def discard(self, thread: ThreadSandbox) -> None:
        """Close the thread's live session, if any."""
        session = thread.take_session()
        if session is not None:
            await self._host.close(session)

    async def _rehydrate(
        self,
        thread: ThreadSandbox,
        record: SandboxState,
        step_call: StepCall | None,
        notices: list[str],
    ) -> Session:
        wanted_head = record.get("head")
        if thread.session is not None:
            head, batch = thread.position.head, thread.batch
            if wanted_head == head:
                new_step = step_call is not None and step_call.call_id not in batch.members
                if batch.base != head or new_step:
                    batch.start(head, step_call)
                return thread.session
            if batch.is_sibling(wanted_head, step_call):
                # A parallel call of the step that produced the live head: share the session.
                return thread.session
            # The record is another branch (fork, time travel, another worker's step): its state
            # lives in its snapshot, not in this session.
            await self.discard(thread)
        session = await self._attach_matching(record)
        if session is None:
            session = await self._host.create(thread.thread_id)
            if wanted_head is not None:
                try:
                    await self._restore_into(session, record, notices)
                except BaseException:
                    # Cancelled mid-restore: the half-restored session belongs to no one.
                    await asyncio.shield(self._host.close(session))
                    raise
        thread.session = session
        thread.position.adopt(record)
        thread.batch.start(thread.position.head, step_call)
        return session

    async def _recover(
        self,
        thread: ThreadSandbox,
        operation: Callable[[Session], Awaitable[T]],
        exc: SandboxGoneError,
        repeatable: bool,
        step_call: StepCall | None,
        notices: list[str],
    ) -> tuple[T, Session]:
        """The sandbox died under a call: replace it (restored from the last snapshot), then
        repeat the call only if it is safe to; otherwise tell the caller to run it again."""
        last = thread.as_record()
        last.pop("session", None)
        await self.discard(thread)
        session = await self._rehydrate(thread, last, step_call, notices)
        where = (
            f"restored from the snapshot of revision {last.get('snapshot_revision', 0)}"
            if last.get("snapshot")
            else "started empty (no snapshot was available)"
        )
        if repeatable:
            notices.append(f"The sandbox had stopped ({exc}); a new one was {where}.")
            return await operation(session), session
        raise SandboxGoneError(
            f"The sandbox stopped during this call ({exc}). A new sandbox was {where}; "
            "anything the call did is lost. Run it again if it is still needed.",
            provider=exc.provider,
        ) from exc

    async def _advance(
        self,
        thread: ThreadSandbox,
        session: Session,
        step_call: StepCall | None,
        notices: list[str],
    ) -> None:
        position = thread.position
        position.revision += 1
        position.head = uuid.uuid4().hex
        if step_call is None:
            # A call outside any graph step: nothing can be its sibling any more.
            thread.batch.start(position.head, None)
        else:
            thread.batch.applied.add(step_call.call_id)
        await _mark_head(session, position.head)
        if self.persist != "every_call":
            return
        snapshotter, revision, base = self.snapshotter, position.revision, position.snapshot
        try:
            info = await retry_async(
                lambda: snapshotter.capture(session, base=base, revision=revision)
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The user's result must survive a failed persist: keep the previous snapshot and say
            # so, rather than fail a call whose work already happened.
            logger.warning("snapshot of thread %s failed: %s", thread.thread_id, exc)
            kept = (
                f"the last saved snapshot is revision {position.snapshot_revision}"
                if position.snapshot
                else "no earlier snapshot exists"
            )
            notices.append(
                f"Could not save a snapshot of the sandbox ({exc}); {kept}. If this process "
                "stops, changes after that revision are lost."
            )
            return
        position.snapshot, position.snapshot_revision = info.ref, revision

    async def _attach_matching(self, record: SandboxState) -> Session | None:
        """Reattach to the sandbox the record names, if it outlived its process and still holds
        the record's head; ``None`` otherwise."""
        session_record = record.get("session")
        head = record.get("head")
        provider = await self._host.provider()
        if not session_record or head is None or not provider.capabilities.attach_across_processes:
            return None
        if session_record.get("provider") not in (None, provider.name):
            return None
        try:
            session = await provider.attach(session_record)
        except SandboxError as exc:
            logger.info("attach to %s failed: %s", session_record.get("sandbox_id"), exc)
            return None
        if session is None:
            return None
        if await _read_head(session) == head:
            return session
        # Another step moved this sandbox on: it belongs to another branch now. Leave it to its
        # owner (or to gc) and restore the record's state into a new session instead.
        return None

    async def _restore_into(
        self, session: Session, record: SandboxState, notices: list[str]
    ) -> None:
        ref = record.get("snapshot")
        revision = record.get("revision", 0)
        if not ref:
            notices.append(
                f"This sandbox is new: the state of revision {revision} could not be restored "
                "because no snapshot of it was saved. Files and variables from earlier calls "
                "are gone; recreate what you need."
            )
            return
        snapshotter = self.snapshotter
        try:
            report = await retry_async(lambda: snapshotter.restore(session, ref))
        except asyncio.CancelledError:
            raise
        except SandboxError as exc:
            # Refusing forever would leave the thread unusable; start empty and say so loudly.
            notices.append(
                f"The sandbox could not be restored from its snapshot ({exc}); it starts "
                "empty. Files and variables from earlier calls are gone."
            )
            return
        snapshot_revision = record.get("snapshot_revision", revision)
        notices.append(
            f"The sandbox was restored from the snapshot of revision {snapshot_revision}."
        )
        if snapshot_revision < revision:
            notices.append(
                f"Changes made after revision {snapshot_revision} (up to {revision}) were not "
                "saved and are lost."
            )
        notices.extend(report.notices)

    def _retire(self, thread: ThreadSandbox) -> None:
        """Destroy the session of a cancelled call, in the background.

        Code may still be running in it and its state is whatever the call left halfway, so it
        cannot be trusted or reused: the thread's next call restores the state before the call
        from the record (the cancelled call never happened). Destroying it is also what stops
        the code on every provider.
        """
        session = thread.take_session()
        if session is not None:
            self._host.close_soon(session)


async def _mark_head(session: Session, head: str | None) -> None:
    """Record the head in a sandbox another process may attach to (one extra round trip per
    changing call, on providers whose sandboxes outlive their process only)."""
    capabilities = session.capabilities
    if head is None or not (capabilities.stateful_python and capabilities.attach_across_processes):
        return
    with contextlib.suppress(SandboxError):
        await session.run_code(f"{HEAD_VARIABLE} = {head!r}", timeout=30)


async def _read_head(session: Session) -> str | None:
    try:
        result = await session.run_code(HEAD_VARIABLE, timeout=30)
    except SandboxError:
        return None
    if not result.ok or result.value is None:
        return None
    return result.value.strip("'\"")


__all__ = [
    "HEAD_VARIABLE",
    "Batch",
    "Outcome",
    "PersistPolicy",
    "Position",
    "RehydrationEngine",
    "RestoreReportLike",
    "SessionHost",
    "SnapshotInfoLike",
    "SnapshotterLike",
    "StepCall",
    "ThreadSandbox",
]
