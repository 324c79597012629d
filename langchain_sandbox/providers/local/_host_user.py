"""Which host user a sandbox runs as: never host root.

bubblewrap maps the sandbox's uid 1000 to the uid that started it. A host process running as root
(CI, containers, most servers) would therefore run sandboxed code as host uid 0: its files in the
workspace owned by root, root-only kernel files (``/proc/kpageflags``, ``/proc/slabinfo``...)
readable. So a root host gives its sandboxes a dedicated unprivileged host uid and gid,
`SANDBOX_HOST_UID`, through a user namespace made here once per process, that maps the
sandbox's 1000 to it and nothing else (`sandbox_user_namespace`). bubblewrap still does its
setup (mounts, resolving the host paths it binds) as root, then joins that namespace
(``--userns2``) and the sandbox's first command switches to uid 1000 in it (``setpriv``), with no
capabilities left.

The namespace allows no user namespace inside it (``user.max_user_namespaces`` is 0 there), the
guarantee bubblewrap's ``--disable-userns`` gives otherwise. A host that is not root needs none
of this: bubblewrap then maps 1000 to that unprivileged user itself.
"""

from __future__ import annotations

import functools
import os
import pwd
import subprocess
import sys
import threading

from langchain_sandbox.errors import IsolationUnavailableError
from langchain_sandbox.providers.names import LOCAL

SANDBOX_HOST_UID = 1_879_048_191
"""Host uid (and gid) of every sandbox of a root host: the last uid of the range systemd leaves
to container uid mappings (``524288``-``1879048191``, see systemd's "Users, Groups, UIDs and GIDs
on systemd Systems"), far above any account's, and one that no user is named for here (checked)."""

SANDBOX_HOST_GID = SANDBOX_HOST_UID

_NAMESPACE_LOCK = threading.Lock()

SETPRIV = "/usr/bin/setpriv"
"""util-linux's ``setpriv``: the sandbox's first command becomes uid 1000 through it."""

# The holder: unshares a user namespace, forbids namespaces inside it, then waits until the host
# has written its uid and gid maps and opened it. It never execs after unsharing, since an exec
# as an unmapped uid would drop the capabilities the sysctl write needs.
_HOLDER = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.unshare(0x10000000) != 0:\n"
    "    sys.exit('unshare(CLONE_NEWUSER) failed: errno %d' % ctypes.get_errno())\n"
    "with open('/proc/sys/user/max_user_namespaces', 'w') as sysctl:\n"
    "    sysctl.write('0')\n"
    "sys.stdout.write('ready\\n')\n"
    "sys.stdout.flush()\n"
    "sys.stdin.read()\n"
)


def drops_root() -> bool:
    """Whether sandboxes of this process run as `SANDBOX_HOST_UID` (the host is root)."""
    return os.geteuid() == 0


def host_owner() -> tuple[int, int] | None:
    """``(uid, gid)`` that files the host writes into a workspace must get so the sandbox owns
    them, or ``None`` when the sandbox is the host's own user anyway."""
    return (SANDBOX_HOST_UID, SANDBOX_HOST_GID) if drops_root() else None


def sandbox_user_namespace() -> int:
    """A descriptor of this process's sandbox user namespace (made on first use, kept open).

    Raises:
        IsolationUnavailableError: it cannot be made here (the message says why).
    """
    # Sessions are created from several threads at once; each would make a namespace of its own.
    with _NAMESPACE_LOCK:
        return _made_namespace()


@functools.cache
def _made_namespace() -> int:
    try:
        pwd.getpwuid(SANDBOX_HOST_UID)
    except KeyError:
        pass
    else:
        raise _unavailable(f"host uid {SANDBOX_HOST_UID} belongs to a user of this machine")
    if not os.access(SETPRIV, os.X_OK):
        raise _unavailable(f"{SETPRIV} is missing (Debian/Ubuntu: apt-get install util-linux)")
    holder = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": os.defpath},
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        if holder.stdout.readline() != b"ready\n":
            _, error = holder.communicate(timeout=30)
            raise _unavailable(error.decode(errors="replace").strip() or "the holder failed")
        for name, host_id in (("uid_map", SANDBOX_HOST_UID), ("gid_map", SANDBOX_HOST_GID)):
            with open(f"/proc/{holder.pid}/{name}", "w", encoding="ascii") as mapping:
                mapping.write(f"1000 {host_id} 1\n")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise _unavailable(str(exc)) from exc
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
        if holder.stderr is not None:
            holder.stderr.close()


def _unavailable(reason: str) -> IsolationUnavailableError:
    return IsolationUnavailableError(
        f"The sandbox cannot be given an unprivileged host user ({reason}), and this process is "
        "root: sandboxed code would run as host root. Run the application as another user, or "
        "fix the cause.",
        provider=LOCAL,
    )


__all__ = [
    "SANDBOX_HOST_GID",
    "SANDBOX_HOST_UID",
    "SETPRIV",
    "drops_root",
    "host_owner",
    "sandbox_user_namespace",
]
