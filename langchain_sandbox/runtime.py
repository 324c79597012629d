"""SandboxRuntime: one live sandbox session per conversation thread, kept in step with graph state.

The runtime maps a ``thread_id`` to a live :class:`~langchain_sandbox.providers.base.Session`. It
creates sessions lazily (once, however many calls race for the first one), reuses them, serializes
the calls of one thread behind a lock while different threads run in parallel, closes sessions
that sat idle too long or that exceed a cap, and closes everything on :meth:`SandboxRuntime.close`.

It also keeps the sandbox in step with the thread's :class:`~langchain_sandbox.state.SandboxState`
record (the graph's ``sandbox`` channel), which is what makes sessions durable:

* **rehydrate** (before a call): the live session is used when its head equals the record's;
  otherwise (a new process, a resume, a fork, time travel) the runtime attaches to the sandbox the
  record names if the provider can and its head still matches, or creates a new session and
  restores the record's snapshot into it (copy-on-divergence: the other branch later does the
  same in reverse);
* **persist** (after a call that can change the sandbox): the revision goes up, a new head token
  is issued, and with ``persist="every_call"`` an incremental snapshot is captured and its
  reference written into the returned record.

All provider I/O runs on one private event loop (see :mod:`langchain_sandbox._event_loop`); each
public coroutine has a blocking twin (``arun_code`` / ``run_code`` ...). The runtime knows nothing
about LangGraph: the tools pass it a record and turn the updated record into a state update.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import functools
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar

from langchain_sandbox._event_loop import LoopThread, on_event_loop
from langchain_sandbox.errors import SandboxError, SandboxGoneError, SessionClosedError
from langchain_sandbox.providers import get_provider
from langchain_sandbox.providers.base import (
    FileInfo,
    OutputCallback,
    Provider,
    Session,
    SessionSpec,
)
from langchain_sandbox.requirements import validate_requirements
from langchain_sandbox.results import ExecutionResult
from langchain_sandbox.retries import retry_async
from langchain_sandbox.state import SandboxState

T = TypeVar("T")

logger = logging.getLogger(__name__)

PersistPolicy = Literal["every_call", "never"]

DEFAULT_THREAD_ID = "default"
"""The thread used when a call names none (a tool invoked outside a graph)."""

_HEAD_VARIABLE = "_langchain_sandbox_head"
"""Global of the sandbox's Python interpreter holding its head, so a later attach can check it.

In the interpreter, not in a file: attaching is worth it for the memory it keeps, so a sandbox
whose interpreter restarted (variables lost) must not match and is restored from its snapshot
instead. The leading underscore keeps it out of variable snapshots."""


class SnapshotInfoLike(Protocol):
    """What the runtime needs from a captured snapshot: its reference."""

    @property
    def ref(self) -> str: ...


class RestoreReportLike(Protocol):
    """What the runtime needs from a restore: the notices the model should read."""

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


@dataclass(eq=False)
class _Slot:
    """What the runtime knows about one thread. Touched only on the runtime's loop."""

    thread_id: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: Session | None = None
    head: str | None = None
    revision: int = 0
    snapshot: str | None = None
    snapshot_revision: int = 0
    cwd: str | None = None
    # The head the current graph step started from, and the tool calls already applied on top of
    # it: parallel calls of one step all carry that stale head and must share the live session,
    # while a replayed call (a fork re-running the step) must not.
    batch_base: str | None = None
    batch_members: frozenset[str] = frozenset()
    batch_applied: set[str] = field(default_factory=set)
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)

    @property
    def known(self) -> bool:
        return self.head is not None or self.revision > 0

    def as_record(self) -> SandboxState:
        record = SandboxState(
            revision=self.revision,
            head=self.head,
            snapshot=self.snapshot,
            snapshot_revision=self.snapshot_revision,
            exec_count=0,
        )
        if self.session is not None:
            record["session"] = self.session.record
        if self.cwd is not None:
            record["cwd"] = self.cwd
        return record

    def adopt(self, record: SandboxState | None) -> None:
        """Take the record's position (after a restore or an attach to match it)."""
        record = record or SandboxState()
        self.head = record.get("head")
        self.revision = record.get("revision", 0)
        self.snapshot = record.get("snapshot")
        self.snapshot_revision = record.get("snapshot_revision", 0)
        self.cwd = record.get("cwd", self.cwd)
        self.start_batch(None)

    def start_batch(self, step_call: StepCall | None) -> None:
        """The next calls build on the current head; those of ``step_call``'s message are its
        siblings."""
        self.batch_base = self.head
        self.batch_members = step_call.members if step_call is not None else frozenset()
        self.batch_applied = set()

    def is_sibling(self, head: str | None, step_call: StepCall | None) -> bool:
        """Whether a call carrying ``head`` is a not-yet-applied call of the current batch."""
        return (
            step_call is not None
            and head == self.batch_base
            and step_call.call_id in self.batch_members
            and step_call.call_id not in self.batch_applied
        )


