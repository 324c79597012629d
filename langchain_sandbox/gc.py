"""Reaping what nobody uses any more: orphaned sandboxes and unreferenced snapshot blobs.

What counts as an orphan:

* a **local** sandbox whose owning process is gone (local sandboxes cannot outlive their process, so
  its directory and cgroup are leftovers);
* a **remote** sandbox (E2B, Runloop) made by this package whose thread's latest checkpoint names
  another sandbox, or whose thread has no checkpoint at all. That needs the checkpointer, so
  without one remote sandboxes are listed but never destroyed;
* a **snapshot blob** that no checkpoint of any thread references (forks may go back to any
  checkpoint, so every checkpoint counts, not just the latest). Without a checkpointer nothing is
  known to be unreferenced, so blobs are left alone.

Anything created within ``grace_seconds`` is kept: it may belong to a step whose checkpoint has
not been written yet (a local sandbox whose process is gone is an orphan at any age: nothing can
use it again).

A checkpointer that does not exist or holds no checkpoint is refused unless
``allow_empty_checkpointer`` says so: against an empty one every blob looks unreferenced, and a
typo in a path would otherwise delete them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from langchain_sandbox.errors import (
    CheckpointerUnavailableError,
    InvalidInputError,
    MissingDependencyError,
)
from langchain_sandbox.providers import get_provider
from langchain_sandbox.providers.base import Provider, SessionRecord
from langchain_sandbox.snapshots import Snapshotter


@dataclass
class CheckpointReferences:
    """What the checkpoints of every thread point at.

    Attributes:
        snapshot_refs: Snapshot refs named by any checkpoint.
        head_sessions: Session ids named by the latest checkpoint of each thread.
        checkpoints: How many checkpoints were read.
    """

    snapshot_refs: set[str] = field(default_factory=set)
    head_sessions: set[str] = field(default_factory=set)
    checkpoints: int = 0


async def checkpoint_references(saver: BaseCheckpointSaver[Any]) -> CheckpointReferences:
    """Read every checkpoint of every thread and collect the sandbox records' references."""
    refs = CheckpointReferences()
    latest: dict[str, tuple[str, str | None]] = {}
    async for item in saver.alist(None):
        refs.checkpoints += 1
        record = item.checkpoint.get("channel_values", {}).get("sandbox") or {}
        if record.get("snapshot"):
            refs.snapshot_refs.add(str(record["snapshot"]))
        thread_id = str(item.config["configurable"].get("thread_id", ""))
        checkpoint_id = str(item.checkpoint["id"])
        session = (record.get("session") or {}).get("session_id")
        if thread_id not in latest or checkpoint_id > latest[thread_id][0]:
            latest[thread_id] = (checkpoint_id, session)
    refs.head_sessions = {session for _, session in latest.values() if session}
    return refs


