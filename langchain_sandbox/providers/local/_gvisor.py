"""The gVisor level of the local provider: the same sandbox, run by ``runsc`` instead of bubblewrap.

gVisor's ``runsc`` puts a user-space kernel (the Sentry) between sandboxed code and the host: the
code's system calls are served by the Sentry, and only the Sentry (itself under a tight seccomp
filter) talks to the host kernel, so a bug in the host kernel's system-call surface is no longer
reachable from the sandbox. Each process a session starts (its worker, pip) is one OCI container:

* the **file system** is the one bubblewrap assembles (`root_mounts`: read-only binds of the
  system, the interpreter, the sandbox environment; the generated ``/etc``; a private ``/tmp``; the
  workspace read-write at ``/home/user``), over a read-only root directory made once per provider
  (`prepare_rootfs`) that holds the mount points, the generated files and the filter;
* **uid 1000 inside**, no capabilities, ``no_new_privs``; files it writes in the workspace are owned
  on the host by that uid (gVisor's gofer creates them as the sandbox user), so the host makes the
  workspace that uid's and writes its own files as it (`SANDBOX_OWNER`);
* **no network** (``--network=none``: only the Sentry's own loopback) unless the session asks for it
  (``--network=host``: the host's network through the Sentry, as bubblewrap shares it);
* **limits**: the session's cgroups hold ``runsc`` and everything it starts (the Sentry, the gofer),
  with room for gVisor's own memory and threads (`host_limits`); inside, ``RLIMIT_NPROC``
  (which the Sentry enforces: the sandbox user is not root there) is ``max_processes``;
* the session's **seccomp filter** is installed inside too, by `BOOT` before anything else
  runs, so a refused call fails with the same error on both levels;
* the **worker protocol** runs over the container's stdin (requests) and stdout (events), the
  only descriptors ``runsc`` hands to a container; interrupts go through a FIFO the host made
  (``--host-fifo=open``), in a per-container channel directory bound at `CHANNEL_DIR`.
  pip's index proxy is a unix socket there (``--host-uds=open`` for pip's container); a session
  with a network policy binds its egress proxy's socket into the worker's container, which then
  gets ``--host-uds=open`` too (the only host sockets it can reach are in its binds).

Every container's ``runsc`` state (``--root``) and bundle live in the session's directory, so
closing the session, or ``gc`` after a crash, removes them with it (`kill_containers` first); ``runsc`` runs with
``--ignore-cgroups`` (it would otherwise make cgroups of its own, at the top of the hierarchy,
which a killed ``runsc`` leaves behind) and dies with the host process (``setpriv --pdeathsig``,
as bubblewrap's ``--die-with-parent``), which takes the Sentry with it.

One module just past 500 lines on purpose: everything that knows runsc (the bundle, the boot
program, the channels, the kill after a crash) stays behind this one door, so the rest of the
provider only sees a launcher option.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import IsolationUnavailableError
from langchain_sandbox.providers.local._bubblewrap import (
    SANDBOX_GID,
    SANDBOX_HOSTNAME,
    SANDBOX_RUNTIME_DIR,
    SANDBOX_UID,
    PythonInstall,
    RootMount,
    find_binary,
    root_mounts,
)
from langchain_sandbox.providers.names import LOCAL

CHANNEL_DIR = "/run/langchain-sandbox"
"""Where a container sees its channel directory (the worker's control FIFO, pip's index socket)."""

INDEX_SOCKET = "index.sock"
"""Name of the index proxy's socket in the channel directory."""

SANDBOX_OWNER = (SANDBOX_UID, SANDBOX_GID)
"""Host owner of a gVisor session's workspace: the uid gVisor's gofer writes the sandbox's files as."""

SECCOMP_FILE = f"{SANDBOX_RUNTIME_DIR}/seccomp.bpf"
"""The session's seccomp filter (the one bubblewrap installs), inside a gVisor sandbox."""

_CONTROL = "control"
_SETPRIV_CANDIDATES = ("/usr/bin/setpriv", "/bin/setpriv")

