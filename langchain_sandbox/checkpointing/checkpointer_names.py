"""Which checkpointer a run's snapshots are referenced from, named so ``gc`` can tell apps apart.

Several applications may keep their snapshots in one blob store (the default local store is one
directory per user). ``gc`` keeps what the checkpointers it is given reference, so the blobs of an
application whose checkpointer it was not given would look unused. Each run that takes snapshots
therefore notes its checkpointer's name in the store (`BlobStore.note_checkpointer`, once per process), and ``gc``
refuses to collect blobs while the store serves a checkpointer it was not given.

A name is the URL ``gc --checkpointer`` opens the checkpointer by, without credentials:

* ``sqlite:///<absolute path>`` for ``SqliteSaver`` and ``AsyncSqliteSaver``;
* ``postgresql://<host>:<port>/<database>`` for ``PostgresSaver`` and ``AsyncPostgresSaver``
  (a connection or a pool), the host spelled as the application spelled it;
* ``python:<module>.<class>`` for any other saver: ``gc`` can only be given it from Python.

An ``InMemorySaver`` that keeps its checkpoints in memory only (or a SQLite database in memory)
has no name: its checkpoints end with its process, so nothing outside that process can ever
resume from them. One built with a persistent ``factory`` outlives its process: ``langgraph dev``'s
(``langgraph_runtime_inmem``) writes its checkpoints under ``.langgraph_api/`` and reloads them at
the next start, so it is named like any other saver (``python:<module>.<class>``) and another
application's ``gc`` refuses to collect while the store serves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections import defaultdict
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import CONFIG_KEY_CHECKPOINTER

if TYPE_CHECKING:
    from langchain_sandbox.runtime import SandboxRuntime
    from langchain_sandbox.snapshots import BlobStore

logger = logging.getLogger(__name__)

_noted: weakref.WeakKeyDictionary[BlobStore, weakref.WeakSet[Any]] = weakref.WeakKeyDictionary()
"""Per store, the savers already noted in it: a tool call in a graph then costs no I/O."""
_noted_lock = threading.Lock()


def _kind(saver: object) -> str:
    """``"sqlite"``, ``"postgres"``, ``"memory"`` or ``"other"``, without importing the optional
    savers' packages."""
    if isinstance(saver, InMemorySaver) and type(getattr(saver, "storage", None)) is defaultdict:
        return "memory"  # the default factory; a persistent one (a subclass) outlives the process
    module = type(saver).__module__
    if module.startswith("langgraph.checkpoint.sqlite"):
        return "sqlite"
    if module.startswith("langgraph.checkpoint.postgres"):
        return "postgres"
    return "other"


def _sqlite_name(rows: list[Any]) -> str | None:
    path = next((str(row[2]) for row in rows if row[1] == "main"), "")
    return f"sqlite:///{path}" if path else None  # "": in memory or a temporary database


def _postgres_name(info: Any) -> str:
    return f"postgresql://{quote(str(info.host), safe='')}:{info.port}/{quote(str(info.dbname))}"


def _is_pool(conn: object) -> bool:
    """Whether a Postgres saver's ``conn`` is a pool (``psycopg_pool``), not one connection."""
    import psycopg  # installed with the Postgres saver, which is the only caller

    return not isinstance(conn, psycopg.Connection | psycopg.AsyncConnection)


def _other_name(saver: object) -> str:
    return f"python:{type(saver).__module__}.{type(saver).__qualname__}"


async def acheckpointer_name(saver: Any) -> str | None:
    """The name of ``saver`` (see the module docstring); ``None`` for one that ends with its
    process. Call it on the event loop the saver uses."""
    kind = _kind(saver)
    if kind == "memory":
        return None
    if kind == "sqlite" and hasattr(saver, "loop"):  # AsyncSqliteSaver
        async with saver.lock, saver.conn.execute("PRAGMA database_list") as cursor:
            return _sqlite_name(list(await cursor.fetchall()))
    if kind == "postgres" and _is_pool(saver.conn):
        async with saver.conn.connection() as conn:
            return _postgres_name(conn.info)
    return checkpointer_name(saver)


