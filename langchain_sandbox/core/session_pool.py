"""The runtime's live sessions: one slot per thread, a cap, an idle reaper, and closing.

The pool owns *when* sessions live and die; `rehydration` owns *which*
session a call runs in. Everything here runs on the runtime's event loop.

* Each thread has a slot with a lock: calls of one thread run one at a time, threads in parallel.
* A cap (``max_sessions``) spills the least recently used idle session to make room: the engine
  captures it (files and variables) and the pool closes it; the thread's next call restores it.
  A busy session is never closed, so under load the cap can be exceeded until calls finish.
* An idle reaper closes sessions unused for ``idle_ttl`` seconds; a thread whose record names a
  service is spared only with ``keep_services_alive`` (otherwise its next call starts the service
  again in the restored sandbox).
* Closing never fails a caller: failures are logged and ``gc`` reaps what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_sandbox.core._event_loop import on_event_loop
from langchain_sandbox.core.arguments import check_provider_options
from langchain_sandbox.core.retries import retry_async
from langchain_sandbox.core.thread import ThreadSandbox
from langchain_sandbox.errors import SessionClosedError
from langchain_sandbox.providers import get_provider, provider_class
from langchain_sandbox.providers.base import Capabilities, Provider, Session, SessionSpec

logger = logging.getLogger(__name__)

_MOST_SESSIONS = 1024
_DESCRIPTORS_PER_SESSION = 8


def _default_max_sessions() -> int:
    """The default cap: 1,024 live sessions, fewer where the process's open-file limit would run
    out first.

    Measured on a 2-core, 24 GiB machine (``benchmarks/bench_spill.py``): a local session is 3
    processes, 4.3 MiB unshared memory and 4 descriptors of the host process; 1,000 of them ran
    side by side with 17 GiB left. The descriptors are the first limit on a machine whose soft
    limit is the common 1,024: twice a session's own are counted, so the application keeps half.
    """
    if sys.platform == "win32":  # no such limit there (nor a local provider)
        return _MOST_SESSIONS
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MOST_SESSIONS
    return max(1, min(_MOST_SESSIONS, soft // _DESCRIPTORS_PER_SESSION))


DEFAULT_MAX_SESSIONS = _default_max_sessions()
"""The runtime's default ``max_sessions`` on this machine (see `_default_max_sessions`)."""


@dataclass(eq=False)
class _Slot:
    """One thread's place in the pool: its lock and how busy and how recently used it is."""

    thread: ThreadSandbox
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    last_used: float = field(default_factory=time.monotonic)
    leaving: bool = False
    """The cap is spilling its session: it no longer counts as live, nor is picked again."""