# gVisor's own share of a session's host cgroups, measured here (docs/isolation.md): the Sentry and
# the gofer take about 35 MB and 70 host tasks for an idle worker; with the ptrace platform each
# sandboxed process adds about seven host tasks, and the stubs it leaves are pooled, so the count
# grows with the processes the sandbox has had (1,240 after 600 forks of at most 50 at a time).
# What the code itself may use is limited inside, by the Sentry; these only bound the Sentry.
_HOST_MEMORY_OVERHEAD = 192 * 1024 * 1024
_HOST_TASKS_BASE = 2048
_HOST_TASKS_PER_PROCESS = 16

BOOT = r"""
import os, sys
mode, seccomp = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
if mode == "worker":
    # runsc hands a container only its stdio: requests come on stdin, events go to stdout, and
    # interrupts through the channel's FIFO. The worker gets them at descriptors of their own,
    # and stdin/stdout point at /dev/null like bubblewrap's.
    request, events = os.dup(0), os.dup(1)
    control = os.open(args.pop(0), os.O_RDONLY)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
if seccomp:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    with open(seccomp, "rb") as handle:
        data = handle.read()
    program = ctypes.create_string_buffer(data, len(data))
    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    header = _Program(len(data) // 8, ctypes.addressof(program))
    # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER.
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(header), 0, 0):
        raise SystemExit("cannot install the seccomp filter: errno %d" % ctypes.get_errno())
    del libc, data, program, header, _Program, ctypes
if mode == "worker":
    path = args[0]
    with open(path, "rb") as handle:
        source = handle.read()
    import marshal
    code = marshal.loads(source[16:]) if path.endswith(".pyc") else compile(source, path, "exec")
    sys.argv = [path, str(request), str(events), str(control), *args[1:]]
    exec(code, {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__})
else:
    os.execv(args[0], args)
"""
"""The first thing every gVisor container runs, in the sandbox's own interpreter
(``python -I -S -c BOOT MODE SECCOMP ARGS...``): install the session's seccomp filter
(``SECCOMP``: its path inside, empty for none), then run the worker in this same process (``worker``: ARGS are the control FIFO, the worker's path and its arguments after
the descriptors) or ``exec`` ARGS."""


def find_runsc(path: str | None = None) -> str:
    """The ``runsc`` binary to use, or raise saying how to install it."""
    return find_binary(
        "runsc",
        path,
        "gVisor's runsc was not found{where}, so isolation='gvisor' is not available here. "
        "Install it (Debian 12 and later: apt-get install runsc; elsewhere see "
        "gvisor.dev/docs/user_guide/install), or use isolation='bubblewrap'.",
    )


def usable_runsc(path: str | None = None) -> str:
    """The ``runsc`` binary, checked to really start a container here; else raise saying why.
    The check runs once per binary and process (a fraction of a second).

    Raises:
        IsolationUnavailableError: runsc is missing, or cannot start a container.
    """
    runsc = find_runsc(path)
    problem = try_runsc(runsc)
    if problem:
        raise IsolationUnavailableError(problem, provider=LOCAL)
    return runsc


@functools.lru_cache(maxsize=16)
def try_runsc(runsc: str) -> str:
    """Start one container as sessions do (``/bin/true`` in the system's ``/usr``): empty when
    that works, else why not and how to fix it."""
    if os.geteuid() != 0:
        return (
            "gVisor sandboxes need the host process to run as root here (runsc sets up the "
            "sandbox's namespaces and its gofer as root; the sandboxed code itself runs as an "
            "unprivileged user inside). Run as root, or use isolation='bubblewrap'."
        )
    with tempfile.TemporaryDirectory(prefix="lcsbx-runsc-probe-") as directory:
        rootfs = os.path.join(directory, "rootfs")
        os.mkdir(rootfs)
        system_python = PythonInstall(
            executable="/usr/bin/true", prefix="/usr", site_packages=(), version=""
        )
        mounts = root_mounts(system_python, files={}, network=False)
        sandbox = GvisorSandbox(runsc=runsc, rootfs=rootfs, directory=directory, seccomp=False)
        argv = sandbox.command(["/bin/true"], mounts=mounts, env={}, network=False, boot=None)
        try:
            completed = subprocess.run(argv, capture_output=True, timeout=60, env={}, cwd="/")
        except (OSError, subprocess.SubprocessError) as exc:
            return f"gVisor's runsc could not run: {exc}"
    if completed.returncode != 0:
        detail = completed.stderr.decode(errors="replace").strip()[-800:]
        return (
            f"gVisor's runsc cannot start a sandbox here ({detail or completed.returncode}). "
            "Inside a container, runsc needs the container to allow it (e.g. --privileged, or "
            "--cap-add=ALL --security-opt seccomp=unconfined); `langchain-sandbox doctor` "
            "shows what works."
        )
    return ""


