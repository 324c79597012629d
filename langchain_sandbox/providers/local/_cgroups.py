"""Memory and process limits of a local session, with cgroups where the machine offers them.

Each session gets its own cgroup (one per controller on cgroup v1, one directory on v2), created
next to the cgroup the host process lives in. The sandbox's first process joins it *before* it
runs anything (a two-line ``sh`` prefix writes its own pid to ``cgroup.procs``, then ``exec``s
bubblewrap), so every process the sandboxed code starts is counted and limited, and closing the
session kills them all.

Why not rlimits alone: ``RLIMIT_NPROC`` is not enforced for a process whose host uid is root, even
inside a user namespace (measured: a fork bomb reached 10,000 processes), while a pids cgroup stops
the same bomb at its limit. ``RLIMIT_AS`` and ``RLIMIT_NPROC`` remain the fallback where no
cgroup can be created, and `detect_cgroups` says which mechanism is in force.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

_CGROUP_ROOT_PREFIX = "langchain-sandbox-"

# sh -c _JOIN_SCRIPT sh PROCS_FILE... -- ARGV...: no core dumps, join each cgroup, exec ARGV.
_JOIN_SCRIPT = (
    'ulimit -c 0 2>/dev/null; while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; '
    'shift; exec "$@"'
)


@dataclass(frozen=True)
class CgroupSupport:
    """Where this process may create session cgroups, per controller.

    Attributes:
        memory: Parent directory for memory cgroups, or ``None``.
        pids: Parent directory for pids cgroups, or ``None``.
        memory_version, pids_version: cgroup version of each (1 or 2), ``None`` when absent.
        reason: Why a controller is unavailable (for ``doctor``), empty when both work.
    """

    memory: str | None = None
    pids: str | None = None
    memory_version: Literal[1, 2] | None = None
    pids_version: Literal[1, 2] | None = None
    reason: str = ""


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, fs type, options)`` of the cgroup file systems."""
    found: list[tuple[str, str, set[str]]] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            for line in handle:
                before, _, after = line.partition(" - ")
                fields = before.split()
                fstype, _source, super_options = [*after.split(), "", ""][:3]
                if fstype in ("cgroup", "cgroup2") and len(fields) > 4:
                    options = set(super_options.split(",")) | set(fields[5].split(","))
                    found.append((fields[4], fstype, options))
    except OSError:
        pass
    return found


def _own_cgroups() -> dict[str, str]:
    """``{controller or "" for v2: path}`` from ``/proc/self/cgroup``."""
    paths: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
    except OSError:
        pass
    return paths


def _writable_dir(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK)


def _v2_enable(parent: str, controller: str) -> bool:
    """Make ``controller`` available to children of ``parent`` (cgroup v2), if allowed."""
    try:
        with open(os.path.join(parent, "cgroup.subtree_control"), encoding="utf-8") as handle:
            if controller in handle.read().split():
                return True
        with open(os.path.join(parent, "cgroup.subtree_control"), "w", encoding="utf-8") as handle:
            handle.write(f"+{controller}")
        return True
    except OSError:
        # Usually "no internal processes": the parent holds this process itself.
        return False


def detect_cgroups() -> CgroupSupport:
    """Find, per controller, a cgroup directory this process can create session cgroups in."""
    own = _own_cgroups()
    found: dict[str, tuple[str, Literal[1, 2]]] = {}
    reasons: list[str] = []
    mounts = _mounts()
    for controller in ("memory", "pids"):
        for mount_point, fstype, options in mounts:
            if fstype == "cgroup" and controller in options and controller in own:
                parent = os.path.join(mount_point, own[controller].lstrip("/"))
                if _writable_dir(parent):
                    found[controller] = (parent, 1)
                    break
        if controller in found:
            continue
        for mount_point, fstype, _options in mounts:
            if fstype != "cgroup2" or "" not in own:
                continue
            parent = os.path.join(mount_point, own[""].lstrip("/"))
            try:
                with open(os.path.join(parent, "cgroup.controllers"), encoding="utf-8") as handle:
                    available = handle.read().split()
            except OSError:
                continue
            if controller in available and _writable_dir(parent) and _v2_enable(parent, controller):
                found[controller] = (parent, 2)
                break
        if controller not in found:
            reasons.append(f"no writable cgroup with the {controller} controller")
    memory = found.get("memory")
    pids = found.get("pids")
    return CgroupSupport(
        memory=memory[0] if memory else None,
        pids=pids[0] if pids else None,
        memory_version=memory[1] if memory else None,
        pids_version=pids[1] if pids else None,
        reason="; ".join(reasons),
    )


