"""What isolation the local provider can give on this machine (for ``langchain-sandbox doctor``).

`probe_isolation` really starts a tiny bubblewrap sandbox with the namespaces and capability
drop the provider uses, so "usable" means usable, not merely "installed", and it reports which
mechanism enforces each limit.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from langchain_sandbox.errors import IsolationUnavailableError
from langchain_sandbox.providers.local import _workspace_fs as workspace_fs
from langchain_sandbox.providers.local._bubblewrap import find_bubblewrap, system_mounts
from langchain_sandbox.providers.local._cgroups import detect_cgroups
from langchain_sandbox.providers.local._gvisor import usable_runsc
from langchain_sandbox.providers.local._host_user import (
    SANDBOX_HOST_UID,
    drops_root,
    sandbox_user_namespace,
)
from langchain_sandbox.providers.local._seccomp import seccomp_program


@dataclass(frozen=True)
class IsolationReport:
    """What the local provider can enforce here.

    Attributes:
        bubblewrap: Path of the bubblewrap binary, or ``None`` when it is missing.
        bubblewrap_usable: A sandbox with user, pid, net, ipc and uts namespaces, and no nested
            user namespaces, started.
        network_isolation: Sandboxes get no network unless a session asks for it.
        syscall_filter: The seccomp filter can be built here (libseccomp and pyseccomp found).
        memory_limit: How memory is limited: ``"cgroup v1"``, ``"cgroup v2"`` or
            ``"rlimit (RLIMIT_AS)"``.
        process_limit: How processes are limited: ``"cgroup v1"``, ``"cgroup v2"``, or
            ``"rlimit (RLIMIT_NPROC)"`` (with ``", not enforced: host user is root"`` when so).
        sandbox_user: Which host user sandboxed code runs as: the host's own, or (a root
            host) the dedicated unprivileged uid; with a problem if that cannot be set up.
        workspace_quota: How ``Limits.workspace_bytes`` and ``workspace_files`` are enforced:
            by the kernel (each workspace a file system of its own), or only measured from the
            host, and why.
        problems: Why something is missing and how to fix it.
    """

    bubblewrap: str | None
    bubblewrap_usable: bool
    network_isolation: bool
    syscall_filter: bool
    memory_limit: str
    process_limit: str
    sandbox_user: str = ""
    workspace_quota: str = ""
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Isolation works and every limit is enforced."""
        return self.bubblewrap_usable and not self.problems


def probe_isolation(bwrap: str | None = None) -> IsolationReport:
    """Check bubblewrap and cgroups on this machine (takes a few milliseconds)."""
    problems: list[str] = []
    path: str | None = None
    usable = False
    try:
        path = find_bubblewrap(bwrap)
    except IsolationUnavailableError as exc:
        problems.append(str(exc))
    if path is not None:
        usable, problem = _try_bubblewrap(path)
        if problem:
            problems.append(problem)
    syscall_filter = True
    try:
        seccomp_program()
    except IsolationUnavailableError as exc:
        syscall_filter = False
        problems.append(str(exc))
    support = detect_cgroups()
    memory = f"cgroup v{support.memory_version}" if support.memory else "rlimit (RLIMIT_AS)"
    processes = f"cgroup v{support.pids_version}" if support.pids else "rlimit (RLIMIT_NPROC)"
    if not support.pids and os.geteuid() == 0:
        processes += ", not enforced: host user is root"
        problems.append(
            "No pids cgroup can be created and RLIMIT_NPROC does not bind root, so a fork bomb is "
            "not contained. Run where child cgroups with the pids controller can be created "
            "(cgroup v1, or a cgroup v2 subtree delegated to this user)."
        )
    elif support.reason:
        problems.append(f"cgroups: {support.reason}; rlimits are used instead.")
    sandbox_user = f"host uid {os.geteuid()} (this process's own user)"
    if drops_root():
        try:
            sandbox_user_namespace()
            sandbox_user = f"host uid {SANDBOX_HOST_UID} (this process is root; never uid 0)"
        except IsolationUnavailableError as exc:
            sandbox_user = "unavailable: sessions refuse to start"
            problems.append(str(exc))
    no_filesystem = workspace_fs.unavailable_reason()
    if no_filesystem is None:
        quota = "file system (a loop-mounted ext4 image per session: the kernel enforces it)"
    else:
        held = "counted" if support.pids or support.memory else "not counted (no cgroups)"
        quota = (
            f"measured from the host ({no_filesystem}); unlinked open files {held}; "
            "workspace_files not enforced"
        )
    return IsolationReport(
        bubblewrap=path,
        bubblewrap_usable=usable,
        network_isolation=usable,
        syscall_filter=syscall_filter,
        memory_limit=memory,
        process_limit=processes,
        sandbox_user=sandbox_user,
        workspace_quota=quota,
        problems=tuple(problems),
    )


def usable_bubblewrap(bwrap: str | None = None) -> str:
    """The bubblewrap binary, checked to really start a sandbox here; else raise saying how to
    get isolation. The check runs once per binary and process (a few milliseconds).

    Raises:
        IsolationUnavailableError: bubblewrap is missing, or cannot create the namespaces.
    """
    path = find_bubblewrap(bwrap)
    usable, problem = _try_bubblewrap(path)
    if not usable:
        raise IsolationUnavailableError(problem, provider="local")
    return path


def isolation_levels(bwrap: str | None = None, runsc: str | None = None) -> dict[str, str]:
    """For each isolation level a session can ask for (``LocalProvider(isolation=...)``), why it
    is not available here, or ``""`` when it is. The same checks ``LocalProvider`` makes before
    it takes the level, so "available" means a sandbox of that level really started (gVisor's
    check starts a container: a fraction of a second, once per process)."""
    checks: dict[str, Callable[[str | None], str]] = {
        "bubblewrap": usable_bubblewrap,
        "gvisor": usable_runsc,
    }
    levels: dict[str, str] = {}
    for name, binary in (("bubblewrap", bwrap), ("gvisor", runsc)):
        try:
            checks[name](binary)
            levels[name] = ""
        except IsolationUnavailableError as exc:
            levels[name] = str(exc)
    return levels


@functools.lru_cache(maxsize=16)
def _try_bubblewrap(bwrap: str) -> tuple[bool, str]:
    argv = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--disable-userns",
        "--uid",
        "1000",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        # The system directories only, as a session has them: a bind of the host's whole ``/``
        # took every mount under it along, and failed when one of them (another sandbox's
        # workspace image, say) went away while bubblewrap remounted the copies read-only; the
        # failure was then cached for the rest of the process.
        *(option for mount in system_mounts() for option in mount.bwrap_options()),
        "--proc",
        "/proc",
        "--",
        "true",
    ]
    try:
        completed = subprocess.run(argv, capture_output=True, timeout=30, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bubblewrap could not run: {exc}"
    if completed.returncode != 0:
        detail = completed.stderr.decode(errors="replace").strip()
        if "--disable-userns" in detail:
            return False, (
                f"bubblewrap is too old ({detail}): the sandbox needs --disable-userns, which "
                "bubblewrap 0.8.0 and newer have (Debian 12, Ubuntu 23.04, Fedora 38 and later)."
            )
        return False, (
            f"bubblewrap cannot create namespaces here ({detail}). Enable unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ "
            "kernel.apparmor_restrict_unprivileged_userns=0), or in a container allow them "
            "(e.g. --security-opt seccomp=unconfined)."
        )
    return True, ""


__all__ = ["IsolationReport", "isolation_levels", "probe_isolation", "usable_bubblewrap"]