def host_limits(
    memory_bytes: int | None, max_processes: int | None
) -> tuple[int | None, int | None]:
    """The session's host cgroup limits under gVisor: the session's own plus gVisor's share."""
    memory = memory_bytes + _HOST_MEMORY_OVERHEAD if memory_bytes else None
    tasks = _HOST_TASKS_BASE + _HOST_TASKS_PER_PROCESS * max_processes if max_processes else None
    return memory, tasks


def prepare_rootfs(directory: str, files: Mapping[str, str], seccomp: bytes | None) -> str:
    """The read-only root of this provider's containers (made once per content, then shared):
    ``files`` (``{sandbox path: data source}``, as bubblewrap gets them) copied in, and the
    seccomp filter at `SECCOMP_FILE`. Mount points are added by `command`.
    """
    contents = {path: _read_source(source) for path, source in files.items()}
    if seccomp is not None:
        contents[SECCOMP_FILE] = seccomp
    digest = hashlib.sha256()
    for path in sorted(contents):
        digest.update(path.encode() + b"\0" + hashlib.sha256(contents[path]).digest())
    target = os.path.join(directory, f".gvisor-root-{digest.hexdigest()[:16]}")
    if os.path.isdir(target):
        return target
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".gvisor-root-", dir=directory)
    try:
        os.chmod(staging, 0o755)
        for path, data in contents.items():
            host = os.path.join(staging, path.lstrip("/"))
            os.makedirs(os.path.dirname(host), mode=0o755, exist_ok=True)
            with open(host, "wb") as handle:
                handle.write(data)
            os.chmod(host, 0o644)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if not os.path.isdir(target):  # another process made it first: use theirs
            raise
    return target


def _read_source(source: str) -> bytes:
    with open(source, "rb") as handle:
        return handle.read()


