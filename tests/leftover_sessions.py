"""Local sessions left behind by processes the tests kill on purpose (the durable workers, a
docs page's program), reaped after each test the way ``langchain-sandbox gc`` reaps them.

A process that dies without closing its sessions leaves their workspace and port file systems
mounted on the host. Every bubblewrap sandbox starts from a copy of the host's mount table, so
each leftover makes every later sandbox's start cost more: with the 240 mounts three whole runs
had left, a bubblewrap session took 81 ms of CPU instead of 51 ms. The leftovers are found by
their mounts under the directories a pytest worker owns (its ``LANGCHAIN_SANDBOX_HOME``, its
temporary directories), and destroyed by the local provider itself, only when its record names
a process that is gone (``state.orphaned``). Never elsewhere: another worker's test may be
looking at an orphan it made on purpose (the ``gc`` tests do).
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


def orphaned_sessions(*roots: Path) -> dict[Path, set[str]]:
    """``{base directory: session ids}`` of the sessions mounted under ``roots`` whose process
    is gone."""
    found: dict[Path, set[str]] = {}
    for point in _mount_points():
        session = point.parent
        in_a_session = point.name in _SESSION_MOUNTS and session.parent.name == "sessions"
        in_roots = any(point.is_relative_to(root) for root in roots)
        if in_a_session and in_roots and _owner_is_gone(session):
            found.setdefault(session.parent.parent, set()).add(session.name)
    return found


async def _reap(base: Path, session_ids: set[str]) -> None:
    provider = LocalProvider(base_dir=base)
    for record in await provider.list_sessions():
        if record["session_id"] in session_ids and record["state"]["orphaned"]:
            await provider.destroy(record)


def reap_orphaned_sessions(*roots: Path) -> None:
    """Destroy the local sessions mounted under ``roots`` whose process is gone (see the
    module docstring)."""
    for base, session_ids in orphaned_sessions(*roots).items():
        asyncio.run(_reap(base, session_ids))
