"""The bubblewrap command line of a local sandbox: which namespaces, which mounts, which variables.

The sandbox sees a tiny file system assembled from read-only binds of what Python needs (the
system's ``/usr``, the interpreter's prefix, the site-packages directories that make installed
libraries importable), a generated ``/etc`` with a ``user`` account, a private ``/tmp``, minimal
``/proc`` and ``/dev``, and the session's own read-write workspace at ``/home/user``. Nothing else
of the host is there: not its home directories, not ``/root``, not ``/etc/ssl/private``.

The sandbox's uid 1000 is the host user that started bubblewrap, except when that is root: then it
is a dedicated unprivileged host uid (`_host_user`),
joined through ``--userns2`` once bubblewrap's setup is done. Only public paths are bound anyway,
never whole trees that might hold a secret.

One module past 500 lines on purpose: the command line, the read-only file system both isolation
levels share (``root_mounts``) and the masks are one plan, and splitting it would scatter what a
reviewer must read together to see what a sandbox can reach.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import IsolationUnavailableError
from langchain_sandbox.providers.local._host_user import SETPRIV
from langchain_sandbox.providers.names import LOCAL

SANDBOX_UID = 1000
SANDBOX_GID = 1000
SANDBOX_PYTHON_PREFIX = "/opt/python"
SANDBOX_SITE_ROOT = "/opt/site-packages"
SANDBOX_RUNTIME_DIR = "/opt/langchain-sandbox"
SANDBOX_HOSTNAME = "sandbox"

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Files of /etc that programs read to start at all (and fontconfig's, which matplotlib reads to
# draw text); none of them holds a secret.
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf", "/etc/fonts")
# Only for sessions with network: name resolution and the public CA bundle.
_NETWORK_ETC = (
    "/etc/resolv.conf",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
)

_DATA_SOURCE = "/proc/self/fd/"
# Kernel files of /proc that describe the host, not the sandbox: the ones Docker masks, the
# keyring's (not namespaced: the host user's keys and key quotas), and the memory maps and
# allocator statistics a red team read (physical page flags, slab and vmalloc layouts help kernel
# exploits). Files are covered with an empty sealed file (a bind of /dev/null would not even open:
# the sandbox's mounts are nodev), directories with an empty read-only tmpfs; only those the host's
# kernel has. (/sys/firmware, also masked by Docker, is absent: /sys is not
# mounted at all.)
_MASKED_PROC_FILES = (
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/kpageflags",
    "/proc/kpagecount",
    "/proc/kpagecgroup",
    "/proc/slabinfo",
    "/proc/vmallocinfo",
    "/proc/pagetypeinfo",
    "/proc/sysrq-trigger",
)
_MASKED_PROC_DIRS = ("/proc/asound", "/proc/acpi", "/proc/scsi")

_DESCRIBE_PYTHON = (
    "import json, os, site, sys;"
    "print(json.dumps({'executable': os.path.realpath(sys.executable),"
    " 'prefix': sys.base_prefix,"
    " 'site': [p for p in site.getsitepackages() if os.path.isdir(p)],"
    " 'version': '%d.%d' % sys.version_info[:2], 'build': sys.version}))"
)


@dataclass(frozen=True)
class PythonInstall:
    """An interpreter on the host and where its parts appear inside the sandbox.

    Attributes:
        executable: Real host path of the interpreter binary.
        prefix: Host path of its installation prefix (``sys.base_prefix``).
        site_packages: Host site-packages directories to make importable (a venv's included).
        version: ``"3.11"``.
        build: The interpreter's full ``sys.version`` (release and build), which sandbox
            environments made with it are addressed by.
    """

    executable: str
    prefix: str
    site_packages: tuple[str, ...]
    version: str
    build: str = ""

    @property
    def _prefix_is_system(self) -> bool:
        return _is_under(self.prefix, _SYSTEM_DIRS)

    def sandbox_executable(self) -> str:
        """Path of the interpreter inside the sandbox."""
        if self._prefix_is_system or not _is_under(self.executable, (self.prefix,)):
            return self.executable
        return SANDBOX_PYTHON_PREFIX + self.executable[len(self.prefix.rstrip("/")) :]

    def sandbox_library_path(self) -> str | None:
        """``LD_LIBRARY_PATH`` the relocated interpreter needs, if any.

        An interpreter built with a shared ``libpython`` finds it through an absolute RUNPATH
        (``<host prefix>/lib``) that does not exist in the sandbox; the loader would then pick
        whatever ``libpython`` the system has (another patch release, or none at all).
        """
        if self._prefix_is_system:
            return None
        library_dir = os.path.join(self.prefix, "lib")
        try:
            shared = any(name.startswith("libpython") for name in os.listdir(library_dir))
        except OSError:
            return None
        return f"{SANDBOX_PYTHON_PREFIX}/lib" if shared else None

    def binds(self) -> list[tuple[str, str]]:
        """``(host, sandbox)`` read-only binds that make this interpreter and its libraries work."""
        binds: list[tuple[str, str]] = []
        if not self._prefix_is_system:
            binds.append((self.prefix, SANDBOX_PYTHON_PREFIX))
        for index, directory in enumerate(self.site_packages):
            if not _is_under(directory, (*_SYSTEM_DIRS, self.prefix)):
                binds.append((directory, f"{SANDBOX_SITE_ROOT}/{index}"))
        return binds

    def sandbox_site_packages(self) -> list[str]:
        """The site-packages directories as the sandbox sees them, for ``sys.path``."""
        mapped: list[str] = []
        for index, directory in enumerate(self.site_packages):
            if _is_under(directory, _SYSTEM_DIRS) or (
                self._prefix_is_system and _is_under(directory, (self.prefix,))
            ):
                mapped.append(directory)
            elif _is_under(directory, (self.prefix,)):
                mapped.append(SANDBOX_PYTHON_PREFIX + directory[len(self.prefix.rstrip("/")) :])
            else:
                mapped.append(f"{SANDBOX_SITE_ROOT}/{index}")
        return mapped


def describe_python(executable: str) -> PythonInstall:
    """Ask ``executable`` where it lives: one short subprocess the first time this process asks
    about that interpreter, remembered after. The memory is keyed by the path and the identity of
    the file it names, so an interpreter (or venv) made anew at the same path is asked again.

    Raises:
        IsolationUnavailableError: the interpreter cannot be run.
    """
    try:
        found = os.stat(executable)
    except OSError:  # a bare name looked up on PATH: nothing to key the memory by
        return _ask_python(executable)
    return _remembered_python(executable, (found.st_dev, found.st_ino, found.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _remembered_python(executable: str, identity: tuple[int, int, int]) -> PythonInstall:
    # ``identity`` is only the cache key. An exception is not cached: only answers are.
    return _ask_python(executable)


def _ask_python(executable: str) -> PythonInstall:
    try:
        completed = subprocess.run(
            [executable, "-I", "-c", _DESCRIBE_PYTHON],
            capture_output=True,
            timeout=60,
            check=True,
            env={"PATH": os.defpath},
        )
        info = json.loads(completed.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise IsolationUnavailableError(
            f"Cannot run the sandbox's Python interpreter {executable!r}: {exc}. "
            "Pass python='/path/to/python3' to LocalProvider.",
            provider=LOCAL,
        ) from exc
    return PythonInstall(
        executable=str(info["executable"]),
        prefix=str(info["prefix"]),
        site_packages=tuple(str(p) for p in info["site"]),
        version=str(info["version"]),
        build=str(info["build"]),
    )


def find_binary(name: str, path: str | None, missing: str) -> str:
    """The executable ``path`` (else ``name`` on ``PATH``), or raise ``missing`` (a sentence
    completed by where it was looked for) as an ``IsolationUnavailableError``."""
    found = path if path is not None else shutil.which(name)
    if found and os.path.isfile(found) and os.access(found, os.X_OK):
        return found
    where = f" at {path!r}" if path else " on PATH"
    raise IsolationUnavailableError(missing.format(where=where), provider=LOCAL)


def find_bubblewrap(path: str | None = None) -> str:
    """The bubblewrap binary to use, or raise saying how to install it."""
    return find_binary(
        "bwrap",
        path,
        "bubblewrap (bwrap) was not found{where}, so code cannot be isolated here. "
        "Install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), "
        "or, only if you accept running code unisolated, pass isolation='none' to the local "
        "provider: SandboxExecTool(provider=LocalProvider(isolation='none')), "
        "SandboxRuntime(provider_options={{'isolation': 'none'}}) or "
        "LocalProvider(isolation='none') wherever a provider is taken.",
    )


def etc_files() -> dict[str, str]:
    """The sandbox's own ``/etc/passwd``, ``group`` and ``hosts``, as data sources for ``files``."""
    contents = {
        "/etc/passwd": (
            f"user:x:{SANDBOX_UID}:{SANDBOX_GID}:user:{WORKSPACE_ROOT}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "/etc/group": f"user:x:{SANDBOX_GID}:\nnogroup:x:65534:\n",
        "/etc/hosts": f"127.0.0.1 localhost {SANDBOX_HOSTNAME}\n::1 localhost ip6-localhost\n",
    }
    return {
        path: sealed_file(os.path.basename(path), text.encode()) for path, text in contents.items()
    }


@functools.cache
def sealed_file(name: str, data: bytes) -> str:
    """``data`` in a sealed memory file (nobody can change it), as a data source for ``files``.

    Files given to sandboxes this way appear in ``/proc/self/mountinfo`` inside without any host
    path, where a bind of a host file would show the file's host path. The memory file lives as
    long as this process (one per distinct content); the returned ``/proc/self/fd/N`` names it.
    """
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    fcntl.fcntl(
        fd,
        fcntl.F_ADD_SEALS,
        fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE,
    )
    return f"{_DATA_SOURCE}{fd}"


def bubblewrap_argv(
    bwrap: str,
    command: Sequence[str],
    *,
    python: PythonInstall,
    workspace: str,
    files: Mapping[str, str],
    env: Mapping[str, str],
    network: bool,
    read_only: Sequence[tuple[str, str]] = (),
    read_write: Sequence[tuple[str, str]] = (),
    tmp_size_bytes: int | None = None,
    user_namespace: int | None = None,
) -> list[str]:
    """The full ``bwrap`` argv that runs ``command`` in a fresh sandbox.

    Args:
        bwrap: The bubblewrap binary.
        command: argv inside the sandbox (sandbox paths).
        python: The interpreter to make available.
        workspace: Host directory bound read-write at ``/home/user``.
        files: Read-only files copied into the sandbox (``{sandbox path: data source}``, the
            sources made by `sealed_file`): the generated ``/etc`` files, the worker.
        env: The complete environment inside; the host's is cleared.
        network: Share the host's network (and its resolver and CA certificates).
        read_only: Extra ``(host, sandbox)`` read-only binds (the session's environment, a
            trusted package directory).
        read_write: Extra ``(host, sandbox)`` writable binds (an environment being built, the
            worker's port relay directory).
        tmp_size_bytes: Size cap of the private ``/tmp``.
        user_namespace: A descriptor of the user namespace the sandbox joins once bubblewrap
            (run as root) has set it up (`sandbox_user_namespace`); ``command`` then starts as uid 1000 in it through
            ``setpriv``. ``None``: bubblewrap makes the user namespace, mapping 1000 to its caller.
    """
    if user_namespace is None:
        users = [
            "--unshare-user",
            # No user namespace inside: without one, nothing in the sandbox can gain the
            # privileges to mount (cgroupfs included, where the session's own limits live) or to
            # unshare further.
            "--disable-userns",
            "--assert-userns-disabled",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_GID),
        ]
        # bubblewrap started by root keeps every capability inside unless told otherwise.
        capabilities = ["--cap-drop", "ALL"]
    else:
        # The namespace forbids nested ones itself. bubblewrap ends its setup as host uid 0,
        # unmapped there: it needs CAP_DAC_READ_SEARCH to enter the workspace (the sandbox's own,
        # mode 0700), setpriv CAP_SETUID and CAP_SETGID to become uid 1000 and CAP_SETPCAP to
        # empty the bounding set; its exec as uid 1000
        # then leaves no capability at all.
        users = ["--userns2", str(user_namespace)]
        capabilities = ["--cap-drop", "ALL"]
        for capability in ("CAP_DAC_READ_SEARCH", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
            capabilities += ["--cap-add", capability]
        command = [
            SETPRIV,
            f"--reuid={SANDBOX_UID}",
            f"--regid={SANDBOX_GID}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
            *command,
        ]
    argv = [
        bwrap,
        *users,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        SANDBOX_HOSTNAME,
        *capabilities,
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    if not network:
        argv.append("--unshare-net")
    mounts_start = len(argv)
    # bubblewrap makes data files 0600, its own (host root's): readable for a sandbox that is.
    readable = ["--perms", "0644"] if user_namespace is not None else []
    for mount in root_mounts(python, files=files, network=network, read_only=read_only):
        perms = readable if mount.kind == "data" else []
        argv += [*perms, *mount.bwrap_options()]
    # /proc and /dev are read-only: the sandbox user maps to the host's uid, which would
    # otherwise own (and could write) host-wide sysctls such as /proc/sys/kernel/core_pattern.
    argv += ["--proc", "/proc"]
    argv += _proc_mask_args()
    argv += ["--remount-ro", "/proc", "--dev", "/dev"]
    size = ["--size", str(tmp_size_bytes)] if tmp_size_bytes is not None else []
    argv += [*size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += [*size, "--tmpfs", "/tmp", "--chmod", "1777", "/tmp"]
    argv += ["--bind", workspace, WORKSPACE_ROOT, "--chdir", WORKSPACE_ROOT]
    for host_path, sandbox_path in read_write:
        argv += ["--bind", host_path, sandbox_path]
    # The assembled root itself is read-only: only /home/user, /tmp and /dev take writes.
    argv += ["--remount-ro", "/"]
    if user_namespace is not None:
        argv[mounts_start:mounts_start] = _public_parents(argv[mounts_start:])
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--", *command]
    return argv


# Options of bubblewrap that mount something, and how many arguments each takes (its destination
# is the last one).
_MOUNT_OPTIONS = {"--ro-bind": 2, "--bind": 2, "--ro-bind-data": 2, "--symlink": 2, "--tmpfs": 1}


def _public_parents(options: Sequence[str]) -> list[str]:
    """``--dir`` options (mode 0755) for the directories bubblewrap would create on the way to
    the destinations in ``options``. It makes those 0700, owned by host root: a sandbox that is
    not host root could not walk through ``/home`` or ``/opt`` then."""
    parents: set[str] = set()
    index = 0
    while index < len(options):
        count = _MOUNT_OPTIONS.get(options[index], 1 if options[index] == "--perms" else 0)
        if count:
            parent = os.path.dirname(options[index + count])
            while parent not in ("/", "") and not _is_under(
                parent, (*_SYSTEM_DIRS, "/proc", "/dev")
            ):
                parents.add(parent)
                parent = os.path.dirname(parent)
        index += count + 1
    made: list[str] = []
    for parent in sorted(parents, key=lambda path: (path.count("/"), path)):
        made += ["--perms", "0755", "--dir", parent]
    return made


@contextlib.contextmanager
def options_via_fd(
    argv: Sequence[str], *, seccomp: bytes | None = None
) -> Iterator[tuple[list[str], tuple[int, ...]]]:
    """Hand bubblewrap its options through a memfd (``--args FD``) instead of its argv.

    bubblewrap's own process is pid 1 inside the sandbox, and ``/proc/1/cmdline`` would show
    every host path it binds. Data files (``--ro-bind-data`` of a `sealed_file`) get a
    descriptor each. With ``seccomp`` (a BPF program), bubblewrap also gets
    ``--seccomp FD`` and installs the filter. Yields the short argv and the descriptors to pass to
    the child.
    """
    split = list(argv).index("--")
    options = list(argv[1:split])
    fds: list[int] = []
    try:
        for index, option in enumerate(options[:-1]):
            if option == "--ro-bind-data" and options[index + 1].startswith(_DATA_SOURCE):
                # bubblewrap reads the data from the descriptor's offset: each start gets a
                # descriptor of its own, positioned at the start.
                fds.append(os.open(options[index + 1], os.O_RDONLY | os.O_CLOEXEC))
                options[index + 1] = str(fds[-1])
        if seccomp is not None:
            fds.append(_memfd("bwrap-seccomp", seccomp))
            options += ["--seccomp", str(fds[-1])]
        fds.append(_memfd("bwrap-args", b"".join(arg.encode() + b"\0" for arg in options)))
        yield [argv[0], "--args", str(fds[-1]), *argv[split:]], tuple(fds)
    finally:
        for fd in fds:
            os.close(fd)


def _memfd(name: str, data: bytes) -> int:
    """A memory file holding ``data``, positioned at its start for the reader."""
    fd = os.memfd_create(name)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


@functools.cache
def _proc_mask_args() -> tuple[str, ...]:
    args: list[str] = []
    for path in _MASKED_PROC_FILES:
        if os.path.exists(path):
            # 0644: bubblewrap makes data files 0600 and its own, unreadable to a sandbox user
            # that is not host root (an empty read, not EACCES, is what a mask answers).
            args += ["--perms", "0644", "--ro-bind-data", sealed_file("masked", b""), path]
    for path in _MASKED_PROC_DIRS:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
    return tuple(args)


_BWRAP_OPTION = {"bind": "--ro-bind", "symlink": "--symlink", "data": "--ro-bind-data"}


@dataclass(frozen=True)
class RootMount:
    """One read-only entry of the sandbox's file system, whichever backend assembles it.

    Attributes:
        kind: ``"bind"`` (a host file or directory), ``"symlink"`` (``source`` is the link's
            target) or ``"data"`` (``source`` is a `sealed_file`).
        source: See ``kind``.
        sandbox: Where it appears inside.
    """

    kind: Literal["bind", "symlink", "data"]
    source: str
    sandbox: str

    def bwrap_options(self) -> list[str]:
        """The bubblewrap options that make this entry."""
        return [_BWRAP_OPTION[self.kind], self.source, self.sandbox]


def system_mounts() -> list[RootMount]:
    """The host's system directories (``/usr``, ``/bin``, ``/lib``...) as every sandbox has them:
    each bound read-only, or the merged-/usr symlink it is on the host."""
    mounts: list[RootMount] = []
    for directory in _SYSTEM_DIRS:
        if os.path.islink(directory):
            # Merged-/usr systems: /bin -> usr/bin and the like.
            mounts.append(RootMount("symlink", os.readlink(directory), directory))
        elif os.path.isdir(directory):
            mounts.append(RootMount("bind", directory, directory))
    return mounts


def root_mounts(
    python: PythonInstall,
    *,
    files: Mapping[str, str],
    network: bool,
    read_only: Sequence[tuple[str, str]] = (),
) -> list[RootMount]:
    """The read-only part of every sandbox's file system, in mount order: the system
    directories, the ``/etc`` files programs need, ``files`` (the generated ``/etc`` and the
    worker), with ``network`` the resolver and CA files, the interpreter and ``read_only``.

    bubblewrap and gVisor both build their sandboxes from this list, so the two levels show
    sandboxed code the same files. What is writable (``/tmp``, the workspace) and the kernel's
    own trees (``/proc``, ``/dev``) each backend adds itself.
    """
    mounts = system_mounts()
    host_files = [*_ETC_FILES, *(_NETWORK_ETC if network else ())]
    mounts += [RootMount("bind", os.path.realpath(p), p) for p in host_files if os.path.exists(p)]
    mounts += [RootMount("data", source, path) for path, source in files.items()]
    mounts += [RootMount("bind", host, path) for host, path in (*python.binds(), *read_only)]
    return mounts


def _is_under(path: str, roots: Sequence[str]) -> bool:
    path = os.path.normpath(path)
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


__all__ = [
    "SANDBOX_GID",
    "SANDBOX_HOSTNAME",
    "SANDBOX_PYTHON_PREFIX",
    "SANDBOX_RUNTIME_DIR",
    "SANDBOX_SITE_ROOT",
    "SANDBOX_UID",
    "PythonInstall",
    "RootMount",
    "bubblewrap_argv",
    "describe_python",
    "etc_files",
    "find_bubblewrap",
    "options_via_fd",
    "root_mounts",
    "sealed_file",
    "system_mounts",
]