@dataclass(frozen=True)
class GvisorSandbox:
    """Where one session's gVisor containers live, and what they all share.

    Attributes:
        runsc: The ``runsc`` binary.
        rootfs: The read-only root directory (`prepare_rootfs`).
        directory: The session's own directory for ``runsc``'s state and the bundles.
        seccomp: Whether containers install the filter in ``rootfs``.
        max_processes: ``RLIMIT_NPROC`` inside (the Sentry enforces it).
        memory_bytes: ``RLIMIT_AS`` inside, only where no memory cgroup holds the sandbox.
    """

    runsc: str
    rootfs: str
    directory: str
    seccomp: bool
    max_processes: int | None = None
    memory_bytes: int | None = None

    @property
    def state_dir(self) -> str:
        return os.path.join(self.directory, "state")

    def channel(self) -> str:
        """A fresh channel directory for one container (host path)."""
        path = os.path.join(self.directory, "channels", uuid.uuid4().hex[:16])
        os.makedirs(path, mode=0o755)
        return path

    def control_pipe(self) -> tuple[int, int]:
        """The worker's control channel: a FIFO in a fresh channel directory, as (read end for
        the started process, write end for the host). `worker_channel` finds the
        directory again from the read end."""
        fifo = os.path.join(self.channel(), _CONTROL)
        os.mkfifo(fifo, 0o644)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return reader, os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    @staticmethod
    def worker_channel(control_fd: int) -> str:
        """The channel directory of the control FIFO open at ``control_fd``."""
        return os.path.dirname(os.readlink(f"/proc/self/fd/{control_fd}"))

    def boot(
        self, python: str, mode: str, args: Sequence[str], *, filtered: bool = False
    ) -> list[str]:
        """``args`` as the container's command, started through `BOOT` (``filtered``: by a
        process the filter already holds, which passes it on; it is not installed twice)."""
        seccomp = SECCOMP_FILE if self.seccomp and not filtered else ""
        return [python, "-I", "-S", "-c", BOOT, mode, seccomp, *args]

    def command(
        self,
        command: Sequence[str],
        *,
        mounts: Sequence[RootMount],
        env: Mapping[str, str],
        network: bool,
        boot: str | None,
        workspace: str | None = None,
        read_write: Sequence[tuple[str, str]] = (),
        tmp_size_bytes: int | None = None,
        channel: str | None = None,
        host_fifos: bool = False,
        host_sockets: bool = False,
        socket_servers: bool = False,
    ) -> list[str]:
        """The host argv that runs ``command`` in a new container (its bundle written now).

        Args:
            command: argv inside (sandbox paths).
            mounts: The read-only file system (`root_mounts`).
            env: The complete environment inside.
            network: The host's network (through the Sentry) instead of none.
            boot: The interpreter that runs `BOOT` first (``command`` then ``exec``-ed), or
                ``None`` when ``command`` starts through it already (or not at all).
            workspace: Host directory bound read-write at ``/home/user``.
            read_write: Extra writable ``(host, sandbox)`` binds.
            tmp_size_bytes: Size of ``/tmp`` and ``/dev/shm``.
            channel: Host channel directory to bind at `CHANNEL_DIR`.
            host_fifos: Let the container open the host FIFOs it sees (the worker's control
                FIFO, in its channel).
            host_sockets: Let the container connect to the host unix sockets it sees (the
                index proxy's, in its channel).
            socket_servers: Let the container listen on unix sockets that are the host's (in
                its writable binds: the port relays' directory), which host processes connect
                to. It gives no way to the host's own sockets (that is ``host_sockets``).
        """
        inner = list(command) if boot is None else self.boot(boot, "exec", command)
        spec_mounts = self._mounts(mounts, workspace, read_write, channel, tmp_size_bytes)
        bundle = os.path.join(self.directory, "bundles", uuid.uuid4().hex[:16])
        os.makedirs(bundle, mode=0o700)
        with open(os.path.join(bundle, "config.json"), "w", encoding="utf-8") as handle:
            json.dump(self._spec(inner, env, spec_mounts, network=network), handle)
        argv = [
            self.runsc,
            "--root",
            self.state_dir,
            "--ignore-cgroups",
            f"--network={'host' if network else 'none'}",
            *(["--host-fifo=open"] if host_fifos else []),
            *_host_uds(open_sockets=host_sockets, create_sockets=socket_servers),
            "run",
            "--bundle",
            bundle,
            f"lcsbx-{os.path.basename(bundle)}",
        ]
        setpriv = next((p for p in _SETPRIV_CANDIDATES if os.access(p, os.X_OK)), None)
        if setpriv is not None:
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        return argv

    def _mounts(
        self,
        mounts: Sequence[RootMount],
        workspace: str | None,
        read_write: Sequence[tuple[str, str]],
        channel: str | None,
        tmp_size_bytes: int | None,
    ) -> list[dict[str, object]]:
        size = [f"size={tmp_size_bytes}"] if tmp_size_bytes is not None else []
        spec: list[dict[str, object]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["mode=755"]},
            # gVisor would add its own sysfs; bubblewrap's sandboxes have none, nor do these.
            {"destination": "/sys", "type": "tmpfs", "source": "tmpfs", "options": ["ro"]},
            _tmpfs("/dev/shm", size),
            _tmpfs("/tmp", size),
        ]
        binds: list[tuple[str, str, bool]] = []
        for mount in mounts:
            if mount.kind == "symlink":
                self._mount_point(mount.sandbox, symlink=mount.source)
            elif mount.kind == "bind":
                binds.append((mount.source, mount.sandbox, False))
            # "data": a generated file, already in the root (prepare_rootfs).
        if workspace is not None:
            binds.append((workspace, WORKSPACE_ROOT, True))
        binds += [(host, sandbox, True) for host, sandbox in read_write]
        if channel is not None:
            binds.append((channel, CHANNEL_DIR, False))
        for host, sandbox, writable in binds:
            self._mount_point(sandbox, directory=os.path.isdir(host))
            options = ["bind", "rw" if writable else "ro"]
            spec.append(
                {"destination": sandbox, "type": "bind", "source": host, "options": options}
            )
        return spec

    def _mount_point(
        self, sandbox: str, *, directory: bool = True, symlink: str | None = None
    ) -> None:
        """Make ``sandbox`` exist in the shared root (``runsc`` would, racing other sessions)."""
        host = os.path.join(self.rootfs, sandbox.lstrip("/"))
        if os.path.lexists(host):
            return
        os.makedirs(os.path.dirname(host), mode=0o755, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            if symlink is not None:
                os.symlink(symlink, host)
            elif directory:
                os.mkdir(host, 0o755)
            else:
                os.close(os.open(host, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))

    def _spec(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        mounts: list[dict[str, object]],
        *,
        network: bool,
    ) -> dict[str, object]:
        rlimits = [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}]
        if self.max_processes:
            limit = self.max_processes
            rlimits.append({"type": "RLIMIT_NPROC", "hard": limit, "soft": limit})
        if self.memory_bytes:
            limit = self.memory_bytes
            rlimits.append({"type": "RLIMIT_AS", "hard": limit, "soft": limit})
        namespaces = ["pid", "ipc", "uts", "mount", *([] if network else ["network"])]
        no_capabilities: dict[str, list[str]] = {
            kind: [] for kind in ("bounding", "effective", "inheritable", "permitted", "ambient")
        }
        return {
            "ociVersion": "1.0.2",
            "process": {
                "user": {"uid": SANDBOX_UID, "gid": SANDBOX_GID},
                "args": list(command),
                "env": [f"{key}={value}" for key, value in env.items()],
                "cwd": WORKSPACE_ROOT,
                "capabilities": no_capabilities,
                "noNewPrivileges": True,
                "rlimits": rlimits,
            },
            "root": {"path": self.rootfs, "readonly": True},
            "hostname": SANDBOX_HOSTNAME,
            "mounts": mounts,
            # With the host's network (--network=host), a network namespace of its own would
            # leave the Sentry's host sockets nowhere to go.
            "linux": {"namespaces": [{"type": kind} for kind in namespaces]},
        }