class SessionPool:
    """Live sessions by thread; implements the engine's
    `SessionHost`.

    Args:
        provider: A provider name or instance; a name is built on first use.
        provider_options: Keyword arguments for a provider given by name.
        spec: What each new session is created with; a ``thread_id`` tag is added.
        max_sessions: Live sessions kept at most (``None``: no cap).
        idle_ttl: Seconds after which an idle session is closed (``None``: never).
        keep_services_alive: A thread with services is never idle.
    """

    def __init__(
        self,
        provider: str | Provider,
        *,
        provider_options: Mapping[str, Any] | None = None,
        spec: SessionSpec,
        max_sessions: int | None,
        idle_ttl: float | None,
        keep_services_alive: bool = False,
    ) -> None:
        if max_sessions is not None and max_sessions < 1:
            raise ValueError("max_sessions must be at least 1 (or None for no cap).")
        if idle_ttl is not None and idle_ttl <= 0:
            raise ValueError("idle_ttl must be positive (or None to keep idle sessions).")
        check_provider_options(provider, provider_options)
        self._provider_arg = provider
        self._provider_options = dict(provider_options or {})
        self._provider: Provider | None = provider if isinstance(provider, Provider) else None
        if self._provider is None and not on_event_loop():
            # Fail fast: a missing extra, API key or bubblewrap raises here, to the developer.
            # On an event loop that check would block it (imports, the filesystem); there the
            # provider is built off the loop at the first call, which raises the same errors.
            self._provider = get_provider(provider, **self._provider_options)
        self.spec = spec
        self.max_sessions = max_sessions
        self.idle_ttl = idle_ttl
        self.keep_services_alive = keep_services_alive
        self.closed = False
        self._slots: dict[str, _Slot] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self.spill: Callable[[ThreadSandbox], Awaitable[bool]] | None = None
        """Saves a thread's live session before the cap closes it (the engine's
        `spill`); when it could not, the
        thread's next call is told the sandbox was closed."""

    @property
    def provider_name(self) -> str:
        if isinstance(self._provider_arg, Provider):
            return self._provider_arg.name
        return self._provider_arg

    @property
    def capabilities(self) -> Capabilities:
        """What the provider can do, known without building it (no SDK client, no sandbox)."""
        if isinstance(self._provider_arg, Provider):
            return self._provider_arg.capabilities
        return provider_class(self._provider_arg).capabilities

    def live_sessions(self) -> dict[str, str]:
        """``{thread_id: session_id}`` of the sessions alive right now."""
        return {
            thread_id: slot.thread.session.session_id
            for thread_id, slot in list(self._slots.items())
            if slot.thread.session is not None
        }

    def thread(self, thread_id: str) -> ThreadSandbox | None:
        slot = self._slots.get(thread_id)
        return slot.thread if slot is not None else None

    def threads(self) -> list[ThreadSandbox]:
        """Every thread the pool knows, with or without a live session."""
        return [slot.thread for slot in list(self._slots.values())]

    # -- the engine's SessionHost --------------------------------------------------------------

    async def provider(self) -> Provider:
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

    async def create(self, thread_id: str) -> Session:
        if self.max_sessions is not None:
            await self._make_room(self.max_sessions - 1)
        provider = await self.provider()
        spec = dataclasses.replace(
            self.spec, metadata={**self.spec.metadata, "thread_id": thread_id}
        )
        # Providers retry their own create (E2B under one idempotency key); retrying here too
        # would multiply attempts and could make a second sandbox behind a lost response.
        return await provider.create(spec)

    async def close(self, session: Session) -> None:
        try:
            await retry_async(session.close, deadline=30.0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Closing is cleanup: a failure must not fail the caller's call; gc reaps leftovers.
            logger.warning("closing sandbox session %s failed: %s", session.session_id, exc)

    def close_soon(self, session: Session) -> None:
        task = asyncio.get_running_loop().create_task(self.close(session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- using a thread ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(self, thread_id: str) -> AsyncIterator[ThreadSandbox]:
        """Hold the thread's lock for one call; afterwards, keep the pool within its cap."""
        self._check_open()
        slot = self._slots.get(thread_id)
        if slot is None:
            slot = self._slots[thread_id] = _Slot(ThreadSandbox(thread_id))
        slot.users += 1
        try:
            async with slot.lock:
                self._check_open()
                yield slot.thread
        finally:
            slot.users -= 1
            slot.last_used = time.monotonic()
            if self.max_sessions is not None and not self.closed:
                await self._make_room(self.max_sessions)

    async def close_thread(self, thread_id: str) -> bool:
        """Close the thread's session (after its running call) and forget the thread."""
        slot = self._slots.get(thread_id)
        if slot is None:
            return False
        async with slot.lock:
            had_session = slot.thread.session is not None
            await self._discard(slot)
            if slot.users == 0 and self._slots.get(thread_id) is slot:
                del self._slots[thread_id]
            return had_session

    def _check_open(self) -> None:
        if self.closed:
            raise SessionClosedError("This SandboxRuntime is closed.")

    async def _discard(self, slot: _Slot, why: str | None = None, *, spill: bool = False) -> None:
        """Close the slot's session; ``why`` (the pool closed it on its own) is told to the
        thread's next call, so a notice that earlier state is gone also says what happened.
        ``spill``: save it first, and say nothing if that kept everything."""
        # A snapshot still being written behind needs the session; it finishes first.
        await slot.thread.settle()
        if spill and self.spill is not None and await self.spill(slot.thread):
            why = None
        session = slot.thread.take_session()
        if session is not None:
            if why is not None:
                slot.thread.late_notices.append(f"The thread's previous sandbox was closed {why}.")
            await self.close(session)

    async def _make_room(self, keep: int) -> None:
        """Spill least recently used idle sessions until at most ``keep`` are live."""
        live = [s for s in self._slots.values() if s.thread.session is not None and not s.leaving]
        excess = len(live) - keep
        if excess <= 0:
            return
        idle = sorted(
            (s for s in live if s.users == 0 and not s.lock.locked()), key=lambda s: s.last_used
        )
        await asyncio.gather(*(self._spill(slot) for slot in idle[:excess]))

    async def _spill(self, slot: _Slot) -> None:
        """Spill one idle session, holding its thread's lock: a call of the thread that comes
        meanwhile waits, then finds it spilled and restores it."""
        slot.leaving = True
        try:
            async with slot.lock:
                await self._discard(
                    slot,
                    f"to stay within the runtime's max_sessions={self.max_sessions}",
                    spill=True,
                )
        finally:
            slot.leaving = False

    # -- the idle reaper and shutdown ----------------------------------------------------------

    def start_reaper(self) -> None:
        """Start closing idle sessions (call on the runtime's loop; no-op without a TTL)."""
        if self.idle_ttl is not None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever(self.idle_ttl))

    async def _reap_forever(self, ttl: float) -> None:
        interval = min(max(ttl / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(interval)
            await self._reap_idle(ttl)

    async def _reap_idle(self, ttl: float) -> None:
        deadline = time.monotonic() - ttl
        for slot in list(self._slots.values()):
            if self.keep_services_alive and slot.thread.position.services.processes:
                continue
            if slot.thread.session is not None and slot.users == 0 and slot.last_used < deadline:
                await self._discard(slot, f"after {ttl:g} s idle (the runtime's idle_ttl)")

    async def shutdown(self) -> None:
        """Stop the reaper, close every session and the provider's clients."""
        self.closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*self._closing, return_exceptions=True)
        await asyncio.gather(*(slot.thread.settle() for slot in self._slots.values()))
        sessions = [s for s in (slot.thread.take_session() for slot in self._slots.values()) if s]
        self._slots.clear()
        await asyncio.gather(*(self.close(s) for s in sessions))
        if self._provider is not None:
            with contextlib.suppress(Exception):
                await self._provider.aclose()


__all__ = ["DEFAULT_MAX_SESSIONS", "SessionPool"]