@contextlib.asynccontextmanager
async def open_checkpointer(
    url: str, *, must_exist: bool = True
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Open ``sqlite:///path`` or ``postgresql://...`` as an async checkpointer.

    Raises:
        InvalidInputError: The URL is neither, or (with ``must_exist``) the SQLite file is missing.
            Without ``must_exist`` a missing file opens as an empty checkpointer and is not
            created.
        MissingDependencyError: The checkpointer's package is not installed.
        CheckpointerUnavailableError: The database cannot be reached.
    """
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if not await asyncio.to_thread(os.path.isfile, path):
            if must_exist:
                raise InvalidInputError(
                    f"No SQLite checkpointer at {path!r} (nothing was created). Check the path, "
                    "or pass --allow-empty-checkpointer to treat it as one with no threads."
                )
            yield InMemorySaver()  # as empty as the missing file, which is not created
            return
        try:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        except ImportError as exc:
            raise MissingDependencyError(
                "langgraph-checkpoint-sqlite", "sqlite", purpose="A sqlite:/// checkpointer"
            ) from exc
        async with AsyncSqliteSaver.from_conn_string(path) as sqlite_saver:
            yield sqlite_saver
    elif url.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError as exc:
            raise MissingDependencyError(
                "langgraph-checkpoint-postgres", "postgres", purpose="A postgresql:// checkpointer"
            ) from exc
        try:
            context = AsyncPostgresSaver.from_conn_string(url)
            postgres_saver = await context.__aenter__()
        except Exception as exc:  # psycopg's errors; the package is optional, so no import here
            first_line = (
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            )
            raise CheckpointerUnavailableError(
                f"Cannot open the Postgres checkpointer at {_without_password(url)}: {first_line}. "
                "Is the server running, and are the address and credentials right?"
            ) from exc
        try:
            yield postgres_saver
        finally:
            await context.__aexit__(None, None, None)
    else:
        raise InvalidInputError("A checkpointer URL is sqlite:///path or postgresql://...")


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _is_orphan(
    record: SessionRecord, refs: CheckpointReferences | None, *, now: float, grace: float
) -> bool | None:
    """True, False, or None when it cannot be known (a remote sandbox without checkpoints)."""
    state = record.get("state") or {}
    if state.get("orphaned"):
        return True  # its owner process is gone: nothing can use it again, whatever its age
    if now - float(record.get("created_at") or 0.0) < grace:
        return False
    if "orphaned" in state:
        return False
    if refs is None:
        return None
    return record.get("session_id") not in refs.head_sessions


async def collect_garbage(
    *,
    providers: Sequence[str | Provider] = ("local",),
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    checkpointer_url: str | None = None,
    snapshotter: Snapshotter | None = None,
    dry_run: bool = True,
    grace_seconds: float = 3600.0,
    allow_empty_checkpointer: bool = False,
) -> dict[str, Any]:
    """List (and unless ``dry_run``, destroy) orphaned sandboxes and unreferenced blobs.

    Returns a JSON-safe report: ``sandboxes`` (one entry per sandbox found, with ``orphan`` true,
    false or null for unknown, and ``destroyed``), ``blobs`` (the snapshot store's GC report, or
    null) and ``summary`` (lines for a person).

    Raises:
        InvalidInputError: The checkpointer does not exist or holds no checkpoint, and
            ``allow_empty_checkpointer`` is false (every blob would look unreferenced).
    """
    if checkpointer is None and checkpointer_url is not None:
        async with open_checkpointer(
            checkpointer_url, must_exist=not allow_empty_checkpointer
        ) as saver:
            return await collect_garbage(
                providers=providers,
                checkpointer=saver,
                snapshotter=snapshotter,
                dry_run=dry_run,
                grace_seconds=grace_seconds,
                allow_empty_checkpointer=allow_empty_checkpointer,
            )
    refs = await checkpoint_references(checkpointer) if checkpointer is not None else None
    if refs is not None and refs.checkpoints == 0 and not allow_empty_checkpointer:
        raise InvalidInputError(
            "The checkpointer holds no checkpoint, so every snapshot blob would look unreferenced. "
            "Check that it is the application's checkpointer, or pass "
            "--allow-empty-checkpointer (allow_empty_checkpointer=True) if it really is empty."
        )
    now = time.time()
    sandboxes: list[dict[str, Any]] = []
    for name in providers:
        provider = get_provider(name)
        try:
            for record in await provider.list_sessions():
                orphan = _is_orphan(record, refs, now=now, grace=grace_seconds)
                destroyed = bool(orphan) and not dry_run and await provider.destroy(record)
                sandboxes.append(
                    {
                        "provider": provider.name,
                        "session_id": record.get("session_id"),
                        "thread_id": (record.get("metadata") or {}).get("thread_id"),
                        "orphan": orphan,
                        "destroyed": destroyed,
                    }
                )
        finally:
            if not isinstance(name, Provider):
                await provider.aclose()
    blobs: dict[str, Any] | None = None
    if refs is not None:
        report = await (snapshotter or Snapshotter()).collect_garbage(
            refs.snapshot_refs, dry_run=dry_run, grace_seconds=grace_seconds
        )
        blobs = {
            "dry_run": report.dry_run,
            "live_refs": report.live_refs,
            "missing_refs": list(report.missing_refs),
            "deleted_blobs": report.deleted_blobs,
            "deleted_bytes": report.deleted_bytes,
        }
    return {"sandboxes": sandboxes, "blobs": blobs, "summary": _summary(sandboxes, blobs, dry_run)}


def _summary(
    sandboxes: list[dict[str, Any]], blobs: dict[str, Any] | None, dry_run: bool
) -> list[str]:
    verb = "would destroy" if dry_run else "destroyed"
    lines = []
    for box in sandboxes:
        if box["orphan"] is None:
            state = "unknown (give --checkpointer to decide)"
        elif box["orphan"]:
            state = "orphan, destroyed" if box["destroyed"] else f"orphan, {verb}"
        else:
            state = "in use"
        lines.append(f"{box['provider']} {box['session_id']} thread={box['thread_id']}: {state}")
    if not sandboxes:
        lines.append("no sandboxes found")
    if blobs is None:
        lines.append(
            "snapshot blobs: left alone (give --checkpointer to know which are referenced)"
        )
    else:
        lines.append(
            f"snapshot blobs: {verb} {blobs['deleted_blobs']} ({blobs['deleted_bytes']} bytes); "
            f"{blobs['live_refs']} snapshots referenced, {len(blobs['missing_refs'])} missing"
        )
    return lines


__all__ = ["CheckpointReferences", "checkpoint_references", "collect_garbage", "open_checkpointer"]