def _host_uds(*, open_sockets: bool, create_sockets: bool) -> list[str]:
    """runsc's ``--host-uds`` flag for what a container may do with host unix sockets."""
    value = {(True, False): "open", (False, True): "create", (True, True): "all"}.get(
        (open_sockets, create_sockets)
    )
    return [f"--host-uds={value}"] if value else []


def _tmpfs(destination: str, size: list[str]) -> dict[str, object]:
    return {
        "destination": destination,
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["mode=1777", "nosuid", "nodev", *size],
    }


def kill_containers(directory: str) -> None:
    """Kill every container whose ``runsc`` state is under ``directory`` (a session's, or one a
    crashed process left); the caller then removes the directory, state and all.

    Their processes are normally gone already: killed with the session's cgroup, or by
    ``--pdeathsig`` when the host process died. Where neither held, the Sentry and gofer named in
    the state are killed here (checked to be ``runsc`` processes, in case a pid was reused).
    ``runsc delete --force`` would do the same, but takes seconds even for a container that is
    gone.
    """
    state = os.path.join(directory, "state")
    try:
        names = [name for name in os.listdir(state) if name.endswith(".state")]
    except OSError:
        return
    for name in names:
        try:
            with open(os.path.join(state, name), encoding="utf-8") as handle:
                record = json.load(handle)
            pids = [record["sandbox"]["pid"], record["goferPid"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for pid in pids:
            if isinstance(pid, int) and pid > 0 and _is_runsc(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


def _is_runsc(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return os.path.basename(handle.read().split(b"\0", 1)[0]).startswith(b"runsc")
    except OSError:
        return False


def make_owned(path: str) -> None:
    """Give ``path`` and what it holds directly (a new workspace and its package directory) to
    the sandbox's uid: gVisor checks the sandbox user's permissions against the host owners."""
    os.chown(path, *SANDBOX_OWNER)
    mode = os.stat(path).st_mode
    if not stat.S_ISDIR(mode):
        return
    for name in os.listdir(path):
        os.chown(os.path.join(path, name), *SANDBOX_OWNER, follow_symlinks=False)


__all__ = [
    "BOOT",
    "CHANNEL_DIR",
    "INDEX_SOCKET",
    "SANDBOX_OWNER",
    "GvisorSandbox",
    "find_runsc",
    "host_limits",
    "kill_containers",
    "make_owned",
    "prepare_rootfs",
    "try_runsc",
    "usable_runsc",
]
