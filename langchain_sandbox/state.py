"""The sandbox's record in graph state, and how parallel updates to it merge.

Live handles never enter graph state; this small JSON record does. Any checkpointer stores it with
every step, so resuming, forking or time-travelling to a checkpoint gives back the record of that
checkpoint, and the runtime rehydrates the sandbox to match it (see `langchain_sandbox.runtime`).

This module is plain Python (no LangGraph import) so that the runtime below the graph layer can
produce records; ``langchain_sandbox.graph`` declares the channel with [`merge_sandbox_state`][langchain_sandbox.merge_sandbox_state]
as its reducer.
"""

from __future__ import annotations

import logging
from typing import TypedDict

from langchain_sandbox.core.services import ServicesRecord
from langchain_sandbox.providers.base import SessionRecord

logger = logging.getLogger(__name__)


class SandboxState(TypedDict, total=False):
    """The ``sandbox`` channel of a graph's state. JSON values only; never a secret.

    Attributes:
        session: The provider's record of the live sandbox (provider, ids, tags).
        revision: How many sandbox-changing calls this thread has made. Assigned under the
            thread's lock, so it is absolute and totally ordered within a thread.
        head: Opaque token naming the sandbox state at ``revision`` (changes with every
            sandbox-changing call; a live session whose head differs from the record's is stale).
        snapshot: Reference of the workspace snapshot taken at ``snapshot_revision``, or ``None``.
        snapshot_revision: The revision ``snapshot`` captures.
        exec_count: Number of executions; sent as a *delta* in updates, summed by the reducer.
        services: The processes to start again and the ports to expose again after a restore
            (`langchain_sandbox.core.services`); absent when there are none.
    """

    session: SessionRecord | None
    revision: int
    head: str | None
    snapshot: str | None
    snapshot_revision: int
    exec_count: int
    services: ServicesRecord


def merge_sandbox_state(left: SandboxState | None, right: SandboxState | None) -> SandboxState:
    """Reducer of the ``sandbox`` channel.

    Parallel tool calls of one step each return an update; calls of one thread are serialized by
    the runtime's lock, so the update with the highest ``revision`` saw every other one and wins.
    ``exec_count`` is a delta and is summed. ``services`` is part of the position like
    ``head``: a winning record without it has none (the last service was stopped), so it does
    not keep the loser's.
    """
    if not left:
        return dict(right or {})  # type: ignore[return-value]
    if not right:
        return dict(left)  # type: ignore[return-value]
    merged: SandboxState = dict(left)  # type: ignore[assignment]
    if _diverged(left, right):
        # Two sandbox states claim one revision: two workers ran the thread at once, or calls
        # of one step did not see each other. The later update wins; the other's work is not in
        # the merged record, and that must not go unnoticed.
        logger.warning(
            "two sandbox records claim revision %s with different heads (%s, %s); the record "
            "keeps the second and the first one's sandbox changes are not in it",
            right.get("revision", 0), left.get("head"), right.get("head"),
        )  # fmt: skip
    if right.get("revision", 0) >= left.get("revision", 0):
        merged.update({k: v for k, v in right.items() if k != "exec_count"})  # type: ignore[typeddict-item]
        if "revision" in right and "services" not in right:
            merged.pop("services", None)
    merged["exec_count"] = left.get("exec_count", 0) + right.get("exec_count", 0)
    return merged


def _diverged(left: SandboxState, right: SandboxState) -> bool:
    heads = left.get("head"), right.get("head")
    return (
        left.get("revision", 0) == right.get("revision", 0)
        and None not in heads
        and heads[0] != heads[1]
    )


__all__ = ["SandboxState", "merge_sandbox_state"]
