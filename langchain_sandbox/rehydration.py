"""Keeping one thread's sandbox in step with its record: rehydrate before a call, persist after.

The engine decides, for one call of one thread, which session the call runs in and what record it
returns. It knows nothing of event-loop threads, locks, caps or idle eviction (the
`session_pool` does those) and nothing of LangGraph (the tools pass it a
record and turn the returned record into a state update). Its rules:

* **rehydrate** (before a call): the live session is used when its head equals the record's;
  a live session of the thread whose record went back (a fork or time travel to an earlier
  checkpoint) is **rewound** in place: the record's snapshot is restored into it, which writes
  only the files that differ, removes those the snapshot lacks and loads the variables, so it
  ends as a fresh restore would; otherwise (a new process, a resume, a record naming another
  sandbox) the engine attaches to the sandbox the record names if the provider can and its head
  still matches, or creates a new session and restores the record's snapshot into it;
* **parallel calls** of one graph step all carry the record from before the step (or, re-run after
  a crash, the record of the step's calls that finished): a call of the same step (the same model
  message, or the same graph step for ``Send`` fan-out) that has not run yet shares the live
  session, whichever head of the step it carries; a call already applied (a fork re-running the
  step) or a call of another step is a divergence and restores its record;
* **persist** (after a call that can change the sandbox): the revision goes up, a new head token
  is issued (set in the sandbox's interpreter with the call itself where the provider can carry
  it), and an incremental snapshot is captured (its reference written into the returned
  record) when the policy says so: ``"resumable"`` (the default) captures only a call whose
  caller can resume from its record (a graph with a checkpointer), ``"every_call"`` every call,
  ``"never"`` none;
* **write behind** (sandboxes that outlive the process): the snapshot is captured after the call
  has returned, while the model thinks. The returned record keeps naming the last *complete*
  snapshot, so it is truthful whatever happens next: the thread's next call (or closing it) waits
  for the capture, and the record after it names the new snapshot; a resume elsewhere finds it by
  the record's head if it completed, else attaches to the live sandbox (its head matches), else
  restores the last complete snapshot and says which revisions were lost;
* **recover**: a sandbox that died under a call is replaced (restored from the last snapshot); the
  call is repeated only if it is safe to repeat, since user code never runs twice silently;
* **cancel**: a session cancelled mid-change cannot be trusted and is destroyed in the background;
* **spill**: a session the pool closes to make room (its cap) is captured first, whatever the
  policy, so the thread's next call restores it into a new session, files and variables, as an
  operating system pages memory out and in; nothing lost, nothing to tell the model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, NamedTuple, Protocol, TypeVar

from langchain_sandbox.errors import SandboxError, SandboxGoneError, SnapshotStoreUnavailable
from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.retries import retry_async
from langchain_sandbox.services import Services, bring_back
from langchain_sandbox.state import SandboxState

T = TypeVar("T")

logger = logging.getLogger(__name__)

PersistPolicy = Literal["resumable", "every_call", "never"]
"""When the engine captures a snapshot after a changing call.

``"resumable"``: only when the call says something can resume from its record (a graph with a
checkpointer); a snapshot nobody can restore is not worth its cost. ``"every_call"``: always, so
the runtime itself can bring the state back after idle eviction or a crashed sandbox, even
outside a graph. ``"never"``: the live session is the only copy of the state."""

_POLICIES: tuple[PersistPolicy, ...] = ("resumable", "every_call", "never")

HEAD_VARIABLE = "_langchain_sandbox_head"
"""Global of the sandbox's Python interpreter holding its head, so a later attach can check it.

In the interpreter, not in a file: attaching is worth it for the memory it keeps, so a sandbox
whose interpreter restarted (variables lost) must not match and is restored from its snapshot
instead. The leading underscore keeps it out of variable snapshots."""


class _CapturesInFlight:
    """Snapshots being written behind in this process, by head.

    Each runtime has its own engine and loop, so a thread that moves to another runtime of the
    same process (another provider) would otherwise miss a capture still in flight and restore an
    older snapshot, losing the last call's work. A resume waits for it instead; these futures are
    thread-safe, so the waiter may be on any loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_head: dict[str, concurrent.futures.Future[None]] = {}

    def add(self, head: str, task: asyncio.Task[None]) -> None:
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            self._by_head[head] = future

        def finished(_: asyncio.Task[None]) -> None:
            with self._lock:
                if self._by_head.get(head) is future:
                    del self._by_head[head]
            future.set_result(None)

        task.add_done_callback(finished)

    async def wait(self, head: str) -> None:
        with self._lock:
            future = self._by_head.get(head)
        if future is not None:
            # Shielded: a cancelled waiter must not cancel the future other waiters share.
            await asyncio.shield(asyncio.wrap_future(future))


