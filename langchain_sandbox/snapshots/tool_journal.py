"""The journal of tools called from sandboxed code: each inner call's result, kept so a replayed
outer call does not run it again.

An outer ``sandbox_exec`` call that crashed (or was resumed in another process) runs its code
again from the step's checkpoint. Its inner calls then come in the same order, so the *n*-th
call of outer call ``tool_call_id`` in thread ``thread_id`` is the same call: its result is
looked up here before the tool runs, and recorded here the moment the tool returns.

Entries live in the snapshot store beside the snapshots (any [`BlobStore`][langchain_sandbox.BlobStore],
so a Postgres-backed store shares them between workers), under a key derived from
``(thread_id, tool_call_id, seq)`` the way named heads are (a sha256 of a tagged name, never
a path). An entry holds the tool's name, a digest of its arguments (a replay whose call differs
runs for real) and the JSON of its output or error message: what the code saw, which the
sandbox saw anyway; never the arguments themselves nor anything of the host. ``gc`` treats
entries like any unreferenced blob: they are kept for its grace period (an hour by default),
longer than any replay of the call needs them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from langchain_sandbox.errors import SnapshotNotFoundError
from langchain_sandbox.snapshots.store import BlobStore, digest

_FORMAT = 1


@dataclass(frozen=True)
class JournalEntry:
    """One recorded inner call: its output (``ok``) or its error message."""

    ok: bool
    value: Any = None
    error: str = ""


def arguments_digest(name: str, args: dict[str, Any]) -> str:
    """What identifies a call's arguments in its entry (a replay must make the same call)."""
    text = json.dumps([name, args], sort_keys=True, separators=(",", ":"), default=repr)
    return digest(text.encode("utf-8", "surrogatepass"))


class ToolJournal:
    """The entries of one outer call (``thread_id``, ``tool_call_id``) in ``store``."""

    def __init__(self, store: BlobStore, thread_id: str, tool_call_id: str) -> None:
        self._store = store
        self._scope = json.dumps([thread_id, tool_call_id])

    def _key(self, seq: int) -> str:
        name = f"{self._scope}\0{seq}".encode("utf-8", "surrogateescape")
        return digest(b"langchain-sandbox tool call\0" + name)

    async def find(self, seq: int, call: str) -> JournalEntry | None:
        """The entry of inner call ``seq`` if it recorded the same ``call`` (an
        `arguments_digest`); ``None`` when there is none or it is unreadable."""
        try:
            data = json.loads(await self._store.get(self._key(seq)))
        except (SnapshotNotFoundError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("v") != _FORMAT or data.get("call") != call:
            return None
        return JournalEntry(bool(data.get("ok")), data.get("value"), str(data.get("error", "")))

    async def record(self, seq: int, call: str, entry: JournalEntry) -> None:
        """Record inner call ``seq``'s result, replacing an entry of another call."""
        body = {"v": _FORMAT, "call": call, "ok": entry.ok}
        body.update({"value": entry.value} if entry.ok else {"error": entry.error})
        # replace, not put: a put of a key the store holds is a no-op, and a replay that made
        # another call at this position must not find the old one next time.
        await self._store.replace(self._key(seq), json.dumps(body).encode("utf-8"))


__all__ = ["JournalEntry", "ToolJournal", "arguments_digest"]
