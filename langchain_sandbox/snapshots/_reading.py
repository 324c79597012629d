"""How a capture reads the files it must: the contents that came with the session's change
listing first, then the rest in batches of bounded size (so the next batch is read while this one
is hashed and stored), a file that cannot be read named with the reason instead of failing the
capture, and hashes computed in threads, one group per CPU, once a batch is large enough.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.base import FileInfo, Session
from langchain_sandbox.snapshots._knowledge import RACY_WINDOW_NS, batches, racy_window
from langchain_sandbox.snapshots.store import digest

_HASH_IN_THREAD_BYTES = 1024 * 1024
# Files per read during a capture: many small files are read in batches this size, so reading
# the next batch overlaps hashing and storing this one.
_READ_BATCH_FILES = 1000


async def wait_out_racy_window(to_read: Sequence[FileInfo], listed_at_ns: int) -> int:
    """Sleep until the files about to be read are older than the racy window (never longer than
    `RACY_WINDOW_NS`, whatever the sandbox's clock says; with coarse timestamps, not at
    all: those files are read again next time instead); return the horizon of the reads."""
    if to_read and racy_window(info.mtime_ns for info in to_read) == RACY_WINDOW_NS:
        newest = max(info.mtime_ns for info in to_read)
        wait_ns = min(newest + RACY_WINDOW_NS - time.time_ns(), RACY_WINDOW_NS)
        if wait_ns > 0:
            await asyncio.sleep(wait_ns / 1e9)
    return max(time.time_ns(), listed_at_ns)


async def read_contents(
    session: Session,
    bundled: dict[str, bytes],
    rest: Sequence[FileInfo],
    batch_bytes: int,
    omitted: dict[str, str],
) -> AsyncIterator[dict[str, bytes]]:
    """The contents to capture, in batches: those that came with the listing, then ``rest``
    read in batches of at most ``batch_bytes`` (a file that cannot be read goes to ``omitted``)."""
    if bundled:
        yield bundled
    for batch in batches(rest, lambda info: info.size, batch_bytes, _READ_BATCH_FILES):
        yield await _read_batch(session, [info.path for info in batch], omitted)


async def _read_batch(
    session: Session, paths: list[str], omitted: dict[str, str]
) -> dict[str, bytes]:
    """Read ``paths``; a file that vanished or cannot be read is noted in ``omitted``."""
    try:
        return await session.read_files(paths)
    except InvalidInputError:
        if len(paths) == 1:
            omitted[paths[0]] = await _unreadable(session, paths[0])
            return {}
    contents: dict[str, bytes] = {}
    for path in paths:
        contents.update(await _read_batch(session, [path], omitted))
    return contents


async def _unreadable(session: Session, path: str) -> str:
    """Why a listed file could not be read, as far as the session can tell: whether it is still
    there (a FIFO, socket or device some providers list as a file, or no permission) or gone."""
    parent = path.rpartition("/")[0] or "."
    try:
        still_there = any(info.path == path for info in await session.list_files(parent))
    except InvalidInputError:
        still_there = False
    if still_there:
        return "could not be read: not a regular file (a FIFO, socket or device) or not readable"
    return "vanished during the capture"


async def digest_all(contents: Mapping[str, bytes]) -> dict[str, str]:
    """sha256 of each value. Large batches are hashed in threads, one group per CPU (hashlib
    releases the GIL), so hashing uses every core and never blocks the event loop."""
    if sum(len(data) for data in contents.values()) < _HASH_IN_THREAD_BYTES:
        return {name: digest(data) for name, data in contents.items()}
    groups: list[list[str]] = [[] for _ in range(os.cpu_count() or 1)]
    loads = [0] * len(groups)
    for name in sorted(contents, key=lambda n: len(contents[n]), reverse=True):
        lightest = loads.index(min(loads))
        groups[lightest].append(name)
        loads[lightest] += len(contents[name])
    results = await asyncio.gather(
        *(
            asyncio.to_thread(lambda names: {n: digest(contents[n]) for n in names}, group)
            for group in groups
            if group
        )
    )
    return {name: value for result in results for name, value in result.items()}
