"""Local sessions left behind by processes the tests kill on purpose (the durable workers, a
docs page's program), reaped after each test the way ``langchain-sandbox gc`` reaps them.

A process that dies without closing its sessions leaves their workspace and port file systems
mounted on the host. Every bubblewrap sandbox starts from a copy of the host's mount table, so
each leftover makes every later sandbox's start cost more: with the 240 mounts three whole runs
had left, a bubblewrap session took 81 ms of CPU instead of 51 ms. The leftovers are found by
their mounts, wherever their base directory is (a worker's ``LANGCHAIN_SANDBOX_HOME``, an
emulator's machines), and destroyed by the local provider itself, only when its record names a
process that is gone (``state.orphaned``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

from langchain_sandbox.providers.local import LocalProvider

_ESCAPED = re.compile(r"\\([0-7]{3})")
_SESSION_MOUNTS = ("workspace", "ports")


def _mount_points() -> list[Path]:
    """This process's mount points (``/proc/self/mountinfo``'s fifth field, unescaped)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        fields = [line.split(" ", 5) for line in mountinfo]
    return [Path(_ESCAPED.sub(lambda m: chr(int(m[1], 8)), f[4])) for f in fields if len(f) > 4]


def _owner_is_gone(session: Path) -> bool:
    try:
        record = json.loads((session / "session.json").read_text(encoding="utf-8"))
        owner = int(record["state"]["owner_pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return True  # no record: what a process that died half-way through a close leaves
    return not os.path.exists(f"/proc/{owner}")


def orphaned_sessions() -> dict[Path, set[str]]:
    """``{base directory: session ids}`` of the mounted sessions whose process is gone."""
    found: dict[Path, set[str]] = {}
    for point in _mount_points():
        session = point.parent
        in_a_session = point.name in _SESSION_MOUNTS and session.parent.name == "sessions"
        if in_a_session and _owner_is_gone(session):
            found.setdefault(session.parent.parent, set()).add(session.name)
    return found


async def _reap(base: Path, session_ids: set[str]) -> None:
    provider = LocalProvider(base_dir=base)
    for record in await provider.list_sessions():
        if record["session_id"] in session_ids and record["state"]["orphaned"]:
            await provider.destroy(record)


def reap_orphaned_sessions() -> None:
    """Destroy every mounted local session whose process is gone (see the module docstring)."""
    for base, session_ids in orphaned_sessions().items():
        asyncio.run(_reap(base, session_ids))
