"""SandboxRuntime: one live sandbox session per conversation thread, kept in step with graph state.

The runtime is the public facade over two parts, each testable on its own:

* `session_pool` keeps the live sessions: it creates them lazily (once,
  however many calls race for the first one), serializes the calls of one thread behind a lock
  while different threads run in parallel, closes sessions that sat idle too long or that exceed a
  cap, and closes everything on [`SandboxRuntime.close`][langchain_sandbox.SandboxRuntime.close];
* `rehydration` keeps each thread's sandbox in step with its
  [`SandboxState`][langchain_sandbox.SandboxState] record (the graph's ``sandbox`` channel), which
  is what makes sessions durable: rehydrate before a call, persist after it.

All provider I/O runs on one private event loop (see `langchain_sandbox._event_loop`); each
public coroutine has a blocking twin (``arun_code`` / ``run_code`` ...). The runtime knows nothing
about LangGraph: the tools pass it a record and turn the updated record into a state update.

Why one module over 500 lines: most of it is the public facade's blocking and async twin of
each operation (two signatures and two docstrings each); the logic lives in
`session_pool` and `rehydration`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from langchain_sandbox._event_loop import LoopThread
from langchain_sandbox._runtime_processes import RuntimeProcesses
from langchain_sandbox.arguments import checked_init
from langchain_sandbox.providers.base import (
    Capabilities,
    FileInfo,
    OutputCallback,
    Provider,
    Session,
    SessionSpec,
)
from langchain_sandbox.providers.tool_channel import ToolHost
from langchain_sandbox.rehydration import (
    Outcome,
    PersistPolicy,
    RehydrationEngine,
    RestoreReportLike,
    SnapshotInfoLike,
    SnapshotterLike,
    StepCall,
)
from langchain_sandbox.requirements import validate_requirements
from langchain_sandbox.results import ExecutionResult
from langchain_sandbox.session_pool import DEFAULT_MAX_SESSIONS, SessionPool
from langchain_sandbox.state import SandboxState

T = TypeVar("T")


def _default_snapshotter() -> SnapshotterLike:
    # Imported here so building a runtime with its own snapshotter never loads the default store.
    from langchain_sandbox.snapshots import Snapshotter

    return Snapshotter()


class SandboxRuntime(RuntimeProcesses):
    """Maps conversation threads to live sandbox sessions; see the module docstring.

    Processes that outlive a call, exposed ports and the services that follow the checkpoint
    (``astart_process``, ``aprocess_output``, ``astop_process``, ``alist_processes``,
    ``aexpose_port`` and their blocking twins) come from
    `langchain_sandbox._runtime_processes`; see ``docs/processes.md``.

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

    def flush(self) -> None:
        """Blocking twin of `aflush`."""
        self._loop.run_sync(self._flush())

    async def _flush(self) -> None:
        await asyncio.gather(*(thread.settle() for thread in self._pool.threads()))

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
        return await self._loop.run_async(
            self._execute(thread_id, operation, record, mutates, repeatable, step_call, resumable)
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
        resumable: bool = False,
    ) -> Outcome[T]:
        """Blocking twin of `aexecute` (for sync code and ToolNode worker threads)."""
        return self._loop.run_sync(
            self._execute(thread_id, operation, record, mutates, repeatable, step_call, resumable)
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
        resumable: bool,
    ) -> Outcome[T]:
        async with self._pool.use(thread_id) as thread:
            return await self._engine.run(
                thread,
                operation,
                record=record,
                mutates=mutates,
                repeatable=repeatable,
                step_call=step_call,
                resumable=resumable,
            )

    # -- public operations -------------------------------------------------------------------

    async def _arun_capped(
        self,
        thread_id: str,
        timeout: float | None,
        run: Callable[[Session, float | None], Awaitable[ExecutionResult]],
        record: SandboxState | None,
        step_call: StepCall | None,
        resumable: bool,
    ) -> Outcome[ExecutionResult]:
        """Run code or a command (``run(session, timeout)``) with ``timeout`` capped to the
        session's limit; the result says if it was cut."""
        capped, notices = _capped_timeout(timeout, self.spec.limits.timeout)

        async def _run(session: Session) -> ExecutionResult:
            return (await run(session, capped)).with_notices(*notices)

        return _as_execution(
            await self.aexecute(
                thread_id, _run, record=record, step_call=step_call, resumable=resumable
            )
        )

    async def arun_code(
        self,
        thread_id: str,
        code: str,
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
        tools: ToolHost | None = None,
    ) -> Outcome[ExecutionResult]:
        """Run Python in the thread's stateful interpreter.

        ``timeout`` may lower the session's ``Limits.timeout``, never raise it: a larger value
        is cut to the limit and the result says so in its notices. ``tools``: host tools the
        code may call (see [`Session.run_code`][langchain_sandbox.Session.run_code]).
        """
        return await self._arun_capped(
            thread_id,
            timeout,
            lambda session, capped: session.run_code(
                code, timeout=capped, on_output=on_output, tools=tools
            ),
            record,
            step_call,
            resumable,
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
        resumable: bool = False,
        tools: ToolHost | None = None,
    ) -> Outcome[ExecutionResult]:
        """Blocking twin of `arun_code`."""
        return self._loop.run_sync(
            self.arun_code(
                thread_id,
                code,
                timeout=timeout,
                record=record,
                on_output=on_output,
                step_call=step_call,
                resumable=resumable,
                tools=tools,
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
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Run a shell command in the thread's sandbox (``cwd`` defaults to the workspace).

        ``timeout`` is capped by ``Limits.timeout`` as in `arun_code`.
        """
        return await self._arun_capped(
            thread_id,
            timeout,
            lambda session, capped: session.run_command(
                command, timeout=capped, cwd=cwd, on_output=on_output
            ),
            record,
            step_call,
            resumable,
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
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Blocking twin of `arun_command`."""
        return self._loop.run_sync(
            self.arun_command(
                thread_id,
                command,
                timeout=timeout,
                cwd=cwd,
                record=record,
                on_output=on_output,
                step_call=step_call,
                resumable=resumable,
            )
        )

    async def arun_shell(
        self,
        thread_id: str,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Run a command in the thread's persistent shell: ``cd`` and ``export`` carry over to
        its next commands, and across a resume or fork (they travel with the workspace's
        snapshot). ``cwd`` changes directory first, and the shell stays there. See
        [`Session.run_shell`][langchain_sandbox.Session.run_shell].

        ``timeout`` is capped by ``Limits.timeout`` as in `arun_code`.
        """
        return await self._arun_capped(
            thread_id,
            timeout,
            lambda session, capped: session.run_shell(
                command, timeout=capped, cwd=cwd, on_output=on_output
            ),
            record,
            step_call,
            resumable,
        )

    def run_shell(
        self,
        thread_id: str,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Blocking twin of `arun_shell`."""
        return self._loop.run_sync(
            self.arun_shell(
                thread_id,
                command,
                timeout=timeout,
                cwd=cwd,
                record=record,
                on_output=on_output,
                step_call=step_call,
                resumable=resumable,
            )
        )

    async def awrite_files(
        self,
        thread_id: str,
        files: Mapping[str, bytes],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[None]:
        """Write files into the thread's workspace (parents are created)."""

        async def _write(session: Session) -> None:
            await session.write_files(files)

        return await self.aexecute(
            thread_id,
            _write,
            record=record,
            repeatable=True,
            step_call=step_call,
            resumable=resumable,
        )

    def write_files(
        self,
        thread_id: str,
        files: Mapping[str, bytes],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[None]:
        """Blocking twin of `awrite_files`."""
        return self._loop.run_sync(
            self.awrite_files(
                thread_id, files, record=record, step_call=step_call, resumable=resumable
            )
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
        """Blocking twin of `aread_files`."""
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
        """Blocking twin of `alist_files`."""
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
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Install packages into the thread's sandbox (validated before any sandbox is touched);
        the installer's output goes to ``on_output`` while it runs."""
        requirements = validate_requirements(packages)

        async def _install(session: Session) -> ExecutionResult:
            return await session.install_packages(
                requirements, timeout=timeout, on_output=on_output
            )

        return _as_execution(
            await self.aexecute(
                thread_id,
                _install,
                record=record,
                repeatable=True,
                step_call=step_call,
                resumable=resumable,
            )
        )

    def install_packages(
        self,
        thread_id: str,
        packages: Sequence[str],
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Blocking twin of `ainstall_packages`."""
        return self._loop.run_sync(
            self.ainstall_packages(
                thread_id,
                packages,
                timeout=timeout,
                record=record,
                on_output=on_output,
                step_call=step_call,
                resumable=resumable,
            )
        )

    # -- concurrent turns --------------------------------------------------------------------

    def _lease_backend(self, checkpointer: Any) -> Any:
        from langchain_sandbox.thread_lease import lease_backend, store_backend

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
        from langchain_sandbox.thread_lease import hold

        return hold(self._lease_backend(checkpointer), thread_id, wait=wait)

    def ahold_thread(
        self, thread_id: str, *, checkpointer: Any = None, wait: float | None = 0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Async twin of `hold_thread` (``async with``; nothing blocks the event loop)."""
        from langchain_sandbox.thread_lease import ahold

        return ahold(self._lease_backend(checkpointer), thread_id, wait=wait)

    # -- closing -----------------------------------------------------------------------------

    async def aclose_thread(self, thread_id: str) -> bool:
        """Destroy the thread's sandbox (after its running call, if any) and forget the thread.

        Returns whether a live session was closed. Snapshots stay in the store (``gc`` reaps
        those no checkpoint references).
        """
        return await self._loop.run_async(self._close_thread(thread_id))

    def close_thread(self, thread_id: str) -> bool:
        """Blocking twin of `aclose_thread`."""
        return self._loop.run_sync(self._close_thread(thread_id))

    async def _close_thread(self, thread_id: str) -> bool:
        return await self._pool.close_thread(thread_id)

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


def _capped_timeout(timeout: float | None, ceiling: float) -> tuple[float | None, tuple[str, ...]]:
    """``timeout`` lowered to the operator's ``ceiling``, and the notice that says so if it was.

    The caller (often the model) may ask for less time than the operator allows, never more.
    Anything that is not a number is passed on for the session to refuse.
    """
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > ceiling:
        return ceiling, (
            f"timeout lowered from {timeout:g} s to the sandbox's limit of {ceiling:g} s",
        )
    return timeout, ()


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
    "Outcome",
    "PersistPolicy",
    "RestoreReportLike",
    "SandboxRuntime",
    "SnapshotInfoLike",
    "SnapshotterLike",
    "StepCall",
    "get_default_runtime",
]
