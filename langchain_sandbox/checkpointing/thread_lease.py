"""Per-thread turn leases: a second run on a thread another run is running fails (or waits).

LangGraph does not lock a thread: two workers that run a turn on one thread at once both start
from the same checkpoint, the thread's history keeps only one of the turns and nothing says so.
[`SandboxMiddleware`][langchain_sandbox.SandboxMiddleware] therefore takes a lease on the thread
for each turn it runs, and a run that finds the thread leased by another gets
[`ThreadBusyError`][langchain_sandbox.ThreadBusyError] instead of a silently lost turn.

A lease is held by the process, so it dies with it (a ``SIGKILL`` never leaves a thread leased):

* with a Postgres checkpointer, a session advisory lock on a connection of the lease's own, to the
  checkpointer's database (every worker sharing the checkpointer sees it);
* otherwise, with a [`LocalDirectoryBlobStore`][langchain_sandbox.snapshots.LocalDirectoryBlobStore],
  an ``flock`` on a file in the store's ``.thread-leases`` directory (every worker on the machine
  sharing the store sees it);
* otherwise only within the process: another store gives the workers no place they all see
  (a ``LangGraphStoreBlobStore`` over an ``InMemoryStore`` is per-process, so no other process
  can run the thread anyway; over a shared store, hold the thread with ``PostgresThreadLock``).

Within a process a lease belongs to a run (its ``stream_writer``, one object per graph run): the
run's own later steps take it again at no cost, another run of the thread in the same process is
busy like one in another process, and a run that ended without releasing it (it is garbage)
leaves it to the next run of its process.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import gc
import hashlib
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_sandbox.checkpointing.checkpointer_names import _is_pool, _kind
from langchain_sandbox.checkpointing.thread_lock import _key, _psycopg, covering
from langchain_sandbox.errors import ThreadBusyError

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.05
# How soon, then how often at most, a lease given back "when done" looks whether its run ended.
_WATCH_FIRST_SECONDS = 0.2
_WATCH_MAX_SECONDS = 5.0
_LEASE_DIR = ".thread-leases"
# Pool keyword arguments that configure psycopg, not the server connection.
_NOT_CONNINFO = {"autocommit", "prepare_threshold", "row_factory", "cursor_factory", "context"}

Release = Callable[[], None]


@dataclass(frozen=True)
class LeaseBackend:
    """Where the leases of one checkpointer's threads live.

    Attributes:
        key: Names the backend within the process (one registry entry per key and thread).
        try_acquire: Takes the thread's lease across processes: a function that releases it, or
            ``None`` if another process holds it; ``None`` for a process-only backend.
    """

    key: str
    try_acquire: Callable[[str], Release | None] | None


@functools.lru_cache(maxsize=64)
def _file_backend(root: Path) -> LeaseBackend:
    directory = root / _LEASE_DIR

    def try_acquire(thread_id: str) -> Release | None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        name = hashlib.sha256(thread_id.encode()).hexdigest()
        fd = os.open(directory / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return lambda: os.close(fd)  # closing the descriptor releases the lock

    # The path as the store spells it: resolving it would touch the file system on the event loop.
    return LeaseBackend(f"file:{root}", try_acquire)


def _conninfo(saver: Any) -> str:
    """A libpq connection string to a Postgres saver's database (with its password)."""
    from psycopg.conninfo import make_conninfo

    conn = saver.conn
    if _is_pool(conn):
        params = {k: v for k, v in (conn.kwargs or {}).items() if k not in _NOT_CONNINFO}
        return make_conninfo(conn.conninfo, **params)
    return make_conninfo(conn.info.dsn, password=conn.info.password)