@dataclass
class SessionCgroup:
    """The cgroup directories of one session and the limits written into them.

    Attributes:
        directories: ``{controller: directory}`` actually created.
        versions: ``{controller: 1 | 2}``.
        memory_bytes, max_processes: The limits requested (``None``: unlimited).
    """

    directories: dict[str, str] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    memory_bytes: int | None = None
    max_processes: int | None = None

    @classmethod
    def create(
        cls,
        support: CgroupSupport,
        name: str,
        *,
        memory_bytes: int | None,
        max_processes: int | None,
    ) -> SessionCgroup:
        """Create the session's cgroups with their limits; controllers that fail are skipped."""
        group = cls(memory_bytes=memory_bytes, max_processes=max_processes)
        wanted: list[tuple[str, str | None, int | None, str | None]] = [
            ("memory", support.memory, support.memory_version, str(memory_bytes or "")),
            ("pids", support.pids, support.pids_version, str(max_processes or "")),
        ]
        for controller, parent, version, limit in wanted:
            if parent is None or version is None:
                continue
            directory = os.path.join(parent, _CGROUP_ROOT_PREFIX + name)
            try:
                os.makedirs(directory, exist_ok=True)
                if limit:
                    group._write_limit(controller, version, directory, limit)
            except OSError:
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
                continue
            group.directories[controller] = directory
            group.versions[controller] = version
        return group

    @staticmethod
    def _write_limit(controller: str, version: int, directory: str, limit: str) -> None:
        if controller == "memory" and version == 1:
            _write(directory, "memory.limit_in_bytes", limit)
            # Swap would let a bomb outlive the limit; not every kernel has memsw accounting.
            with contextlib.suppress(OSError):
                _write(directory, "memory.memsw.limit_in_bytes", limit)
        elif controller == "memory":
            _write(directory, "memory.max", limit)
            with contextlib.suppress(OSError):
                _write(directory, "memory.swap.max", "0")
        else:
            _write(directory, "pids.max", limit)

    @property
    def limits_memory(self) -> bool:
        return "memory" in self.directories

    @property
    def limits_processes(self) -> bool:
        return "pids" in self.directories

    def join_command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed with a tiny ``sh`` that joins these cgroups, then ``exec``s it.

        The process enters the cgroups before it runs anything else, so everything it starts is
        counted. A shell prefix instead of a ``preexec_fn`` lets Python spawn with vfork (no copy
        of the host process, whose size would otherwise add to every cold start) and avoids
        running Python code between fork and exec in a threaded host.
        """
        if not self.directories:
            return list(argv)
        procs_files = sorted({os.path.join(d, "cgroup.procs") for d in self.directories.values()})
        return ["/bin/sh", "-c", _JOIN_SCRIPT, "sh", *procs_files, "--", *argv]

    def preexec(self) -> Callable[[], None] | None:
        """A ``preexec_fn`` for the limits no cgroup covers (rlimits), or ``None`` when all are.

        ``RLIMIT_NPROC`` is ignored for a root caller; `detect_cgroups` reports that.
        """
        rlimits: list[tuple[int, int]] = []
        if self.memory_bytes and not self.limits_memory:
            rlimits.append((resource.RLIMIT_AS, self.memory_bytes))
        if self.max_processes and not self.limits_processes:
            rlimits.append((resource.RLIMIT_NPROC, self.max_processes))
        if not rlimits:
            return None
        rlimits.append((resource.RLIMIT_CORE, 0))

        def _limit() -> None:
            for which, value in rlimits:
                resource.setrlimit(which, (value, value))

        return _limit

    def oom_kills(self) -> int:
        """How many processes the kernel killed for exceeding the memory limit so far."""
        directory = self.directories.get("memory")
        if directory is None:
            return 0
        name = "memory.oom_control" if self.versions["memory"] == 1 else "memory.events"
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> set[int]:
        """Host pids of every process in the session's cgroups."""
        found: set[int] = set()
        for directory in self.directories.values():
            try:
                with open(os.path.join(directory, "cgroup.procs"), encoding="utf-8") as handle:
                    found.update(int(line) for line in handle if line.strip())
            except (OSError, ValueError):
                continue
        return found

    def kill_all(self, *, timeout: float = 5.0) -> None:
        """SIGKILL every process of the session until none is left (or ``timeout`` passes).

        Freshly forked children can appear while killing, hence the loop.
        """
        deadline = time.monotonic() + timeout
        for controller, directory in self.directories.items():
            if self.versions[controller] == 2:
                with contextlib.suppress(OSError):
                    _write(directory, "cgroup.kill", "1")
        while time.monotonic() < deadline:
            remaining = self.pids()
            if not remaining:
                return
            for pid in remaining:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the directories. Idempotent."""
        if not self.directories:
            return
        self.kill_all()
        for controller, directory in list(self.directories.items()):
            for _ in range(100):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    # Killed processes leave the cgroup once the kernel has reaped them.
                    time.sleep(0.01)
            self.directories.pop(controller, None)

    @classmethod
    def leftover(cls, support: CgroupSupport, name: str) -> SessionCgroup:
        """The cgroups a previous process left for session ``name`` (for ``gc``)."""
        group = cls()
        for controller, parent, version in (
            ("memory", support.memory, support.memory_version),
            ("pids", support.pids, support.pids_version),
        ):
            if parent is None or version is None:
                continue
            directory = os.path.join(parent, _CGROUP_ROOT_PREFIX + name)
            if os.path.isdir(directory):
                group.directories[controller] = directory
                group.versions[controller] = version
        return group


def _write(directory: str, name: str, value: str) -> None:
    with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
        handle.write(value)


__all__ = ["CgroupSupport", "SessionCgroup", "detect_cgroups"]