_captures_in_flight = _CapturesInFlight()


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


class RehydrationEngine:
    """Runs one call of one thread against the right session; see the module docstring.

    Args:
        host: Where sessions come from and go back to.
        snapshotter: Captures and restores snapshots.
        persist: When a changing call is captured (see [`PersistPolicy`][langchain_sandbox.PersistPolicy]).
        write_behind: Capture after the call has returned instead of before (see the module
            docstring); worth it where sandboxes outlive the process.
    """

    def __init__(
        self,
        host: SessionHost,
        *,
        snapshotter: SnapshotterLike,
        persist: PersistPolicy,
        write_behind: bool = False,
    ) -> None:
        if persist not in _POLICIES:
            raise ValueError(
                f"persist must be one of {', '.join(map(repr, _POLICIES))}, not {persist!r}."
            )
        self._host = host
        self.snapshotter = snapshotter
        self.persist: PersistPolicy = persist
        self.write_behind = write_behind

    def captures(self, resumable: bool) -> bool:
        """Whether a changing call is captured, given whether its caller can resume from it."""
        return self.persist == "every_call" or (self.persist == "resumable" and resumable)

    async def run(
        self,
        thread: ThreadSandbox,
        operation: Callable[[Session], Awaitable[T]],
        *,
        record: SandboxState | None = None,
        mutates: bool = True,
        repeatable: bool = False,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[T]:
        """Rehydrate ``thread`` to ``record``, run ``operation``, persist; one call at a time
        per thread (the caller holds the thread's lock).

        ``record=None`` uses the thread's own latest record (outside a graph, state lives in the
        runtime). See [`langchain_sandbox.runtime.SandboxRuntime.aexecute`][langchain_sandbox.SandboxRuntime.aexecute] for the flags.
        """
        await thread.settle()
        notices, thread.late_notices = thread.late_notices, []
        wanted = record if record is not None else thread.as_record()
        session = await self._rehydrate(thread, wanted, step_call, notices)
        head = uuid.uuid4().hex if mutates else None
        if head is not None:
            session.carry_head(HEAD_VARIABLE, head)
            if self.captures(resumable) and not self.write_behind:
                session.expect_capture()
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
        if head is not None:
            await self._advance(thread, session, head, step_call, resumable, notices)
        return Outcome(value, thread.as_record(), notices)

    async def spill(self, thread: ThreadSandbox) -> bool:
        """Capture the thread's live session so that its next call restores it, before the
        caller closes it to make room; whatever the policy, since closing it would lose it.

        Returns whether the state is saved; not when the capture failed, or when the policy is
        ``"never"`` (the live session is the only copy, as asked): the caller then says it is
        gone. A thread already saved at its position is not captured again. What the capture
        could not keep (unpicklable variables) the restore tells.
        """
        session, position = thread.session, thread.position
        if session is None:
            return True
        if self.persist == "never":
            return False
        saved = position.snapshot is not None and position.snapshot_revision >= position.revision
        if position.known and not saved:
            revision, base, snapshotter = position.revision, position.snapshot, self.snapshotter
            try:
                info = await retry_async(
                    lambda: snapshotter.capture(session, base=base, revision=revision)
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("spilling thread %s failed: %s", thread.thread_id, exc)
                return False
            position.snapshot, position.snapshot_revision = info.ref, revision
        thread.spilled = position.head
        return True

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
                new_step = step_call is not None and not batch.includes(step_call)
                if head not in batch.heads or new_step:
                    batch.start(head, step_call)
                return thread.session
            if batch.is_sibling(wanted_head, step_call):
                # A parallel call of the step that produced the live head: share the session.
                return thread.session
            # The record is another branch (fork, time travel, another worker's step): its state
            # lives in its snapshot. Rewinding this session to it costs what differs; a new
            # session costs the whole workspace.
            record = await self._with_snapshot_written_behind(record)
            if await self._rewind(thread, record, notices):
                thread.position.adopt(record)
                thread.batch.start(thread.position.head, step_call)
                await self._bring_back_services(
                    thread, thread.session, fresh=False, notices=notices
                )
                return thread.session
            await self.discard(thread)
        record = await self._with_snapshot_written_behind(record)
        if wanted_head is not None and thread.spilled == wanted_head:
            # Spilled at this head: its snapshot is the thread's, newer than any the record
            # names (a record nothing can resume from names none).
            record = {
                **record,
                "snapshot": thread.position.snapshot,
                "snapshot_revision": thread.position.snapshot_revision,
            }
        session = await self._attach_matching(record)
        fresh = session is None
        if session is None:
            session = await self._host.create(thread.thread_id)
            quiet = wanted_head is not None and thread.spilled == wanted_head
            if wanted_head is not None:
                try:
                    if not await self._restore_into(session, record, notices, quiet=quiet):
                        # A restore that failed part-way may have written files or variables:
                        # the thread goes on in a new sandbox, really empty as its notice says.
                        await self._host.close(session)
                        session = await self._host.create(thread.thread_id)
                except BaseException:
                    # Cancelled mid-restore: the half-restored session belongs to no one.
                    await asyncio.shield(self._host.close(session))
                    raise
        thread.session = session
        thread.spilled = None
        thread.position.adopt(record)
        thread.batch.start(thread.position.head, step_call)
        await self._bring_back_services(thread, session, fresh=fresh, notices=notices)
        return session

    async def _bring_back_services(
        self, thread: ThreadSandbox, session: Session, *, fresh: bool, notices: list[str]
    ) -> None:
        """Start the record's services in a session just restored, attached or rewound (see
        `langchain_sandbox.services`); a rewound one also stops the other branch's processes."""
        stop_others, thread.ran_processes = thread.ran_processes, bool(thread.position.services)
        notices.extend(
            await bring_back(
                session, thread.position.services, fresh=fresh, stop_others=stop_others
            )
        )

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
        # What the new sandbox holds is what its rehydration says (restored, partly restored,
        # or empty), not what the record promised.
        restoring: list[str] = []
        session = await self._rehydrate(thread, last, step_call, restoring)
        held = " ".join(restoring) or "The new sandbox starts empty (nothing had been saved)."
        if repeatable:
            notices.append(f"The sandbox had stopped ({exc}); a new one replaced it.")
            notices.extend(restoring)
            return await operation(session), session
        raise SandboxGoneError(
            f"The sandbox stopped during this call ({exc}) and a new one replaced it. {held} "
            "Anything the call did is lost. Run it again if it is still needed.",
            provider=exc.provider,
        ) from exc

    async def _advance(
        self,
        thread: ThreadSandbox,
        session: Session,
        head: str,
        step_call: StepCall | None,
        resumable: bool,
        notices: list[str],
    ) -> None:
        position = thread.position
        position.revision += 1
        position.head = head
        if step_call is None:
            # A call outside any graph step: nothing can be its sibling any more.
            thread.batch.start(position.head, None)
        else:
            thread.batch.applied.add(step_call.call_id)
            thread.batch.issued(position.head)
        if session.carried_head != head and (resumable or self.persist != "resumable"):
            # Only a record something can resume from is attached by its head; under the
            # explicit policies every record may be handed to another process.
            await _mark_head(session, head)
        if not self.captures(resumable):
            return
        if not self.write_behind:
            await self._capture(thread, session, head, notices)
            return
        task = asyncio.get_running_loop().create_task(
            self._capture(thread, session, head, thread.late_notices)
        )
        thread.behind = WriteBehind(task, position.revision)
        _captures_in_flight.add(head, task)

    async def _capture(
        self, thread: ThreadSandbox, session: Session, head: str, notices: list[str]
    ) -> None:
        """Snapshot the thread's position (``head``) into its record; a failure becomes a notice.

        Written behind, the snapshot is also named after its head, so a resume from the record
        the call returned (which could not name it yet) finds it.
        """
        position, snapshotter = thread.position, self.snapshotter
        revision, base = position.revision, position.snapshot
        try:
            info = await retry_async(
                lambda: snapshotter.capture(session, base=base, revision=revision)
            )
            if self.write_behind:
                await retry_async(lambda: snapshotter.name_head(head, info.ref))
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
                f"Could not save a snapshot of revision {revision} of the sandbox ({exc}); "
                f"{kept}. If this process stops, changes after that revision are lost."
            )
            return
        if position.head == head:
            position.snapshot, position.snapshot_revision = info.ref, revision
        notices.extend(n for n in info.notices if n not in thread.capture_notices)
        thread.capture_notices = tuple(info.notices)

    async def _with_snapshot_written_behind(self, record: SandboxState) -> SandboxState:
        """``record``, naming the snapshot of its head if one was written behind and completed
        after the record was (otherwise its last complete snapshot stays the fallback)."""
        head, revision = record.get("head"), record.get("revision", 0)
        if head is None or record.get("snapshot_revision", 0) >= revision:
            return record
        await _captures_in_flight.wait(head)
        try:
            ref = await self.snapshotter.find_head(head)
        except SandboxError as exc:
            # The store is unreachable: attaching may still work, and restoring says so.
            logger.warning("looking up the snapshot of head %s failed: %s", head, exc)
            return record
        if ref is None:
            return record
        return {**record, "snapshot": ref, "snapshot_revision": revision}

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

    async def _rewind(
        self, thread: ThreadSandbox, record: SandboxState, notices: list[str]
    ) -> bool:
        """Restore the record's snapshot into the thread's live session; ``False`` (the caller
        then replaces the session) when there is no snapshot, when the record names another
        sandbox the provider may attach to, or when the restore fails."""
        session, ref = thread.session, record.get("snapshot")
        if session is None or not ref or await self._names_other_sandbox(record, session):
            return False
        # The sandbox stops holding the other branch's state: no attach may take it for that.
        await _mark_head(session, None)
        snapshotter = self.snapshotter
        try:
            report = await retry_async(lambda: snapshotter.restore(session, ref))
        except asyncio.CancelledError:
            self._retire(thread)
            raise
        except SandboxError as exc:
            logger.info("rewind of thread %s failed, restoring anew: %s", thread.thread_id, exc)
            return False
        notices.extend(_restored_notices(record, report))
        return True

    async def _names_other_sandbox(self, record: SandboxState, session: Session) -> bool:
        """Whether the record names a sandbox other than ``session`` that might still hold its
        state, memory included (only providers whose sandboxes outlive a process)."""
        named = (record.get("session") or {}).get("sandbox_id")
        if named is None or named == session.record.get("sandbox_id"):
            return False
        return (await self._host.provider()).capabilities.attach_across_processes

    async def _restore_into(
        self, session: Session, record: SandboxState, notices: list[str], *, quiet: bool = False
    ) -> bool:
        """Restore the record's snapshot into the new ``session``; ``False`` if a restore was
        tried and failed (the session may then hold part of it). ``quiet``: the snapshot is
        the thread's own spilled state, so a complete restore says nothing."""
        ref = record.get("snapshot")
        revision = record.get("revision", 0)
        if not ref:
            notices.append(
                f"This sandbox is new: the state of revision {revision} could not be restored "
                "because no snapshot of it was saved. Files and variables from earlier calls "
                "are gone; recreate what you need."
            )
            return True
        snapshotter = self.snapshotter
        try:
            report = await retry_async(lambda: snapshotter.restore(session, ref))
        except asyncio.CancelledError:
            raise
        except (SnapshotStoreUnavailable, OSError) as exc:
            # Starting empty would supersede the snapshot with the next call's record: fail
            # this call instead, so a later one restores everything once the store is back.
            # (OSError: a store of the application's own, unreachable.)
            cause = exc.__cause__ if isinstance(exc, SnapshotStoreUnavailable) else exc
            raise store_unavailable(cause or exc, revision) from exc
        except SandboxError as exc:
            # Refusing forever would leave the thread unusable; start empty and say so loudly.
            notices.append(
                f"The sandbox could not be restored from its snapshot ({exc}); it starts "
                "empty. Files and variables from earlier calls are gone."
            )
            return False
        if not (quiet and report.complete):
            notices.extend(_restored_notices(record, report))
        return True

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


def store_unavailable(exc: BaseException, revision: int | None = None) -> SnapshotStoreUnavailable:
    """The typed error for a snapshot store that failed with ``exc`` (its type only: a driver's
    message can carry connection details)."""
    what = f"the snapshot of revision {revision}" if revision is not None else "a sandbox record"
    return SnapshotStoreUnavailable(
        f"The snapshot store could not be reached ({type(exc).__name__}) while reading {what}. "
        "Nothing is lost: the checkpoint still names it, and a later call restores it in full "
        "once the store answers; retrying may help."
    )


def _restored_notices(record: SandboxState, report: RestoreReportLike) -> list[str]:
    revision = record.get("revision", 0)
    snapshot_revision = record.get("snapshot_revision", revision)
    notices = [f"The sandbox was restored from the snapshot of revision {snapshot_revision}."]
    if snapshot_revision < revision:
        notices.append(
            f"Changes made after revision {snapshot_revision} (up to {revision}) were not "
            "saved and are lost."
        )
    return [*notices, *report.notices]


async def _mark_head(session: Session, head: str | None) -> None:
    """Record the head in a sandbox another process may attach to, with a call of its own (on
    providers whose sandboxes outlive their process, when the call could not carry it); ``None``
    clears it, so no attach matches the sandbox."""
    capabilities = session.capabilities
    if not (capabilities.stateful_python and capabilities.attach_across_processes):
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
    "WriteBehind",
]