class _LeaseSession:
    """One connection per process and database that holds all of the process's advisory leases
    there: taking or giving back a lease is one round trip, not a new connection; the server
    ends them all when the process dies (the connection closes). A lost connection lost its
    leases with it; the next lease opens a new one."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._conn: Any = None
        self._lock = threading.Lock()

    def _run(self, sql: str, key: int) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = _psycopg().connect(self.conninfo, autocommit=True)
        return self._conn.execute(sql, (key,)).fetchone()[0]

    def _execute(self, sql: str, key: int) -> Any:
        with self._lock:
            try:
                return self._run(sql, key)
            except _psycopg().OperationalError:  # the connection was lost: once more, on a new one
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                return self._run(sql, key)

    def try_acquire(self, thread_id: str) -> Release | None:
        key = _key(thread_id)
        if not self._execute("SELECT pg_try_advisory_lock(%s)", key):
            return None
        return lambda: self._execute("SELECT pg_advisory_unlock(%s)", key)


def _postgres_backend(conninfo: str) -> LeaseBackend:
    return LeaseBackend(f"postgres:{conninfo}", _LeaseSession(conninfo).try_acquire)


_postgres_backends: weakref.WeakKeyDictionary[Any, LeaseBackend] = weakref.WeakKeyDictionary()


def lease_backend(saver: Any, store: Any) -> LeaseBackend | None:
    """The backend for the threads of ``saver`` whose sandboxes snapshot into ``store``; ``None``
    without a checkpointer (a run that keeps no thread has no turn to lose)."""
    if saver is None:
        return None
    if _kind(saver) != "postgres":
        return store_backend(store)
    try:
        return _postgres_backends[saver]
    except (KeyError, TypeError):
        backend = _postgres_backend(_conninfo(saver))
        with contextlib.suppress(TypeError):
            _postgres_backends[saver] = backend
        return backend


def store_backend(store: Any) -> LeaseBackend:
    """The backend of a snapshot store's threads: a file lease for a local directory store,
    within the process for any other."""
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore

    if isinstance(store, LocalDirectoryBlobStore):
        return _file_backend(store.root)
    return LeaseBackend(f"process:{id(store)}", None)


@dataclass
class _Held:
    owner: weakref.ref[Any]
    release: Release | None
    taken: int = 0
    """Counts the takes, so a watch set up by `release_when_done` sees a later one."""


_held: dict[tuple[str, str], _Held] = {}
_held_lock = threading.Lock()


def _busy(thread_id: str, waited: float | None) -> ThreadBusyError:
    how = f" (waited {waited:g} s)" if waited else ""
    return ThreadBusyError(
        f"Another run holds thread {thread_id!r}{how}: it is running a turn on it, and a second "
        "turn at once would lose one of the two. Retry once that run ends, or wait for it around "
        "the call: with runtime.hold_thread(thread_id, checkpointer=..., wait=seconds): "
        "agent.invoke(...).",
        thread_id=thread_id,
    )


def _try_take(backend: LeaseBackend, thread_id: str, owner: Any) -> bool:
    """Take the lease for ``owner`` unless a live other run holds it."""
    key = (backend.key, thread_id)
    with _held_lock:
        entry = _held.get(key)
        if entry is not None:
            holder = entry.owner()
            if holder is not None and holder is not owner:
                return False
            # Its own run again, or a run that ended without a release: taken over.
            entry.owner = weakref.ref(owner)
            entry.taken += 1
            return True
        release = None
        if backend.try_acquire is not None:
            try:
                release = backend.try_acquire(thread_id)
            except Exception as exc:  # the lease's file or database is out of reach
                _log_unleased(thread_id, exc)
            else:
                if release is None:
                    return False
        _held[key] = _Held(weakref.ref(owner), release)
        return True


def _log_unleased(thread_id: str, exc: Exception) -> None:
    # Failing the turn would make the lease one more thing that can take an agent down; a run
    # without it is what every run was before it existed.
    logger.warning(
        "could not lease thread %r across processes (%s: %s); this turn runs leased in this "
        "process only, so a worker racing it elsewhere is not detected",
        thread_id,
        type(exc).__name__,
        exc,
    )


def _retaken(backend: LeaseBackend, thread_id: str, owner: Any) -> bool:
    """Whether ``owner`` holds the lease (then counted as taken again): no I/O."""
    with _held_lock:
        entry = _held.get((backend.key, thread_id))
        if entry is None or entry.owner() is not owner:
            return False
        entry.taken += 1
        return True


def _take_or_collect(backend: LeaseBackend, thread_id: str, owner: Any, collect: bool) -> bool:
    if _try_take(backend, thread_id, owner):
        return True
    if not collect:  # collected once per wait, on its first attempt
        return False
    with _held_lock:
        in_process = (backend.key, thread_id) in _held
    if not in_process:
        return False
    # A run of this process that ended without releasing (an exception in another middleware's
    # hook) is garbage not yet collected; a run still going is not.
    gc.collect()
    return _try_take(backend, thread_id, owner)


def _check_wait(thread_id: str, started: float | None, wait: float | None) -> float:
    """Raise once ``wait`` is over; log when a wait begins (``started`` is ``None``: once per
    wait, not per poll). Returns when the wait started."""
    now = time.monotonic()
    if wait is not None and now - (started or now) >= wait:
        raise _busy(thread_id, wait)
    if started is None:
        logger.info("thread %r is busy: waiting for the run that holds it", thread_id)
    return now if started is None else started


def acquire(backend: LeaseBackend, thread_id: str, owner: Any, *, wait: float | None = 0) -> None:
    """Lease ``thread_id`` to ``owner`` (a run's ``stream_writer``, or any weakly referable
    object), waiting up to ``wait`` seconds (``None``: for as long as it takes) for another run.

    Raises:
        ThreadBusyError: another run holds it.
    """
    started: float | None = None
    while not _take_or_collect(backend, thread_id, owner, started is None):
        started = _check_wait(thread_id, started, wait)
        time.sleep(_POLL_SECONDS)


async def aacquire(
    backend: LeaseBackend, thread_id: str, owner: Any, *, wait: float | None = 0
) -> None:
    """Async twin of `acquire` (the lease's I/O runs off the event loop)."""
    if _retaken(backend, thread_id, owner):  # the run's own later steps: no thread hop
        return
    started: float | None = None
    while not await asyncio.to_thread(_take_or_collect, backend, thread_id, owner, started is None):
        started = _check_wait(thread_id, started, wait)
        await asyncio.sleep(_POLL_SECONDS)


def release(backend: LeaseBackend, thread_id: str, owner: Any) -> None:
    """Give the lease back if ``owner`` holds it (or no live run does)."""
    key = (backend.key, thread_id)
    with _held_lock:
        entry = _held.get(key)
        if entry is None or entry.owner() not in (owner, None):
            return
        del _held[key]
    _let_go(entry)


def _let_go(entry: _Held) -> None:
    if entry.release is not None:
        with contextlib.suppress(Exception):  # a lost connection took the lock with it
            entry.release()


def release_when_done(backend: LeaseBackend, thread_id: str, owner: Any) -> None:
    """Give the lease back once ``owner``'s run has ended, unless that run takes it again first.

    For the span between a model call that asks for tools and the tool calls: the run may stop
    there (another middleware's ``interrupt()``, or its exception) and nothing tells middleware
    so, but giving the lease back at once let another run take the thread in that span and the
    tool calls then fail. A timer watches the owner instead (a run's ``stream_writer`` is garbage
    once the run has returned): while the run lives the lease stays, so no other run gets in;
    once it is gone, a thread that waits for a human is free within about `_WATCH_FIRST_SECONDS`.
    """
    key = (backend.key, thread_id)
    with _held_lock:
        entry = _held.get(key)
        if entry is None or entry.owner() is not owner:
            return
        taken = entry.taken
    _watch(key, entry, taken, _WATCH_FIRST_SECONDS)


def _watch(key: tuple[str, str], entry: _Held, taken: int, delay: float) -> None:
    def unchanged() -> bool:
        return _held.get(key) is entry and entry.taken == taken

    def look() -> None:
        with _held_lock:
            if not unchanged():  # taken again (its tool calls), over, or given back
                return
        if entry.owner() is not None:
            gc.collect()  # an ended run in a reference cycle is garbage not yet collected
        if entry.owner() is not None:
            _watch(key, entry, taken, min(delay * 2, _WATCH_MAX_SECONDS))
            return
        with _held_lock:
            if not unchanged():
                return
            del _held[key]
        _let_go(entry)

    timer = threading.Timer(delay, look)
    timer.daemon = True
    timer.start()


class _Token:
    """The owner of a lease taken with `hold`: alive while the ``with`` block runs."""


@contextlib.contextmanager
def hold(backend: LeaseBackend, thread_id: str, *, wait: float | None = 0) -> Iterator[None]:
    """Hold ``thread_id``'s lease while the block runs: around a whole ``invoke``, it covers the
    run from its very start (the middleware then takes no lease of its own)."""
    token = _Token()
    acquire(backend, thread_id, token, wait=wait)
    try:
        with covering(thread_id):
            yield
    finally:
        release(backend, thread_id, token)


@contextlib.asynccontextmanager
async def ahold(
    backend: LeaseBackend, thread_id: str, *, wait: float | None = 0
) -> AsyncIterator[None]:
    """Async twin of `hold`."""
    token = _Token()
    await aacquire(backend, thread_id, token, wait=wait)
    try:
        with covering(thread_id):
            yield
    finally:
        await asyncio.to_thread(release, backend, thread_id, token)


__all__ = [
    "LeaseBackend",
    "aacquire",
    "acquire",
    "ahold",
    "hold",
    "lease_backend",
    "release",
    "release_when_done",
    "store_backend",
]
