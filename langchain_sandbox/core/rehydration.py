"""Keeping one thread's sandbox in step with its record: rehydrate before a call, persist after.

The engine decides, for one call of one thread, which session the call runs in and what record it
returns. It knows nothing of event-loop threads, locks, caps or idle eviction (the
`session_pool` does those) and nothing of LangGraph (the tools pass it a
record and turn the returned record into a state update). What it keeps of a thread is in
`langchain_sandbox.core.thread`; attaching, and restoring a record into a new session, in
`langchain_sandbox.core.restoring`. Its rules:

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
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from langchain_sandbox.core.restoring import (
    HEAD_VARIABLE,
    attach_matching,
    mark_head,
    names_other_sandbox,
    restore_into,
    restored_notices,
)
from langchain_sandbox.core.retries import retry_async
from langchain_sandbox.core.services import bring_back
from langchain_sandbox.core.thread import (
    Outcome,
    SessionHost,
    SnapshotterLike,
    StepCall,
    ThreadSandbox,
    WriteBehind,
)
from langchain_sandbox.errors import SandboxError, SandboxGoneError
from langchain_sandbox.providers.base import Session
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
        session = await attach_matching(self._host, record)
        fresh = session is None
        if session is None:
            session = await self._host.create(thread.thread_id)
            quiet = wanted_head is not None and thread.spilled == wanted_head
            if wanted_head is not None:
                try:
                    if not await restore_into(
                        self.snapshotter, session, record, notices, quiet=quiet
                    ):
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
        `langchain_sandbox.core.services`); a rewound one also stops the other branch's processes."""
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
            await mark_head(session, head)
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

    async def _rewind(
        self, thread: ThreadSandbox, record: SandboxState, notices: list[str]
    ) -> bool:
        """Restore the record's snapshot into the thread's live session; ``False`` (the caller
        then replaces the session) when there is no snapshot, when the record names another
        sandbox the provider may attach to, or when the restore fails."""
        session, ref = thread.session, record.get("snapshot")
        if session is None or not ref or await names_other_sandbox(self._host, record, session):
            return False
        # The sandbox stops holding the other branch's state: no attach may take it for that.
        await mark_head(session, None)
        snapshotter = self.snapshotter
        try:
            report = await retry_async(lambda: snapshotter.restore(session, ref))
        except asyncio.CancelledError:
            self._retire(thread)
            raise
        except SandboxError as exc:
            logger.info("rewind of thread %s failed, restoring anew: %s", thread.thread_id, exc)
            return False
        notices.extend(restored_notices(record, report))
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


__all__ = [
    "PersistPolicy",
    "RehydrationEngine",
]
