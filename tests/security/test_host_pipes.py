"""Class 4: host pipes the sandbox can reach must never fill up and hang the host.

bubblewrap's own stderr is a host pipe, reachable from inside as ``/proc/1/fd/2``. Filling it once
made every later kill and ``close()`` wait forever.
"""

from __future__ import annotations

import asyncio
import os

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider

# A hang detector, not a timing assertion: a call that returns at all returns long before this.
_HANG = 120.0

_FLOOD = """
import os
written = 0
for path in ("/proc/1/fd/0", "/proc/1/fd/1", "/proc/1/fd/2"):
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        continue
    for _ in range(64):
        written += os.write(fd, b"x" * 65536)
    os.close(fd)
written
"""

_STUBBORN = """
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
"""


async def test_flooding_bubblewraps_stderr_neither_blocks_nor_hangs_kill_and_close(
    provider: LocalProvider,
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=20.0)))
    try:
        flood = await asyncio.wait_for(session.run_code(_FLOOD), _HANG)
        assert not flood.timed_out, flood.stderr
        assert flood.error is None, flood.error
        assert flood.value is not None
        if os.geteuid() == 0 and session.launcher.isolation == "bubblewrap":
            # The sandbox is not host root, and bubblewrap's init is: its descriptors are out of
            # reach (test_host_root), so nothing was written. (Under gVisor pid 1 is the worker
            # itself, inside gVisor's kernel: its stderr is flooded, and read by the host.)
            assert flood.value == "0"
        else:
            # 4 MB went into bubblewrap's stderr: far past a pipe's buffer, so the host read it.
            assert int(flood.value) >= 64 * 65536

        # A call that ignores the interrupt must be killed, and the kill must return.
        stuck = await asyncio.wait_for(session.run_code(_STUBBORN, timeout=1.0), _HANG)
        assert stuck.timed_out
        again = await asyncio.wait_for(session.run_code("1 + 1"), _HANG)
        assert again.value == "2"
        await asyncio.wait_for(session.run_code(_FLOOD), _HANG)
    finally:
        await asyncio.wait_for(session.close(), _HANG)
    assert not await session.is_alive()


_STEAL_EVERY_PIPE = """
import os, signal, stat, threading
signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt that does get through changes nothing
def steal(fd):
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return
for name in os.listdir("/proc/self/fd"):
    try:
        if not stat.S_ISFIFO(os.stat(f"/proc/self/fd/{name}").st_mode):
            continue
        fd = os.open(f"/proc/self/fd/{name}", os.O_RDONLY)
    except OSError:
        continue
    threading.Thread(target=steal, args=(fd,), daemon=True).start()
while True:
    pass
"""


async def test_stealing_the_workers_pipes_cannot_stall_a_timeout(provider: LocalProvider) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=20.0)))
    try:
        # Every pipe of the worker is read from inside, replies and interrupts included: the
        # host hears nothing, so only its own deadline can end the call.
        stolen = await asyncio.wait_for(session.run_code(_STEAL_EVERY_PIPE, timeout=1.0), _HANG)
        assert stolen.timed_out
        assert any("killed" in notice for notice in stolen.notices), stolen.notices
        again = await asyncio.wait_for(session.run_code("'fresh'"), _HANG)
        assert again.value == "'fresh'"
    finally:
        await asyncio.wait_for(session.close(), _HANG)