def checkpointer_name(saver: Any) -> str | None:
    """Blocking twin of `acheckpointer_name` (an async saver's I/O runs on its loop)."""
    kind = _kind(saver)
    if kind == "memory":
        return None
    if kind == "other":
        return _other_name(saver)
    if kind == "sqlite":
        if hasattr(saver, "loop"):  # AsyncSqliteSaver, called from another thread
            future = asyncio.run_coroutine_threadsafe(acheckpointer_name(saver), saver.loop)
            return future.result()
        with saver.lock:
            return _sqlite_name(saver.conn.execute("PRAGMA database_list").fetchall())
    if _is_pool(saver.conn):
        if hasattr(saver, "loop"):  # AsyncPostgresSaver on a pool, called from another thread
            future = asyncio.run_coroutine_threadsafe(acheckpointer_name(saver), saver.loop)
            return future.result()
        with saver.conn.connection() as conn:
            return _postgres_name(conn.info)
    return _postgres_name(saver.conn.info)


def run_checkpointer(config: RunnableConfig | None) -> Any:
    """The checkpoint saver of the run around ``config`` (LangGraph's ``CONFIG_KEY_CHECKPOINTER``:
    the parent's for a subgraph); ``None`` outside a graph or in one compiled without a
    checkpointer."""
    return ((config or {}).get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER)


def _run_store(runtime: SandboxRuntime, config: RunnableConfig | None) -> tuple[Any, Any] | None:
    """The run's checkpointer and the store its runtime snapshots into, if both matter."""
    from langchain_sandbox.snapshots import Snapshotter

    saver = run_checkpointer(config)
    snapshotter = runtime.snapshotter
    if saver is None or runtime.persist == "never" or not isinstance(snapshotter, Snapshotter):
        return None
    if _kind(saver) == "memory":
        return None
    return saver, snapshotter.store


def _pending(store: BlobStore, saver: Any) -> bool:
    with _noted_lock:
        noted = _noted.get(store)
        try:
            return noted is None or saver not in noted
        except TypeError:  # a saver that cannot be weakly referenced is named on every call
            return True


def _done(store: BlobStore, saver: Any) -> None:
    with _noted_lock, contextlib.suppress(TypeError):
        _noted.setdefault(store, weakref.WeakSet()).add(saver)


async def anote_checkpointer(runtime: SandboxRuntime, config: RunnableConfig | None) -> None:
    """Note in the runtime's snapshot store the checkpointer of the run around ``config`` (once
    per store and saver object in a process). A failure is logged, not raised: the call goes on,
    and the next one tries again."""
    found = _run_store(runtime, config)
    if found is None:
        return
    saver, store = found
    if not _pending(store, saver):
        return
    try:
        name = await acheckpointer_name(saver)
        if name is not None:
            # On the runtime's loop, like every other use of the store.
            await asyncio.to_thread(runtime.run_sync, store.note_checkpointer(name))
        _done(store, saver)
    except Exception as exc:
        _log_failure(exc)


def note_checkpointer(runtime: SandboxRuntime, config: RunnableConfig | None) -> None:
    """Blocking twin of `anote_checkpointer`."""
    found = _run_store(runtime, config)
    if found is None:
        return
    saver, store = found
    if not _pending(store, saver):
        return
    try:
        name = checkpointer_name(saver)
        if name is not None:
            runtime.run_sync(store.note_checkpointer(name))
        _done(store, saver)
    except Exception as exc:
        _log_failure(exc)


def _log_failure(exc: Exception) -> None:
    logger.warning(
        "could not note the run's checkpointer in the snapshot store (%s); until it is, "
        "`langchain-sandbox gc` run with another application's checkpointer may delete this "
        "application's snapshots",
        type(exc).__name__,
    )


__all__ = [
    "acheckpointer_name",
    "anote_checkpointer",
    "checkpointer_name",
    "note_checkpointer",
    "run_checkpointer",
]
