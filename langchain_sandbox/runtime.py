"""SandboxRuntime: one live sandbox session per conversation thread, kept in step with graph state.

The runtime is the public facade over two parts, each testable on its own:

* `session_pool` keeps the live sessions: it creates them lazily (once,
  however many calls race for the first one), serializes the calls of one thread behind a lock
  while different threads run in parallel, closes sessions that sat idle too long or that exceed a
  cap, and closes everything on [`SandboxRuntime.close`][langchain_sandbox.SandboxRuntime.close];
* `rehydration` keeps each thread's sandbox in step with its
  [`SandboxState`][langchain_sandbox.SandboxState] record (the graph's ``sandbox`` channel), which
  is what makes sessions durable: rehydrate before a call, persist after it.

All provider I/O runs on one private event loop (see `langchain_sandbox.core._event_loop`); each
public coroutine has a blocking twin (``arun_code`` / ``run_code`` ...), one line made by
`langchain_sandbox.core._runtime_calls.blocking`. The operations live in two mixins beside this
module: code, shell, files and packages in `langchain_sandbox.core._runtime_operations`, processes
and ports in `langchain_sandbox.core._runtime_processes`; this module keeps the sessions' life
(building, persisting, leasing, closing). The runtime knows nothing about LangGraph: the tools
pass it a record and turn the updated record into a state update.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from langchain_sandbox.core._event_loop import LoopThread
from langchain_sandbox.core._runtime_calls import CallContext, blocking
from langchain_sandbox.core._runtime_operations import RuntimeOperations
from langchain_sandbox.core._runtime_processes import RuntimeProcesses
from langchain_sandbox.core.arguments import checked_init
from langchain_sandbox.core.rehydration import PersistPolicy, RehydrationEngine
from langchain_sandbox.core.session_pool import DEFAULT_MAX_SESSIONS, SessionPool
from langchain_sandbox.core.thread import (
    Outcome,
    RestoreReportLike,
    SnapshotInfoLike,
    SnapshotterLike,
    StepCall,
)
from langchain_sandbox.providers.base import (
    Capabilities,
    Provider,
    Session,
    SessionSpec,
)
from langchain_sandbox.state import SandboxState

T = TypeVar("T")


def _default_snapshotter() -> SnapshotterLike:
    # Imported here so building a runtime with its own snapshotter never loads the default store.
    from langchain_sandbox.snapshots import Snapshotter

    return Snapshotter()


class SandboxRuntime(RuntimeOperations, RuntimeProcesses):
    """Maps conversation threads to live sandbox sessions; see the module docstring.

    Code, shell commands, files and packages (``arun_code``, ``arun_command``, ``arun_shell``,
    ``awrite_files``, ``aread_files``, ``alist_files``, ``ainstall_packages`` and their blocking
    twins) come from `langchain_sandbox.core._runtime_operations`. Processes that outlive a call,
    exposed ports and the services that follow the checkpoint (``astart_process``,
    ``aprocess_output``, ``astop_process``, ``alist_processes``, ``aexpose_port`` and their
    blocking twins) come from `langchain_sandbox.core._runtime_processes`; see ``docs/processes.md``.

    Args:
        provider: ``"local"`` (default), ``"e2b"``, ``"runloop"`` or a [`Provider`][langchain_sandbox.Provider].
        spec: What each new session is created with (limits, env, template...). The runtime adds
            a ``thread_id`` tag to its metadata so ``langchain-sandbox gc`` can find orphans.
        provider_options: Keyword arguments for the provider when it is given by name.
        snapshotter: Snapshot engine used to persist and restore; defaults to
            [`langchain_sandbox.snapshots.Snapshotter`][langchain_sandbox.Snapshotter] on its default local store.
        persist: When an incremental snapshot is captured after a call that can change the
            sandbox. ``"resumable"`` (default): only for calls something can resume from, which
            the caller says with ``resumable=True`` (the tools do in a graph with a
            checkpointer); elsewhere the live session is the only copy of the state. ``"every_call"``:
            after every such call, so a record always names its state, and the runtime restores
            it after idle eviction or a crashed sandbox even outside a graph. ``"never"``: no
            snapshots (resume in another process, forks and idle eviction lose the state).
        write_behind: Capture each snapshot after its call has returned (while the model thinks)
            instead of before. ``None`` (default): only where sandboxes outlive the process
            (E2B, Runloop), where a resume whose snapshot never completed attaches to the live
            sandbox instead; ``False``: every snapshot inline, as the local provider always does
            by default. See ``docs/persistence.md``.
        idle_ttl: Seconds after which an idle session is closed (``None``: never). With
            persistence, the next call of the thread restores it.
        max_sessions: Live sessions kept at most; the least recently used idle one is spilled
            to make room: captured to the snapshot store (files and variables, whatever
            ``persist`` says, unless it is ``"never"``) and closed, and its thread's next call
            restores it into a new session, without a notice when nothing was lost. A session
            that is busy is never closed, so under load the cap can be exceeded until calls
            finish. The default is 1,024, fewer where the process's open-file limit is low
            (`DEFAULT_MAX_SESSIONS`); ``None``: no cap.
            See ``docs/runtime.md`` for what a spilled thread costs.
        keep_services_alive: Whether a thread whose record names a service (a process started
            with ``restart=True``) counts as active for ``idle_ttl``. ``False`` (default): an
            idle session is closed even with a service running, and the thread's next call
            starts the service again in the restored sandbox; ``True``: the service keeps its
            session (a dev server someone browses while the model is quiet), at the cost of a
            live sandbox per such thread.

    Building a runtime never blocks an event loop: its loop thread starts without being waited
    for, and the default snapshot store touches the disk only when it first writes.

    Raises:
        ConfigurationError: the provider named cannot work here (a missing extra, API key or
            bubblewrap). Raised by the constructor when it runs off an event loop, else by the
            first call.
    """

    @checked_init
    def __init__(
        self,
        provider: str | Provider = "local",
        *,
        spec: SessionSpec | None = None,
        provider_options: Mapping[str, Any] | None = None,
        snapshotter: SnapshotterLike | None = None,
        persist: PersistPolicy = "resumable",
        write_behind: bool | None = None,
        idle_ttl: float | None = 900.0,
        max_sessions: int | None = DEFAULT_MAX_SESSIONS,
        keep_services_alive: bool = False,
    ) -> None:
        self.shared_thread_id = f"runtime-{uuid.uuid4().hex}"
        """The thread of calls made outside a graph, without a ``thread_id``, by tools given
        this runtime (``SandboxExecTool(runtime=rt)``): passing one runtime to several tools
        means they share one sandbox there (a package one installs, a file one writes, the
        next finds). A tool given a ``default_thread_id`` uses that instead."""
        self._pool = SessionPool(
            provider,
            provider_options=provider_options,
            spec=spec or SessionSpec(),
            max_sessions=max_sessions,
            idle_ttl=idle_ttl,
            keep_services_alive=keep_services_alive,
        )
        self._engine = RehydrationEngine(
            self._pool,
            snapshotter=snapshotter if snapshotter is not None else _default_snapshotter(),
            persist=persist,
            write_behind=(
                self._pool.capabilities.attach_across_processes
                if write_behind is None
                else write_behind
            ),
        )
        self._pool.spill = self._engine.spill
        self._closed = False
        self._close_lock = threading.Lock()
        self._loop = LoopThread()
        if idle_ttl is not None:
            # Not waited for: construction must not block a caller on an event loop.
            self._loop.submit(self._start_reaper())
        _register_exit_hook(functools.partial(_close_at_exit, weakref.ref(self)))

    async def _start_reaper(self) -> None:
        self._pool.start_reaper()

    # -- introspection -----------------------------------------------------------------------

    @property
    def provider_name(self) -> str:
        return self._pool.provider_name

    @property
    def spec(self) -> SessionSpec:
        """What each new session is created with."""
        return self._pool.spec

    @property
    def snapshotter(self) -> SnapshotterLike:
        return self._engine.snapshotter

    @property
    def persist(self) -> PersistPolicy:
        return self._engine.persist

    def persists(self, resumable: bool) -> bool:
        """Whether a changing call is captured under this runtime's policy, given whether its
        caller can resume from the record (``resumable``)."""
        return self._engine.captures(resumable)

    @property
    def write_behind(self) -> bool:
        """Whether snapshots are captured after their call has returned."""
        return self._engine.write_behind

    def pending_snapshots(self) -> dict[str, int]:
        """``{thread_id: revision}`` of the snapshots being written behind right now."""
        return {
            thread.thread_id: thread.behind.revision
            for thread in self._pool.threads()
            if thread.behind is not None and not thread.behind.task.done()
        }

    async def aflush(self) -> None:
        """Wait until every snapshot being written behind is complete (each thread's next call,
        and closing it, wait for its own anyway)."""
        await self._loop.run_async(self._flush())

    async def _flush(self) -> None:
        await asyncio.gather(*(thread.settle() for thread in self._pool.threads()))

    flush = blocking(aflush)
    """Blocking twin of `aflush`."""

    @property
    def idle_ttl(self) -> float | None:
        return self._pool.idle_ttl

    @property
    def max_sessions(self) -> int | None:
        return self._pool.max_sessions

    @property
    def keep_services_alive(self) -> bool:
        """Whether a thread's services keep its session from idle closing."""
        return self._pool.keep_services_alive

    @property
    def capabilities(self) -> Capabilities:
        """What the runtime's provider can do, known without creating a provider or a sandbox."""
        return self._pool.capabilities

    @property
    def closed(self) -> bool:
        return self._closed

    def live_sessions(self) -> dict[str, str]:
        """``{thread_id: session_id}`` of the sessions alive right now."""
        return self._pool.live_sessions()

    def thread_record(self, thread_id: str) -> SandboxState | None:
        """The latest record the runtime issued for ``thread_id`` (``None`` if it knows none)."""
        thread = self._pool.thread(thread_id)
        return thread.as_record() if thread is not None and thread.position.known else None

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
        resumable: bool = False,
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
            resumable: Something can resume from the returned record (the call runs in a graph
                with a checkpointer): under ``persist="resumable"`` the call is captured.

        Raises:
            SandboxError: infrastructure failures that retries could not fix.
        """
        return await self._on_thread(
            CallContext(thread_id, record, step_call, resumable),
            lambda _, session: operation(session),
            mutates=mutates,
            repeatable=repeatable,
        )

    execute = blocking(aexecute)
    """Blocking twin of `aexecute` (for sync code and ToolNode worker threads)."""

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine that uses this runtime on the runtime's loop and wait for it."""
        return self._loop.run_sync(coro)

    # -- concurrent turns --------------------------------------------------------------------

    def _lease_backend(self, checkpointer: Any) -> Any:
        from langchain_sandbox.checkpointing.thread_lease import lease_backend, store_backend

        store = getattr(self.snapshotter, "store", None)
        return lease_backend(checkpointer, store) if checkpointer else store_backend(store)

    def hold_thread(
        self, thread_id: str, *, checkpointer: Any = None, wait: float | None = 0
    ) -> contextlib.AbstractContextManager[None]:
        """Hold the thread's turn lease while the ``with`` block runs, the lease
        [`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware] takes for each turn (it takes
        none of its own inside the block). Around ``invoke`` it makes a run wait for another run
        of the thread instead of failing, and covers graphs without the middleware
        (``docs/persistence.md``, "Concurrent turns").

        Args:
            thread_id: The thread.
            checkpointer: The graph's checkpointer: a Postgres saver leases in its database
                (every worker sharing it sees the lease); without one, or with another saver,
                the lease is a file beside a local directory store's blobs (workers on this
                machine), or within this process for any other store.
            wait: Seconds to wait for another run (``0``, the default: fail at once; ``None``:
                as long as it takes).

        Raises:
            ThreadBusyError: another run holds the thread (past ``wait``).
        """
        from langchain_sandbox.checkpointing.thread_lease import hold

        return hold(self._lease_backend(checkpointer), thread_id, wait=wait)

    def ahold_thread(
        self, thread_id: str, *, checkpointer: Any = None, wait: float | None = 0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Async twin of `hold_thread` (``async with``; nothing blocks the event loop)."""
        from langchain_sandbox.checkpointing.thread_lease import ahold

        return ahold(self._lease_backend(checkpointer), thread_id, wait=wait)

    # -- closing -----------------------------------------------------------------------------

    async def aclose_thread(self, thread_id: str) -> bool:
        """Destroy the thread's sandbox (after its running call, if any) and forget the thread.

        Returns whether a live session was closed. Snapshots stay in the store (``gc`` reaps
        those no checkpoint references).
        """
        return await self._loop.run_async(self._pool.close_thread(thread_id))

    close_thread = blocking(aclose_thread)
    """Blocking twin of `aclose_thread`."""

    def close(self) -> None:
        """Close every session, the provider's clients and the runtime's loop. Idempotent.

        Calls still running are interrupted: their sessions are destroyed under them.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._pool.closed = True
        if self._loop.alive:
            with contextlib.suppress(RuntimeError):
                self._loop.run_sync(self._pool.shutdown())
            self._loop.stop()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._pool.closed = True
        if self._loop.alive:
            with contextlib.suppress(RuntimeError):
                await self._loop.run_async(self._pool.shutdown())
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
    "Outcome",
    "PersistPolicy",
    "RestoreReportLike",
    "SandboxRuntime",
    "SnapshotInfoLike",
    "SnapshotterLike",
    "StepCall",
    "get_default_runtime",
]
