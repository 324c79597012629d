"""Reaping what nobody uses any more: orphaned sandboxes and unreferenced snapshot blobs.

What counts as an orphan:

* a **local** sandbox whose owning process is gone (local sandboxes cannot outlive their process, so
  its directory and cgroup are leftovers);
* a **remote** sandbox (E2B, Runloop) made by this package whose thread's latest checkpoint names
  another sandbox, or whose thread has no checkpoint at all. That needs the checkpointer, so
  without one remote sandboxes are listed but never destroyed;
* a **snapshot blob** that no checkpoint of any thread references (forks may go back to any
  checkpoint, so every checkpoint counts, not just the latest; so do its pending writes, where a
  run paused at ``interrupt()`` keeps the calls that finished before it, and the records the Deep
  Agents backend filed for the tool calls of its conversation). Without a checkpointer nothing is
  known to be unreferenced, so blobs are left alone.

Anything created within ``grace_seconds`` is kept: it may belong to a step whose checkpoint has
not been written yet (a local sandbox whose process is gone is an orphan at any age: nothing can
use it again).

A checkpointer that does not exist or holds no checkpoint is refused unless
``allow_empty_checkpointer`` says so: against an empty one every blob looks unreferenced, and a
typo in a path would otherwise delete them all.

Several applications may share one snapshot store (the default local store is per user). Runs
note their checkpointer's name in the store (`langchain_sandbox.checkpointing.checkpointer_names`), and gc
refuses to run while the store serves a checkpointer it was not given: blobs only that
checkpointer's checkpoints reference would look unused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from langchain_core.messages import ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, Send

from langchain_sandbox.checkpointing.checkpointer_names import acheckpointer_name
from langchain_sandbox.checkpointing.filed_records import RecordKeys, messages_in
from langchain_sandbox.errors import (
    CheckpointerUnavailableError,
    InvalidInputError,
    MissingDependencyError,
    SnapshotNotFoundError,
)
from langchain_sandbox.providers import get_provider
from langchain_sandbox.providers.base import Provider, SessionRecord
from langchain_sandbox.snapshots import BlobStore, Snapshotter
from langchain_sandbox.snapshots.manifest import is_digest


@dataclass
class CheckpointReferences:
    """What the checkpoints of every thread point at.

    Attributes:
        snapshot_refs: Snapshot refs named by any checkpoint or its pending writes.
        record_keys: Store keys under which the Deep Agents backend may have filed a record for a
            tool call of a checkpoint's conversation (`langchain_sandbox.checkpointing.filed_records`).
        head_sessions: Session ids named by the latest checkpoint of each thread (its pending
            writes included).
        late_heads: Heads of records whose snapshot was written behind their call (the record
            names an older one): the snapshot named after the head is live too.
        checkpoints: How many checkpoints were read.
    """

    snapshot_refs: set[str] = field(default_factory=set)
    late_heads: set[str] = field(default_factory=set)
    record_keys: set[str] = field(default_factory=set)
    head_sessions: set[str] = field(default_factory=set)
    checkpoints: int = 0

    def add(self, other: CheckpointReferences) -> None:
        """Count the references of another checkpointer too."""
        self.snapshot_refs |= other.snapshot_refs
        self.late_heads |= other.late_heads
        self.record_keys |= other.record_keys
        self.head_sessions |= other.head_sessions
        self.checkpoints += other.checkpoints


async def checkpoint_references(saver: BaseCheckpointSaver[Any]) -> CheckpointReferences:
    """Read every checkpoint of every thread and collect the sandbox records' references.

    A checkpoint's pending writes count as much as its channels: a run paused at
    ``interrupt()`` keeps the results of the calls that finished before it only there, and its
    resume restores them.
    """
    refs = CheckpointReferences()
    latest: dict[str, tuple[str, set[str]]] = {}
    conversations = RecordKeys()
    async for item in saver.alist(None):
        refs.checkpoints += 1
        thread_id = str(item.config["configurable"].get("thread_id", ""))
        channels = item.checkpoint.get("channel_values", {})
        writes = [(channel, value) for _, channel, value in item.pending_writes or ()]
        records: list[Mapping[str, Any]] = []
        for value in (*channels.values(), *(value for _, value in writes)):
            _collect_records(value, records, _MAX_DEPTH)
        refs.snapshot_refs |= {str(r["snapshot"]) for r in records if is_digest(r.get("snapshot"))}
        refs.late_heads |= {str(r["head"]) for r in records if _snapshot_is_late(r)}
        conversations.add(
            thread_id,
            str(item.config["configurable"].get("checkpoint_ns", "")),
            str(item.checkpoint["id"]),
            (item.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            messages_in(channels["messages"]) if "messages" in channels else None,
            [m for channel, value in writes if channel == "messages" for m in messages_in(value)],
        )
        checkpoint_id = str(item.checkpoint["id"])
        if thread_id not in latest or checkpoint_id > latest[thread_id][0]:
            # Which sandbox the thread runs in now: its channel and what is pending, not the
            # records older tool messages carry.
            current: list[Mapping[str, Any]] = []
            for value in (channels.get("sandbox"), *(value for _, value in writes)):
                _collect_records(value, current, _MAX_DEPTH)
            latest[thread_id] = (checkpoint_id, {s for r in current if (s := _session_id(r))})
    refs.head_sessions = {session for _, sessions in latest.values() for session in sessions}
    refs.record_keys = conversations.keys()
    return refs


def _snapshot_is_late(record: Mapping[str, Any]) -> bool:
    """Whether the record's own snapshot is older than its revision, so a snapshot written behind
    its call may exist under its head ([`Snapshotter.find_head`][langchain_sandbox.Snapshotter.find_head])."""
    revision, snapshot_revision = record.get("revision"), record.get("snapshot_revision", 0)
    return (
        isinstance(record.get("head"), str)
        and isinstance(revision, int)
        and isinstance(snapshot_revision, int)
        and snapshot_revision < revision
    )


_MAX_DEPTH = 8
"""How deep `_collect_records` looks into a value (a record sits at most a few levels down:
a ``Command``'s update, a ``ToolMessage``'s artifact, a ``Send``'s payload)."""


def _collect_records(value: Any, found: list[Mapping[str, Any]], depth: int) -> None:
    """Append every sandbox record (a mapping with a ``snapshot`` or ``session`` key) in
    ``value``: a channel's value or a pending write, whatever shape a node gave it."""
    if depth <= 0 or value is None or isinstance(value, str | bytes | int | float):
        return
    if isinstance(value, Mapping):
        if "snapshot" in value or isinstance(value.get("session"), Mapping):
            found.append(value)
        for item in value.values():
            _collect_records(item, found, depth - 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _collect_records(item, found, depth - 1)
    elif isinstance(value, ToolMessage):
        _collect_records(value.artifact, found, depth - 1)
    elif isinstance(value, Command):
        _collect_records(value.update, found, depth - 1)
    elif isinstance(value, Send):
        _collect_records(value.arg, found, depth - 1)


def _session_id(record: Mapping[str, Any]) -> str | None:
    session = record.get("session")
    found = session.get("session_id") if isinstance(session, Mapping) else None
    return str(found) if found else None


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
    checkpointer: BaseCheckpointSaver[Any] | Sequence[BaseCheckpointSaver[Any]] | None = None,
    checkpointer_url: str | Sequence[str] | None = None,
    snapshotter: Snapshotter | None = None,
    dry_run: bool = True,
    grace_seconds: float = 3600.0,
    allow_empty_checkpointer: bool = False,
    forget_checkpointers: Sequence[str] = (),
) -> dict[str, Any]:
    """List (and unless ``dry_run``, destroy) orphaned sandboxes and unreferenced blobs.

    Args:
        providers: Whose sandboxes to look at.
        checkpointer: The checkpointer(s) whose threads are live, as savers.
        checkpointer_url: The same, as ``sqlite:///path`` or ``postgresql://...`` URLs (both may
            be given). Every checkpointer whose checkpoints reference the snapshot store's blobs
            must be among them (the store records their names as runs take snapshots).
        snapshotter: Its store is the one collected; default the local default store.
        dry_run: Only report.
        grace_seconds: Anything younger is kept.
        allow_empty_checkpointer: Accept a checkpointer that does not exist or holds nothing.
        forget_checkpointers: Names to drop from the store's list of checkpointers it serves:
            applications that are gone, with their checkpoints (unless ``dry_run``; a dry run
            only reports as if they were dropped).

    Returns a JSON-safe report: ``sandboxes`` (one entry per sandbox found, with ``orphan`` true,
    false or null for unknown, and ``destroyed``), ``blobs`` (the snapshot store's GC report, or
    null), ``checkpointers`` (the names the store serves, all given) and ``summary`` (lines for a
    person).

    Raises:
        InvalidInputError: A checkpointer does not exist or holds no checkpoint, and
            ``allow_empty_checkpointer`` is false (every blob would look unreferenced); or the
            store serves a checkpointer that was not given, or cannot tell which it serves.
    """
    urls = [checkpointer_url] if isinstance(checkpointer_url, str) else [*(checkpointer_url or ())]
    savers = (
        [checkpointer] if isinstance(checkpointer, BaseCheckpointSaver) else [*(checkpointer or ())]
    )
    async with contextlib.AsyncExitStack() as stack:
        for url in urls:
            opened = open_checkpointer(url, must_exist=not allow_empty_checkpointer)
            savers.append(await stack.enter_async_context(opened))
        return await _collect(
            providers,
            savers,
            snapshotter or Snapshotter(),
            dry_run=dry_run,
            grace_seconds=grace_seconds,
            allow_empty_checkpointer=allow_empty_checkpointer,
            forget_checkpointers=forget_checkpointers,
        )


async def _collect(
    providers: Sequence[str | Provider],
    savers: Sequence[BaseCheckpointSaver[Any]],
    snapshotter: Snapshotter,
    *,
    dry_run: bool,
    grace_seconds: float,
    allow_empty_checkpointer: bool,
    forget_checkpointers: Sequence[str],
) -> dict[str, Any]:
    refs: CheckpointReferences | None = None
    served: list[str] = []
    if savers:
        refs = CheckpointReferences()
        for saver in savers:
            found = await checkpoint_references(saver)
            if found.checkpoints == 0 and not allow_empty_checkpointer:
                raise InvalidInputError(
                    "The checkpointer holds no checkpoint, so every snapshot blob would look "
                    "unreferenced. Check that it is the application's checkpointer, or pass "
                    "--allow-empty-checkpointer (allow_empty_checkpointer=True) if it really is "
                    "empty."
                )
            refs.add(found)
        served = await _check_served(snapshotter.store, savers, forget_checkpointers, dry_run)
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
        records, named = await _filed_records(snapshotter.store, refs.record_keys)
        late = {head: ref for head in refs.late_heads if (ref := await snapshotter.find_head(head))}
        report = await snapshotter.collect_garbage(
            refs.snapshot_refs | named | set(late.values()),
            keep=[*records, *(snapshotter.head_key(head) for head in late)],
            dry_run=dry_run,
            grace_seconds=grace_seconds,
        )
        blobs = {
            "dry_run": report.dry_run,
            "live_refs": report.live_refs,
            "missing_refs": list(report.missing_refs),
            "deleted_blobs": report.deleted_blobs,
            "deleted_bytes": report.deleted_bytes,
            "abandoned_writes": report.abandoned_writes,
            "abandoned_bytes": report.abandoned_bytes,
        }
    return {
        "sandboxes": sandboxes,
        "blobs": blobs,
        "checkpointers": served,
        "summary": _summary(sandboxes, blobs, served, dry_run),
    }


async def _check_served(
    store: BlobStore,
    savers: Sequence[BaseCheckpointSaver[Any]],
    forget: Sequence[str],
    dry_run: bool,
) -> list[str]:
    """The names of the checkpointers the store serves, once each is known to be given (or
    forgotten); refuses otherwise: blobs only an absent checkpointer references look unused."""
    served = await store.checkpointers()
    if served is None:
        raise InvalidInputError(
            f"The snapshot store ({type(store).__name__}) does not record which checkpointers "
            "reference its blobs (BlobStore.checkpointers), so gc cannot tell whether another "
            "application still needs one, and collects nothing. Implement note_checkpointer and "
            "checkpointers in the store, or use LocalDirectoryBlobStore or "
            "LangGraphStoreBlobStore."
        )
    given = {name for saver in savers if (name := await acheckpointer_name(saver)) is not None}
    if not dry_run:
        for name in forget:
            await store.forget_checkpointer(name)
    absent = sorted(served - given - set(forget))
    if absent:
        listed = "".join(f"\n  {name}" for name in absent)
        raise InvalidInputError(
            "The snapshot store also holds snapshots that checkpoints of these checkpointers "
            f"reference, and gc was not given them:{listed}\n"
            "Their blobs would look unused and be deleted. Give gc each of them too "
            "(--checkpointer URL, once per checkpointer; a postgresql:// one with its user and "
            "password; a python: one only from Python, as collect_garbage(checkpointer=[...])). "
            "If one's application and checkpoints are gone for good, pass "
            "--forget-checkpointer NAME (forget_checkpointers=[...]) instead."
        )
    return sorted(served & given)


_RECORD_READS = 64
"""Filed records `_filed_records` reads at once."""


async def _filed_records(store: BlobStore, keys: set[str]) -> tuple[set[str], set[str]]:
    """Which of ``keys`` the store holds (records the Deep Agents backend filed for the
    checkpoints' tool calls), and the snapshot refs those records name."""
    present = sorted(keys - await store.missing(keys))
    named: set[str] = set()
    for start in range(0, len(present), _RECORD_READS):
        chunk = present[start : start + _RECORD_READS]
        for data in await asyncio.gather(*(_read_or_none(store, key) for key in chunk)):
            try:
                record = json.loads(data) if data is not None else None
            except ValueError:
                continue  # not a record after all; kept, but it names nothing
            found: list[Mapping[str, Any]] = []
            _collect_records(record, found, _MAX_DEPTH)
            named |= {str(r["snapshot"]) for r in found if is_digest(r.get("snapshot"))}
    return set(present), named


async def _read_or_none(store: BlobStore, key: str) -> bytes | None:
    try:
        return await store.get(key)
    except SnapshotNotFoundError:  # deleted since it was listed
        return None


def _summary(
    sandboxes: list[dict[str, Any]],
    blobs: dict[str, Any] | None,
    served: list[str],
    dry_run: bool,
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
        if blobs["abandoned_writes"]:
            lines.append(
                f"unfinished writes of killed processes: {'would remove' if dry_run else 'removed'} "
                f"{blobs['abandoned_writes']} ({blobs['abandoned_bytes']} bytes)"
            )
        lines.append(
            f"checkpointers the blob store serves, all given: {', '.join(served)}"
            if served
            else "checkpointers the blob store serves: none recorded"
        )
    return lines


__all__ = ["CheckpointReferences", "checkpoint_references", "collect_garbage", "open_checkpointer"]
