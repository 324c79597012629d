"""gVisor lets a container connect to host unix sockets only with ``--host-uds=open``: a session
with a network policy needs it for its egress proxy's socket, so its worker's container gets it
(pip's container already does, for its index proxy). What that opens is exactly the host sockets
the container sees through its binds. This test walks the file system a policy session's worker
sees, for real, and finds the proxy's socket and nothing else of the host's; a host socket bound
in by mistake would show up here. The host's system directories (``/usr``, ``/lib``...: read-only
binds every sandbox has, where programs install no sockets) are left out of the walk, which would
take a minute under gVisor otherwise. (The flag's own layer test, ``no-host-sockets`` in
``test_gvisor_layers``, covers containers without a policy.)"""

from __future__ import annotations

import pytest

from langchain_sandbox import Limits, NetworkPolicy, SessionSpec
from langchain_sandbox.providers.local import LocalProvider
from langchain_sandbox.providers.local._egress_sandbox import EGRESS_SOCKET

# A directory listing says each entry's type: only an entry that is no directory, regular file
# or symlink needs an lstat to tell a socket from a FIFO or a device. (An lstat of every entry
# tripled the walk's time under gVisor, where each one is a round trip to its file proxy.)
_SOCKETS = """
import os, stat
SKIPPED = ("proc", "sys", "dev", "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
found = []
def walk(top):
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        if top == "/" and entry.name in SKIPPED:
            continue
        if entry.is_dir(follow_symlinks=False):
            walk(entry.path)
        elif not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
            try:
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    found.append(entry.path)
            except OSError:
                pass
walk("/")
print(sorted(found))
"""


@pytest.mark.parametrize("isolation", ["gvisor"], indirect=True)
async def test_a_policy_worker_sees_no_host_socket_but_its_proxys(
    provider: LocalProvider,
) -> None:
    spec = SessionSpec(network=NetworkPolicy(allow=["api.test"]), limits=Limits(timeout=300))
    async with await provider.create(spec) as session:
        seen = await session.run_code(_SOCKETS)
    assert seen.ok, seen.render()
    # The channel holds the control FIFO only; the relay listens on TCP, not on a socket file.
    assert seen.stdout.strip() == repr([EGRESS_SOCKET]), seen.stdout