def _default_snapshotter() -> SnapshotterLike:
    # Imported here so building a runtime with its own snapshotter never loads the default store.
    from langchain_sandbox.snapshots import Snapshotter

    return Snapshotter()


class SandboxRuntime:
    """Maps conversation threads to live sandbox sessions; see the module docstring.

    Args:
        provider: ``"local"`` (default), ``"e2b"``, ``"runloop"`` or a :class:`Provider`.
        spec: What each new session is created with (limits, env, template...). The runtime adds
            a ``thread_id`` tag to its metadata so ``langchain-sandbox gc`` can find orphans.
        provider_options: Keyword arguments for the provider when it is given by name.
        snapshotter: Snapshot engine used to persist and restore; defaults to
            :class:`langchain_sandbox.snapshots.Snapshotter` on its default local store.
        persist: ``"every_call"`` captures an incremental snapshot after every call that can change
            the sandbox, so a record always names its state; ``"never"`` keeps state only as long
            as the live session (resume in another process, forks and idle eviction lose it).
        idle_ttl: Seconds after which an idle session is closed (``None``: never). With
            persistence, the next call of the thread restores it.
        max_sessions: Live sessions kept at most; the least recently used idle one is closed to
            make room. A session that is busy is never closed, so under load the cap can be
            exceeded until calls finish.

    Building a runtime never blocks an event loop: its loop thread starts without being waited
    for, and the default snapshot store touches the disk only when it first writes.

    Raises:
        ConfigurationError: the provider named cannot work here (a missing extra, API key or
            bubblewrap). Raised by the constructor when it runs off an event loop, else by the
            first call.
    """

    def __init__(
        self,
        provider: str | Provider = "local",
        *,
        spec: SessionSpec | None = None,
        provider_options: Mapping[str, Any] | None = None,
        snapshotter: SnapshotterLike | None = None,
        persist: PersistPolicy = "every_call",
        idle_ttl: float | None = 900.0,
        max_sessions: int | None = 64,
    ) -> None:
        if persist not in ("every_call", "never"):
            raise ValueError(f"persist must be 'every_call' or 'never', not {persist!r}.")
        if max_sessions is not None and max_sessions < 1:
            raise ValueError("max_sessions must be at least 1 (or None for no cap).")
        if idle_ttl is not None and idle_ttl <= 0:
            raise ValueError("idle_ttl must be positive (or None to keep idle sessions).")
        if isinstance(provider, Provider) and provider_options:
            raise ValueError("provider_options apply only when the provider is given by name.")
        self._provider_arg = provider
        self._provider_options = dict(provider_options or {})
        self._provider: Provider | None = provider if isinstance(provider, Provider) else None
        if self._provider is None and not on_event_loop():
            # Fail fast: a missing extra, API key or bubblewrap raises here, to the developer.
            # On an event loop that check would block it (imports, the filesystem); there the
            # provider is built off the loop at the first call, which raises the same errors.
            self._provider = get_provider(provider, **self._provider_options)
        self.spec = spec or SessionSpec()
        self.snapshotter = snapshotter if snapshotter is not None else _default_snapshotter()
        self.persist: PersistPolicy = persist
        self.idle_ttl = idle_ttl
        self.max_sessions = max_sessions
        self._slots: dict[str, _Slot] = {}
        self._closed = False
        self._close_lock = threading.Lock()
        self._loop = LoopThread()
        self._reaper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        if idle_ttl is not None:
            # Not waited for: construction must not block a caller on an event loop.
            self._loop.submit(self._start_reaper())
        _register_exit_hook(functools.partial(_close_at_exit, weakref.ref(self)))

    # -- introspection -----------------------------------------------------------------------

    @property
    def provider_name(self) -> str:
        if isinstance(self._provider_arg, Provider):
            return self._provider_arg.name
        return self._provider_arg

    @property
    def closed(self) -> bool:
        return self._closed

    def live_sessions(self) -> dict[str, str]:
        """``{thread_id: session_id}`` of the sessions alive right now."""
        return {t: s.session.session_id for t, s in list(self._slots.items()) if s.session}

    def thread_record(self, thread_id: str) -> SandboxState | None:
        """The latest record the runtime issued for ``thread_id`` (``None`` if it knows none)."""
        slot = self._slots.get(thread_id)
        return slot.as_record() if slot is not None and slot.known else None

    # -- the core ----------------------------------------------------------------------------

    async def aexecute(
        self,
        thread_id: str,
        operation: Callable[[Session], Awaitable[T]],
        *,
        record: SandboxState | None = None,
        mutates: bool = True,
        repeatable: bool = False,
        step_call: StepCall | None = None,
    ) -> Outcome[T]:
        """Run ``operation`` on the thread's session, rehydrating before and persisting after.

        Args:
            thread_id: The conversation thread.
            operation: Receives the live session; runs on the runtime's loop.
            record: The thread's record from graph state. ``None`` uses what the runtime last
                issued for the thread (outside a graph, state lives in the runtime).
            mutates: The operation can change the sandbox: bump the revision, issue a new head
                and persist per policy.
            repeatable: The operation is safe to run again on a replacement sandbox if the
                sandbox turns out to be gone. User code never is: it is not re-run silently.
            step_call: Which tool call this is and which calls of the same model message run
                alongside it: parallel calls of one step all carry the same stale record and
                must share the session, while a replay of a call (a fork) must not.

        Raises:
            SandboxError: infrastructure failures that retries could not fix.
        """
        return await self._loop.run_async(
            self._execute(thread_id, operation, record, mutates, repeatable, step_call)
        )

    def execute(
        self,
        thread_id: str,
        operation: Callable[[Session], Awaitable[T]],
        *,
        record: SandboxState | None = None,
        mutates: bool = True,
        repeatable: bool = False,
        step_call: StepCall | None = None,
    ) -> Outcome[T]:
        """Blocking twin of :meth:`aexecute` (for sync code and ToolNode worker threads)."""
        return self._loop.run_sync(
            self._execute(thread_id, operation, record, mutates, repeatable, step_call)
        )

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine that uses this runtime on the runtime's loop and wait for it."""
        return self._loop.run_sync(coro)

    async def _execute(
        self,
        thread_id: str,
        operation: Callable[[Session], Awaitable[T]],
        record: SandboxState | None,
        mutates: bool,
        repeatable: bool,
        step_call: StepCall | None,
    ) -> Outcome[T]:
        self._check_open()
        slot = self._slots.get(thread_id)
        if slot is None:
            slot = self._slots[thread_id] = _Slot(thread_id)
        slot.users += 1
        try:
            async with slot.lock:
                self._check_open()
                notices: list[str] = []
                wanted = record if record is not None else slot.as_record()
                session = await self._rehydrate(slot, wanted, step_call, notices)
                try:
                    value = await operation(session)
                except SandboxGoneError as exc:
                    value, session = await self._recover(
                        slot, operation, exc, repeatable, step_call, notices
                    )
                except asyncio.CancelledError:
                    if mutates:
                        self._retire(slot)
                    raise
                if mutates:
                    await self._advance(slot, session, step_call, notices)
                updated = slot.as_record()
                if record is not None and "cwd" in record and "cwd" not in updated:
                    updated["cwd"] = record["cwd"]
                return Outcome(value, updated, notices)
        finally:
            slot.users -= 1
            slot.last_used = time.monotonic()
            if self.max_sessions is not None and not self._closed:
                await self._make_room(self.max_sessions)

    async def _rehydrate(
        self, slot: _Slot, record: SandboxState, step_call: StepCall | None, notices: list[str]
    ) -> Session:
        wanted_head = record.get("head")
        if slot.session is not None:
            if wanted_head == slot.head:
                new_step = step_call is not None and step_call.call_id not in slot.batch_members
                if slot.batch_base != slot.head or new_step:
                    slot.start_batch(step_call)
                return slot.session
            if slot.is_sibling(wanted_head, step_call):
                # A parallel call of the step that produced the live head: share the session.
                return slot.session
            # The record is another branch (fork, time travel, another worker's step): its state
            # lives in its snapshot, not in this session.
            await self._discard(slot)
        session = await self._attach_matching(record)
        if session is None:
            session = await self._create(slot.thread_id)
            if wanted_head is not None:
                try:
                    await self._restore_into(session, record, notices)
                except BaseException:
                    # Cancelled mid-restore: the half-restored session belongs to no one.
                    await asyncio.shield(self._close_session(session))
                    raise
        slot.session = session
        slot.adopt(record)
        slot.start_batch(step_call)
        return session

    async def _recover(
        self,
        slot: _Slot,
        operation: Callable[[Session], Awaitable[T]],
        exc: SandboxGoneError,
        repeatable: bool,
        step_call: StepCall | None,
        notices: list[str],
    ) -> tuple[T, Session]:
        """The sandbox died under a call: replace it (restored from the last snapshot), then
        repeat the call only if it is safe to; otherwise tell the caller to run it again."""
        last = slot.as_record()
        last.pop("session", None)
        await self._discard(slot)
        session = await self._rehydrate(slot, last, step_call, notices)
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
        self, slot: _Slot, session: Session, step_call: StepCall | None, notices: list[str]
    ) -> None:
        slot.revision += 1
        slot.head = uuid.uuid4().hex
        if step_call is None:
            # A call outside any graph step: nothing can be its sibling any more.
            slot.start_batch(None)
        else:
            slot.batch_applied.add(step_call.call_id)
        await self._mark_head(session, slot.head)
        if self.persist != "every_call" or self.snapshotter is None:
            return
        snapshotter = self.snapshotter
        revision = slot.revision
        base = slot.snapshot
        try:
            info = await retry_async(
                lambda: snapshotter.capture(session, base=base, revision=revision)
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The user's result must survive a failed persist: keep the previous snapshot and say
            # so, rather than fail a call whose work already happened.
            logger.warning("snapshot of thread %s failed: %s", slot.thread_id, exc)
            kept = (
                f"the last saved snapshot is revision {slot.snapshot_revision}"
                if slot.snapshot
                else "no earlier snapshot exists"
            )
            notices.append(
                f"Could not save a snapshot of the sandbox ({exc}); {kept}. If this process "
                "stops, changes after that revision are lost."
            )
            return
        slot.snapshot, slot.snapshot_revision = info.ref, revision

    # -- sessions ----------------------------------------------------------------------------

    async def _get_provider(self) -> Provider:
        if self._provider is None:
            built = await asyncio.to_thread(
                get_provider, self._provider_arg, **self._provider_options
            )
            # Two first calls may race here; the first provider built is the one kept.
            if self._provider is None:
                self._provider = built
            elif built is not self._provider:
                await built.aclose()
        return self._provider

    async def _create(self, thread_id: str) -> Session:
        if self.max_sessions is not None:
            await self._make_room(self.max_sessions - 1)
        provider = await self._get_provider()
        spec = dataclasses.replace(
            self.spec, metadata={**self.spec.metadata, "thread_id": thread_id}
        )
        # Providers retry their own create (E2B under one idempotency key); retrying here too
        # would multiply attempts and could make a second sandbox behind a lost response.
        return await provider.create(spec)

    async def _attach_matching(self, record: SandboxState) -> Session | None:
        """Reattach to the sandbox the record names, if it outlived its process and still holds
        the record's head; ``None`` otherwise."""
        session_record = record.get("session")
        head = record.get("head")
        provider = await self._get_provider()
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
        if await self._read_head(session) == head:
            return session
        # Another step moved this sandbox on: it belongs to another branch now. Leave it to its
        # owner (or to gc) and restore the record's state into a new session instead.
        return None

    async def _mark_head(self, session: Session, head: str | None) -> None:
        """Record the head in a sandbox another process may attach to (one extra round trip
        per changing call, on providers whose sandboxes outlive their process only)."""
        capabilities = session.capabilities
        if head is None or not (
            capabilities.stateful_python and capabilities.attach_across_processes
        ):
            return
        with contextlib.suppress(SandboxError):
            await session.run_code(f"{_HEAD_VARIABLE} = {head!r}", timeout=30)

    async def _read_head(self, session: Session) -> str | None:
        try:
            result = await session.run_code(_HEAD_VARIABLE, timeout=30)
        except SandboxError:
            return None
        if not result.ok or result.value is None:
            return None
        return result.value.strip("'\"")

    async def _restore_into(
        self, session: Session, record: SandboxState, notices: list[str]
    ) -> None:
        ref = record.get("snapshot")
        revision = record.get("revision", 0)
        if not ref or self.snapshotter is None:
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

    def _retire(self, slot: _Slot) -> None:
        """Destroy the session of a cancelled call, in the background.

        Code may still be running in it and its state is whatever the call left halfway, so it
        cannot be trusted or reused: the thread's next call restores the state before the call
        from the record (the cancelled call never happened). Destroying it is also what stops
        the code on every provider.
        """
        session, slot.session = slot.session, None
        if session is not None:
            task = asyncio.get_running_loop().create_task(self._close_session(session))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _discard(self, slot: _Slot) -> None:
        session, slot.session = slot.session, None
        if session is not None:
            await self._close_session(session)

    async def _close_session(self, session: Session) -> None:
        try:
            await retry_async(session.close, deadline=30.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Closing is cleanup: a failure must not fail the caller's call; gc reaps leftovers.
            logger.warning("closing sandbox session %s failed: %s", session.session_id, exc)

    async def _make_room(self, keep: int) -> None:
        """Close least recently used idle sessions until at most ``keep`` are live."""
        live = [s for s in self._slots.values() if s.session is not None]
        excess = len(live) - keep
        if excess <= 0:
            return
        idle = sorted((s for s in live if s.users == 0), key=lambda s: s.last_used)
        for slot in idle[:excess]:
            await self._discard(slot)

    async def _start_reaper(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        assert self.idle_ttl is not None
        interval = min(max(self.idle_ttl / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            await self._reap_idle(self.idle_ttl)

    async def _reap_idle(self, ttl: float) -> None:
        deadline = time.monotonic() - ttl
        for slot in list(self._slots.values()):
            if slot.session is not None and slot.users == 0 and slot.last_used < deadline:
                await self._discard(slot)

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError("This SandboxRuntime is closed.")

    # -- public operations -------------------------------------------------------------------

    async def arun_code(
        self,
        thread_id: str,
        code: str,
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[ExecutionResult]:
        """Run Python in the thread's stateful interpreter."""

        async def _run(session: Session) -> ExecutionResult:
            return await session.run_code(code, timeout=timeout, on_output=on_output)

        return _as_execution(
            await self.aexecute(thread_id, _run, record=record, step_call=step_call)
        )

    def run_code(
        self,
        thread_id: str,
        code: str,
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[ExecutionResult]:
        """Blocking twin of :meth:`arun_code`."""
        return self._loop.run_sync(
            self.arun_code(
                thread_id,
                code,
                timeout=timeout,
                record=record,
                on_output=on_output,
                step_call=step_call,
            )
        )

    async def arun_command(
        self,
        thread_id: str,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[ExecutionResult]:
        """Run a shell command in the thread's sandbox (``cwd`` defaults to the workspace)."""

        async def _run(session: Session) -> ExecutionResult:
            return await session.run_command(command, timeout=timeout, cwd=cwd, on_output=on_output)

        return _as_execution(
            await self.aexecute(thread_id, _run, record=record, step_call=step_call)
        )

    def run_command(
        self,
        thread_id: str,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[ExecutionResult]:
        """Blocking twin of :meth:`arun_command`."""
        return self._loop.run_sync(
            self.arun_command(
                thread_id,
                command,
                timeout=timeout,
                cwd=cwd,
                record=record,
                on_output=on_output,
                step_call=step_call,
            )
        )

    async def awrite_files(
        self,
        thread_id: str,
        files: Mapping[str, bytes],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[None]:
        """Write files into the thread's workspace (parents are created)."""

        async def _write(session: Session) -> None:
            await session.write_files(files)

        return await self.aexecute(
            thread_id, _write, record=record, repeatable=True, step_call=step_call
        )

    def write_files(
        self,
        thread_id: str,
        files: Mapping[str, bytes],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[None]:
        """Blocking twin of :meth:`awrite_files`."""
        return self._loop.run_sync(
            self.awrite_files(thread_id, files, record=record, step_call=step_call)
        )

    async def aread_files(
        self,
        thread_id: str,
        paths: Sequence[str],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[dict[str, bytes]]:
        """Read files from the thread's workspace."""

        async def _read(session: Session) -> dict[str, bytes]:
            return await session.read_files(paths)

        return await self.aexecute(
            thread_id, _read, record=record, mutates=False, repeatable=True, step_call=step_call
        )

    def read_files(
        self,
        thread_id: str,
        paths: Sequence[str],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[dict[str, bytes]]:
        """Blocking twin of :meth:`aread_files`."""
        return self._loop.run_sync(
            self.aread_files(thread_id, paths, record=record, step_call=step_call)
        )

    async def alist_files(
        self,
        thread_id: str,
        path: str = ".",
        *,
        recursive: bool = False,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[list[FileInfo]]:
        """List a directory of the thread's workspace."""

        async def _list(session: Session) -> list[FileInfo]:
            return await session.list_files(path, recursive=recursive)

        return await self.aexecute(
            thread_id, _list, record=record, mutates=False, repeatable=True, step_call=step_call
        )

    def list_files(
        self,
        thread_id: str,
        path: str = ".",
        *,
        recursive: bool = False,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[list[FileInfo]]:
        """Blocking twin of :meth:`alist_files`."""
        return self._loop.run_sync(
            self.alist_files(
                thread_id, path, recursive=recursive, record=record, step_call=step_call
            )
        )

    async def ainstall_packages(
        self,
        thread_id: str,
        packages: Sequence[str],
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[ExecutionResult]:
        """Install packages into the thread's sandbox (validated before any sandbox is touched)."""
        requirements = validate_requirements(packages)

        async def _install(session: Session) -> ExecutionResult:
            return await session.install_packages(requirements, timeout=timeout)

        return _as_execution(
            await self.aexecute(
                thread_id, _install, record=record, repeatable=True, step_call=step_call
            )
        )

    def install_packages(
        self,
        thread_id: str,
        packages: Sequence[str],
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[ExecutionResult]:
        """Blocking twin of :meth:`ainstall_packages`."""
        return self._loop.run_sync(
            self.ainstall_packages(
                thread_id, packages, timeout=timeout, record=record, step_call=step_call
            )
        )

    # -- closing -----------------------------------------------------------------------------

    async def aclose_thread(self, thread_id: str) -> bool:
        """Destroy the thread's sandbox (after its running call, if any) and forget the thread.

        Returns whether a live session was closed. Snapshots stay in the store (``gc`` reaps
        those no checkpoint references).
        """
        return await self._loop.run_async(self._close_thread(thread_id))

    def close_thread(self, thread_id: str) -> bool:
        """Blocking twin of :meth:`aclose_thread`."""
        return self._loop.run_sync(self._close_thread(thread_id))

    async def _close_thread(self, thread_id: str) -> bool:
        slot = self._slots.get(thread_id)
        if slot is None:
            return False
        async with slot.lock:
            had_session = slot.session is not None
            await self._discard(slot)
            if slot.users == 0 and self._slots.get(thread_id) is slot:
                del self._slots[thread_id]
            return had_session

    async def _shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*self._closing, return_exceptions=True)
        sessions = [s.session for s in self._slots.values() if s.session is not None]
        for slot in self._slots.values():
            slot.session = None
        self._slots.clear()
        await asyncio.gather(*(self._close_session(s) for s in sessions))
        if self._provider is not None:
            with contextlib.suppress(Exception):
                await self._provider.aclose()

    def close(self) -> None:
        """Close every session, the provider's clients and the runtime's loop. Idempotent.

        Calls still running are interrupted: their sessions are destroyed under them.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._loop.alive:
            with contextlib.suppress(RuntimeError):
                self._loop.run_sync(self._shutdown())
            self._loop.stop()

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._loop.alive:
            with contextlib.suppress(RuntimeError):
                await self._loop.run_async(self._shutdown())
            await asyncio.to_thread(self._loop.stop)

    def __enter__(self) -> SandboxRuntime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> SandboxRuntime:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.live_sessions())} live sessions"
        return f"SandboxRuntime(provider={self.provider_name!r}, persist={self.persist!r}, {state})"


def _as_execution(outcome: Outcome[ExecutionResult]) -> Outcome[ExecutionResult]:
    """Put the notices where the model reads them, and count the execution (a delta)."""
    record: SandboxState = {**outcome.record, "exec_count": 1}
    return Outcome(outcome.value.with_notices(*outcome.notices), record, outcome.notices)


def _register_exit_hook(hook: Callable[[], None]) -> None:
    """Run ``hook`` at exit *before* thread pools shut down.

    Closing sessions uses ``asyncio.to_thread``; plain ``atexit`` hooks run after
    ``concurrent.futures`` has refused new work, so sessions would be left behind. The hook
    ``concurrent.futures`` itself uses runs before that, newest first.
    """
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError
        register(hook)
    except RuntimeError:
        atexit.register(hook)


def _close_at_exit(ref: weakref.ReferenceType[SandboxRuntime]) -> None:
    runtime = ref()
    if runtime is not None:
        with contextlib.suppress(Exception):
            runtime.close()


_default_runtime: SandboxRuntime | None = None
_default_lock = threading.Lock()


def get_default_runtime() -> SandboxRuntime:
    """The process-wide runtime on the local provider that tools use when given none.

    Created on first use, closed at interpreter exit; a closed one is replaced on the next call.
    """
    global _default_runtime
    with _default_lock:
        if _default_runtime is None or _default_runtime.closed:
            _default_runtime = SandboxRuntime()
        return _default_runtime


__all__ = [
    "DEFAULT_THREAD_ID",
    "Outcome",
    "PersistPolicy",
    "RestoreReportLike",
    "SandboxRuntime",
    "SnapshotInfoLike",
    "SnapshotterLike",
    "StepCall",
    "get_default_runtime",
]
