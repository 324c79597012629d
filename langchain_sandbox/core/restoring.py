"""How a record's state comes back into a session, for the rehydration engine: attaching to the
sandbox the record names when it still holds the record's head (`HEAD_VARIABLE`, kept in the
sandbox's interpreter by `mark_head`), restoring the record's snapshot into a session
(`restore_into`), and what the model is told about it. The engine decides which way a call takes;
a failure here becomes a notice or a typed error, never a silent empty sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from langchain_sandbox.core.retries import retry_async
from langchain_sandbox.core.thread import RestoreReportLike, SessionHost, SnapshotterLike
from langchain_sandbox.errors import SandboxError, SnapshotStoreUnavailable
from langchain_sandbox.providers.base import Session
from langchain_sandbox.state import SandboxState

logger = logging.getLogger(__name__)

HEAD_VARIABLE = "_langchain_sandbox_head"
"""Global of the sandbox's Python interpreter holding its head, so a later attach can check it.

In the interpreter, not in a file: attaching is worth it for the memory it keeps, so a sandbox
whose interpreter restarted (variables lost) must not match and is restored from its snapshot
instead. The leading underscore keeps it out of variable snapshots."""


async def attach_matching(host: SessionHost, record: SandboxState) -> Session | None:
    """Reattach to the sandbox the record names, if it outlived its process and still holds
    the record's head; ``None`` otherwise."""
    session_record = record.get("session")
    head = record.get("head")
    provider = await host.provider()
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
    if await read_head(session) == head:
        return session
    # Another step moved this sandbox on: it belongs to another branch now. Leave it to its
    # owner (or to gc) and restore the record's state into a new session instead.
    return None


async def names_other_sandbox(host: SessionHost, record: SandboxState, session: Session) -> bool:
    """Whether the record names a sandbox other than ``session`` that might still hold its
    state, memory included (only providers whose sandboxes outlive a process)."""
    named = (record.get("session") or {}).get("sandbox_id")
    if named is None or named == session.record.get("sandbox_id"):
        return False
    return (await host.provider()).capabilities.attach_across_processes


async def restore_into(
    snapshotter: SnapshotterLike,
    session: Session,
    record: SandboxState,
    notices: list[str],
    *,
    quiet: bool = False,
) -> bool:
    """Restore the record's snapshot into the new ``session``; ``False`` if a restore was
    tried and failed (the session may then hold part of it). ``quiet``: the snapshot is
    the thread's own spilled state, so a complete restore says nothing."""
    ref = record.get("snapshot")
    revision = record.get("revision", 0)
    if not ref:
        notices.append(
            f"This sandbox is new: the state of revision {revision} could not be restored "
            "because no snapshot of it was saved. Files and variables from earlier calls "
            "are gone; recreate what you need."
        )
        return True
    try:
        report = await retry_async(lambda: snapshotter.restore(session, ref))
    except asyncio.CancelledError:
        raise
    except (SnapshotStoreUnavailable, OSError) as exc:
        # Starting empty would supersede the snapshot with the next call's record: fail
        # this call instead, so a later one restores everything once the store is back.
        # (OSError: a store of the application's own, unreachable.)
        cause = exc.__cause__ if isinstance(exc, SnapshotStoreUnavailable) else exc
        raise store_unavailable(cause or exc, revision) from exc
    except SandboxError as exc:
        # Refusing forever would leave the thread unusable; start empty and say so loudly.
        notices.append(
            f"The sandbox could not be restored from its snapshot ({exc}); it starts "
            "empty. Files and variables from earlier calls are gone."
        )
        return False
    if not (quiet and report.complete):
        notices.extend(restored_notices(record, report))
    return True


def store_unavailable(exc: BaseException, revision: int | None = None) -> SnapshotStoreUnavailable:
    """The typed error for a snapshot store that failed with ``exc`` (its type only: a driver's
    message can carry connection details)."""
    what = f"the snapshot of revision {revision}" if revision is not None else "a sandbox record"
    return SnapshotStoreUnavailable(
        f"The snapshot store could not be reached ({type(exc).__name__}) while reading {what}. "
        "Nothing is lost: the checkpoint still names it, and a later call restores it in full "
        "once the store answers; retrying may help."
    )


def restored_notices(record: SandboxState, report: RestoreReportLike) -> list[str]:
    revision = record.get("revision", 0)
    snapshot_revision = record.get("snapshot_revision", revision)
    notices = [f"The sandbox was restored from the snapshot of revision {snapshot_revision}."]
    if snapshot_revision < revision:
        notices.append(
            f"Changes made after revision {snapshot_revision} (up to {revision}) were not "
            "saved and are lost."
        )
    return [*notices, *report.notices]


async def mark_head(session: Session, head: str | None) -> None:
    """Record the head in a sandbox another process may attach to, with a call of its own (on
    providers whose sandboxes outlive their process, when the call could not carry it); ``None``
    clears it, so no attach matches the sandbox."""
    capabilities = session.capabilities
    if not (capabilities.stateful_python and capabilities.attach_across_processes):
        return
    with contextlib.suppress(SandboxError):
        await session.run_code(f"{HEAD_VARIABLE} = {head!r}", timeout=30)


async def read_head(session: Session) -> str | None:
    try:
        result = await session.run_code(HEAD_VARIABLE, timeout=30)
    except SandboxError:
        return None
    if not result.ok or result.value is None:
        return None
    return result.value.strip("'\"")


__all__ = [
    "HEAD_VARIABLE",
    "attach_matching",
    "mark_head",
    "names_other_sandbox",
    "read_head",
    "restore_into",
    "restored_notices",
    "store_unavailable",
]
