"""The workspace quota of a local session (``Limits.workspace_bytes``), enforced from the host.

The workspace is a plain host directory, and an unprivileged host cannot give it a size-limited
mount, so the quota is enforced by measuring it (`HostWorkspace.usage`: disk blocks, a
sparse file at its apparent size):

* while code or a command runs, every second or so (less often when measuring is slow): once the
  workspace is over the quota *and* larger than when last measured before the call, the call is
  stopped by killing its worker, so deleting files while over the quota is still allowed;
* after calls, once their run time adds up to a tenth of a second (every call that long, quick ones
  in groups: a warm round trip stays a fraction of a millisecond), so a result can say the
  workspace is over the quota;
* before ``write_files``, which refuses what would not fit.

What a call can write between two measurements (about a second of disk bandwidth) is the margin
by which the quota can be overshot. A file unlinked while open (``O_TMPFILE`` among them) is no
longer in the tree, so each measurement adds the files the session's processes hold open that
have no name left on the workspace's device (`unlinked_open_bytes`, through
``/proc/<pid>/fd`` of the session's cgroup members: without cgroups it sees none). ``/tmp`` is a
size-capped tmpfs (``Limits.tmp_bytes``) and needs none of this.

Where the host is root, the workspace is also a file system of the quota's size
(`_workspace_fs`), and the kernel refuses writes past it;
the measurement then only words the notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.local._files import HostWorkspace

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""Shortest interval between two measurements of the workspace while a call runs."""

MEASURE_AFTER_SECONDS = 0.1
"""Run time of calls after which the workspace is measured again (every call that long or longer;
quick calls once they add up to it). It bounds what quick calls can write unmeasured."""

# Measuring may take at most this share of the time between two measurements.
_MEASURE_SHARE = 10


class WorkspaceQuota:
    """Measures one session's workspace against its quota (``None``: no quota)."""

    def __init__(
        self,
        files: HostWorkspace,
        limit: int | None,
        *,
        held: Callable[[], Iterable[int]] = tuple,
    ) -> None:
        """``held()`` names the host pids of the session's processes, whose unlinked open files
        count too."""
        self._files = files
        self.limit = limit
        self._held = held
        self._usage: int | None = None
        self._unmeasured = 0.0  # run time of the calls since the last measurement

    async def measure(self) -> int | None:
        """The workspace's current size (``None`` if it could not be measured just now: sandboxed
        code moved a directory while it was walked)."""
        try:
            self._usage = await asyncio.to_thread(self._measure)
        except OSError as exc:
            logger.debug("workspace not measured: %s", exc)
            self._usage = None
        return self._usage

    def _measure(self) -> int:
        device = os.stat(self._files.root).st_dev
        return self._files.usage() + unlinked_open_bytes(self._held(), device)

    def forget(self) -> None:
        """The workspace changed from the host (files removed): measure it again next time."""
        self._usage = None

    async def _known_usage(self) -> int | None:
        return self._usage if self._usage is not None else await self.measure()

    async def check_write(self, incoming: int) -> None:
        """Refuse a host-side write of ``incoming`` bytes that would not fit."""
        if self.limit is None:
            return
        usage = await self._known_usage()
        if usage is not None and usage + incoming > self.limit:
            usage = await self.measure()  # the last measurement may predate a quick cleanup
        if usage is not None and usage + incoming > self.limit:
            raise InvalidInputError(
                f"Writing {incoming} bytes would take the workspace to {usage + incoming} bytes, "
                f"over its quota of {self.limit} (Limits.workspace_bytes). Delete files first."
            )
        if self._usage is not None:
            self._usage += incoming

    @contextlib.asynccontextmanager
    async def guard(self, stop: Callable[[str], Awaitable[None]]) -> AsyncIterator[None]:
        """Around one call: ``stop(reason)`` is awaited if the call grows the workspace past the
        quota. Calls are measured afterwards once they add up to `MEASURE_AFTER_SECONDS`
        of run time, so a stream of quick calls costs one measurement per that much work."""
        if self.limit is None:
            yield
            return
        started = time.monotonic()
        watchers: list[asyncio.Future[None]] = []
        handle = asyncio.get_running_loop().call_later(
            POLL_SECONDS, lambda: watchers.append(asyncio.ensure_future(self._watch(stop)))
        )
        try:
            yield
        finally:
            handle.cancel()
            for watcher in watchers:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            self._unmeasured += time.monotonic() - started
            if self._usage is None or self._unmeasured >= MEASURE_AFTER_SECONDS:
                self._unmeasured = 0.0
                await self.measure()

    async def _watch(self, stop: Callable[[str], Awaitable[None]]) -> None:
        assert self.limit is not None
        baseline = self._usage if self._usage is not None else self.limit
        interval = 0.0
        while True:
            await asyncio.sleep(interval)
            started = time.monotonic()
            usage = await self.measure()
            interval = max(POLL_SECONDS, _MEASURE_SHARE * (time.monotonic() - started))
            if usage is not None and usage > self.limit and usage > baseline:
                await stop(
                    f"the workspace grew to {usage} bytes, past its quota of {self.limit} "
                    "(Limits.workspace_bytes), so the call was stopped"
                )
                return

    def notice(self) -> str | None:
        """What the result of a call says when the workspace is over the quota after it."""
        if self.limit is None or self._usage is None or self._usage <= self.limit:
            return None
        return (
            f"the workspace holds {self._usage} bytes, over its quota of {self.limit} "
            "(Limits.workspace_bytes): a call that writes more is stopped; delete files"
        )


def unlinked_open_bytes(pids: Iterable[int], device: int) -> int:
    """Bytes of the files on ``device`` that processes ``pids`` hold open and that have no name
    left (each file once, however many descriptors name it). A process that ends meanwhile, or
    whose descriptors cannot be read, counts nothing."""
    seen: dict[tuple[int, int], int] = {}
    for pid in pids:
        directory = f"/proc/{pid}/fd"
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            try:
                info = os.stat(f"{directory}/{name}")
            except OSError:
                continue
            if info.st_dev == device and info.st_nlink == 0:
                seen[info.st_dev, info.st_ino] = max(info.st_size, info.st_blocks * 512)
    return sum(seen.values())


__all__ = ["MEASURE_AFTER_SECONDS", "POLL_SECONDS", "WorkspaceQuota", "unlinked_open_bytes"]
