"""One run at a time per thread, across worker processes: a Postgres advisory lock held for a turn.

LangGraph does not lock a thread: two workers that run a turn on one thread at once both start
from the same checkpoint, and the thread's history keeps only one of the turns (the other's
checkpoints are a branch nothing points to), while the sandbox matches whichever ran last. Nothing
says so. ``SandboxMiddleware`` leases the thread for each turn by default
(`langchain_sandbox.checkpointing.thread_lease`); this lock is the same advisory lock for any graph and any
snapshot store, held around the call. LangGraph Server avoids this with its own per-thread run queue (``multitask_strategy``:
a second run on a busy thread is rejected, enqueued, interrupts or rolls back the first); an
application that runs agents in workers of its own needs the same, and this is it:

```python
lock = PostgresThreadLock(DSN)  # the checkpointer's database, or any other
with lock.hold("t"):  # ThreadBusyError if another run holds "t"
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t"}})
```

The lock is a session-level ``pg_advisory_lock`` on a connection of its own, held while the
``with`` block runs, so it covers a whole turn whatever the turn does (an interrupt, an exception,
a resume with ``Command``), and it is released when the block ends, or by the server when the
holding process dies (its connection closes: a ``SIGKILL`` never leaves a thread locked). Locks of
different threads do not contend. ``wait=`` makes a second run wait for the thread instead of
failing at once. The cost is one connection and two round trips per turn (``docs/persistence.md``
has the figure), not per call.

It needs ``psycopg`` (``pip install 'langchain-sandbox[postgres]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_sandbox.errors import MissingDependencyError, ThreadBusyError

_POLL_SECONDS = 0.05
_NAMESPACE = b"langchain_sandbox.core.thread:"

_covered: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "langchain_sandbox_covered_threads", default=frozenset()
)
"""Threads an explicit hold (this lock's, or ``SandboxRuntime.hold_thread``) holds around the
code running in this context: ``SandboxMiddleware`` takes no lease of its own for them, which
would be busy (held by the hold itself)."""


@contextlib.contextmanager
def covering(thread_id: str) -> Iterator[None]:
    """Mark ``thread_id`` as held by an explicit hold while the block runs (see `_covered`)."""
    reset = _covered.set(_covered.get() | {thread_id})
    try:
        yield
    finally:
        _covered.reset(reset)


def covered(thread_id: str) -> bool:
    """Whether an explicit hold around this code holds ``thread_id``."""
    return thread_id in _covered.get()


def _key(thread_id: str) -> int:
    """The thread's advisory lock key: a signed 64-bit hash, the same in every process."""
    digest = hashlib.sha256(_NAMESPACE + thread_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise MissingDependencyError("psycopg", "postgres", purpose="PostgresThreadLock") from exc
    return psycopg


def _busy(thread_id: str, waited: float | None) -> ThreadBusyError:
    how = f"after waiting {waited:g} s" if waited else "now"
    return ThreadBusyError(
        f"Another run holds thread {thread_id!r} {how}: two turns on one thread at once would "
        "lose one of them. Retry when it ends, or pass wait= to wait for it.",
        thread_id=thread_id,
    )


class PostgresThreadLock:
    """Per-thread locks for turns, in a Postgres database (see the module docstring).

    Args:
        conninfo: A libpq connection string or URL (the checkpointer's database will do: the
            locks take no table and no space).
        wait: Seconds a run waits for a thread another run holds before
            [`ThreadBusyError`][langchain_sandbox.ThreadBusyError] (``0``, the default: fail at once;
            ``None``: wait for as long as it takes).
        connect_kwargs: More keyword arguments for ``psycopg.connect``.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        wait: float | None = 0.0,
        connect_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if wait is not None and wait < 0:
            raise ValueError("wait must be None or a number of seconds >= 0.")
        self.conninfo = conninfo
        self.wait = wait
        self._connect_kwargs = {"autocommit": True, **(connect_kwargs or {})}

    def __repr__(self) -> str:
        return f"PostgresThreadLock(wait={self.wait!r})"

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[None]:
        """Hold ``thread_id`` while the block runs.

        Raises:
            ThreadBusyError: another run holds it (past ``wait``).
        """
        key = _key(thread_id)
        with _psycopg().connect(self.conninfo, **self._connect_kwargs) as conn:
            started = time.monotonic()
            while not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                if self._gave_up(started):
                    raise _busy(thread_id, self.wait)
                time.sleep(_POLL_SECONDS)
            try:
                with covering(thread_id):
                    yield
            finally:
                # A connection lost meanwhile took the lock with it.
                with contextlib.suppress(_psycopg().Error):
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    @contextlib.asynccontextmanager
    async def ahold(self, thread_id: str) -> AsyncIterator[None]:
        """Async twin of `hold` (``psycopg.AsyncConnection``: nothing blocks the loop)."""
        key = _key(thread_id)
        connect = _psycopg().AsyncConnection.connect
        async with await connect(self.conninfo, **self._connect_kwargs) as conn:
            started = time.monotonic()
            while True:
                row = await (
                    await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                ).fetchone()
                if row[0]:
                    break
                if self._gave_up(started):
                    raise _busy(thread_id, self.wait)
                await asyncio.sleep(_POLL_SECONDS)
            try:
                with covering(thread_id):
                    yield
            finally:
                with contextlib.suppress(_psycopg().Error):
                    await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def _gave_up(self, started: float) -> bool:
        return self.wait is not None and time.monotonic() - started >= self.wait


__all__ = ["PostgresThreadLock"]
