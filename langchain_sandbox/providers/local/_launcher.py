"""How the processes of one local session start: inside bubblewrap or gVisor, or directly if asked
by name.

A `Launcher` knows the paths as the session's processes see them (the interpreter, the
worker's sources, the workspace, the package directory), the allow-listed environment, and how to
wrap an argv so it runs in the session's sandbox. The session asks it for the worker's command and
for pip's; nothing else builds command lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from langchain_sandbox import _output_capture
from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.providers.guest.packer import cloudpickle_path, source_path
from langchain_sandbox.providers.local._bubblewrap import (
    SANDBOX_RUNTIME_DIR,
    PythonInstall,
    bubblewrap_argv,
    etc_files,
    options_via_fd,
    root_mounts,
    sealed_file,
)
from langchain_sandbox.providers.local._cgroups import SessionCgroup
from langchain_sandbox.providers.local._egress_sandbox import (
    EGRESS_DIR,
    EGRESS_FORWARDER,
    EGRESS_SOCKET,
    TRANSPARENT,
)
from langchain_sandbox.providers.local._gvisor import CHANNEL_DIR, SANDBOX_OWNER, GvisorSandbox
from langchain_sandbox.providers.local._host_user import host_owner

if TYPE_CHECKING:
    from langchain_sandbox.network import NetworkPolicy

Isolation = Literal["bubblewrap", "gvisor", "none"]

PACKAGES_DIR = ".packages"
"""Workspace-relative directory that ``install_packages`` installs into (on ``sys.path``)."""

PORTS_DIR = "/srv/ports"
"""Where the worker's sandbox sees the session's port relay directory (its relays' sockets)."""

SANDBOX_ENVIRONMENT_DIR = "/opt/environment"
"""Where a session's sandbox environment (a virtualenv) appears inside the sandbox."""

_WORKER_SOURCE = source_path("local_worker")
_KERNEL_STATE_SOURCE = source_path("variables")
# The guest modules the worker loads beside it, by the names they have in the sandbox (the cells
# module is ``guest`` there, as it was before the guest package had modules of its own).
_GUEST_MODULES = {
    "guest": source_path("cells"),
    "process_groups": source_path("process_groups"),
    "spare_shells": source_path("spare_shells"),
    "output_capture": Path(_output_capture.__file__),
}
_BASH_CANDIDATES = ("/bin/bash", "/usr/bin/bash")


@dataclass(frozen=True)
class Launcher:
    """Starts processes of one session.

    Attributes:
        isolation: ``"bubblewrap"``, ``"gvisor"`` or ``"none"`` (processes run directly on
            the host).
        python: The interpreter the session uses.
        workspace_dir: Host directory of the workspace.
        bwrap: The bubblewrap binary (``None`` without isolation).
        network: Whether the session's processes share the host's network.
        files: Read-only files copied into the sandbox, ``{sandbox path: data source}``
            (`sandbox_files`: the generated ``/etc`` files and the worker).
        extra_env: The session's own variables (``SessionSpec.env``), applied last.
        tmp_size_bytes: Size cap of the private ``/tmp``.
        worker_bytecode: Host path of the worker compiled by `compile_worker` (saves
            compiling it at every start), or ``None`` to run its source.
        cgroup: The session's cgroups, joined by every process it starts.
        sandbox_environment: Host directory of the session's sandbox environment (a virtualenv made by
            `environments`), bound read-only at
            `SANDBOX_ENVIRONMENT_DIR`; its site-packages replace the interpreter's.
            ``None``: the interpreter's own site-packages (``python.site_packages``).
        seccomp: The seccomp filter (a BPF program) bubblewrap installs, or ``None`` for none.
        user_namespace: The user namespace the sandbox joins so that it runs as an unprivileged
            host uid (`_host_user`: when the host is
            root), or ``None``: bubblewrap maps the sandbox to the host's own user.
        gvisor: Where the session's gVisor containers live (with ``"gvisor"``); the filter is
            then in its root, installed by each container's first process.
        policy: The session's network policy (``network`` is then ``False``: the sandbox's
            only way out is the egress proxy), which pip's installs obey too.
        egress_dir: Host directory of the egress proxy's socket and CA certificate, bound
            read-only at `EGRESS_DIR`; the worker starts behind `EGRESS_FORWARDER`.
        ports_dir: Host directory bound writable into the worker's sandbox at `PORTS_DIR`,
            where its port relays listen (``_port_relay``); ``None``: none.
    """

    isolation: Isolation
    python: PythonInstall
    workspace_dir: str
    bwrap: str | None = None
    network: bool = False
    files: Mapping[str, str] = field(default_factory=dict)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    tmp_size_bytes: int | None = None
    worker_bytecode: str | None = None
    cgroup: SessionCgroup | None = None
    sandbox_environment: str | None = None
    seccomp: bytes | None = None
    user_namespace: int | None = None
    gvisor: GvisorSandbox | None = None
    policy: NetworkPolicy | None = None
    egress_dir: str | None = None
    ports_dir: str | None = None

    @property
    def isolated(self) -> bool:
        """Whether processes run in a sandbox (bubblewrap or gVisor), which sees sandbox paths."""
        return self.isolation != "none"

    @property
    def workspace(self) -> str:
        """The workspace as the session's processes see it."""
        return WORKSPACE_ROOT if self.isolated else self.workspace_dir

    def to_process_path(self, sandbox_path: str) -> str:
        """Map a ``/home/user/...`` path to what the session's processes see."""
        if self.isolated:
            return sandbox_path
        return self.workspace_dir + sandbox_path[len(WORKSPACE_ROOT) :]

    @property
    def sandbox_ports_dir(self) -> str | None:
        """`ports_dir` as the session's processes see it."""
        if self.ports_dir is None:
            return None
        return PORTS_DIR if self.isolated else self.ports_dir

    def _ports_bind(self) -> list[tuple[str, str]]:
        return [] if self.ports_dir is None else [(self.ports_dir, PORTS_DIR)]

    @property
    def python_executable(self) -> str:
        return self.python.sandbox_executable() if self.isolated else self.python.executable

    @property
    def environment_prefix(self) -> str | None:
        """The sandbox environment's prefix as the session's processes see it."""
        if self.sandbox_environment is None:
            return None
        return SANDBOX_ENVIRONMENT_DIR if self.isolated else self.sandbox_environment

    @property
    def site_packages(self) -> list[str]:
        prefix = self.environment_prefix
        if prefix is not None:
            return [f"{prefix}/lib/python{self.python.version}/site-packages"]
        if self.isolated:
            return self.python.sandbox_site_packages()
        return list(self.python.site_packages)

    @property
    def packages_dir(self) -> str:
        return f"{self.workspace}/{PACKAGES_DIR}"

    @property
    def bash(self) -> str:
        if self.isolated:
            return "/bin/bash"
        return next((p for p in _BASH_CANDIDATES if os.path.exists(p)), "bash")

    def _runtime_files(self) -> tuple[str, str, str, list[str]]:
        """(worker to run, kernel_state source, cloudpickle source, the guest modules) as the
        session's processes see them; the worker and the guest modules precompiled when
        `compile_worker` could."""
        bytecode = self.worker_bytecode
        if self.isolated:
            suffix = ".pyc" if bytecode else ".py"
            return (
                f"{SANDBOX_RUNTIME_DIR}/worker{suffix}",
                f"{SANDBOX_RUNTIME_DIR}/kernel_state.py",
                f"{SANDBOX_RUNTIME_DIR}/cloudpickle.py",
                [f"{SANDBOX_RUNTIME_DIR}/{name}{suffix}" for name in _GUEST_MODULES],
            )
        pickler = str(cloudpickle_path())
        if bytecode:
            modules = [_module_bytecode(bytecode, name) for name in _GUEST_MODULES]
            return bytecode, str(_KERNEL_STATE_SOURCE), pickler, modules
        modules = [str(source) for source in _GUEST_MODULES.values()]
        return str(_WORKER_SOURCE), str(_KERNEL_STATE_SOURCE), pickler, modules

    def environment(self) -> dict[str, str]:
        """The allow-listed environment of every process in the session; never the host's."""
        bin_dirs = [f"{self.packages_dir}/bin", os.path.dirname(self.python_executable)]
        if self.environment_prefix is not None:
            bin_dirs.insert(1, f"{self.environment_prefix}/bin")
        env = {
            "PATH": ":".join([*bin_dirs, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": self.workspace,
            "USER": "user",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "PYTHONPATH": ":".join([self.packages_dir, *self.site_packages]),
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": "/tmp/matplotlib",
        }
        library_path = self.python.sandbox_library_path() if self.isolated else None
        if library_path:
            env["LD_LIBRARY_PATH"] = library_path
        env.update(self.extra_env)
        return env

    def worker_command(self, request_fd: int, event_fd: int, control_fd: int) -> list[str]:
        """The argv that starts the session's persistent Python worker, given the descriptors
        its three pipes have in this process (`control_pipe` made the control one)."""
        worker, kernel_state, pickler, guests = self._runtime_files()
        after_fds = [kernel_state, pickler, *guests, self.packages_dir, *self.site_packages]
        if self.gvisor is not None:
            egress = [] if self.egress_dir is None else [(self.egress_dir, EGRESS_DIR)]
            relay = [self.python_executable, "-I", "-S", "-c", EGRESS_FORWARDER, EGRESS_SOCKET]
            # Clients that ignore the proxy variables: the Sentry's network stack is reached
            # from inside only, so the relay opens the transparent path there.
            relay.append(TRANSPARENT)
            # runsc passes only stdio: the requests and events are the container's stdin and
            # stdout (WorkerProcess.start(stdio=True)); the worker opens its control FIFO by name.
            python = self.python_executable
            args = [f"{CHANNEL_DIR}/control", worker, *after_fds]
            inner = self.gvisor.boot(python, "worker", args)
            if egress:
                # The filter first, then the relay beside the worker: both run under it.
                worker_boot = self.gvisor.boot(python, "worker", args, filtered=True)
                inner = self.gvisor.boot(python, "exec", [*relay, *worker_boot])
            return self._gvisor_command(
                inner,
                network=self.network,
                environment=self.environment(),
                read_only=egress,
                read_write=self._ports_bind(),
                channel=self.gvisor.worker_channel(control_fd),
                worker=True,
            )
        fds = [str(request_fd), str(event_fd), str(control_fd)]
        inner = [self.python_executable, "-I", "-S", worker, *fds, *after_fds]
        return self.wrap_networked(inner, read_write=self._ports_bind())

    def wrap_networked(
        self, command: Sequence[str], *, read_write: Sequence[tuple[str, str]] = ()
    ) -> list[str]:
        """`wrap` with the session's own network: the host's, none, or (with a policy) the
        egress proxy's socket bound in and its relay started beside ``command``."""
        if self.egress_dir is None:
            return self.wrap(command, network=self.network, read_write=read_write)
        relay = [self.python_executable, "-I", "-S", "-c", EGRESS_FORWARDER, EGRESS_SOCKET]
        egress = [(self.egress_dir, EGRESS_DIR)]
        return self.wrap([*relay, *command], network=False, read_only=egress, read_write=read_write)

    @property
    def workspace_owner(self) -> tuple[int, int] | None:
        """Who the host's own writes in the workspace must belong to (``None``: the host)."""
        if self.gvisor is not None:
            return SANDBOX_OWNER
        return host_owner() if self.user_namespace is not None else None

    def control_pipe(self) -> tuple[int, int]:
        """The worker's control channel (read end for the worker, write end for the host)."""
        return self.gvisor.control_pipe() if self.gvisor is not None else os.pipe()

    def preexec(self) -> Callable[[], None] | None:
        """What runs in a started process before it execs (the rlimits no cgroup covers).
        gVisor's limits are inside its sandbox: an address-space limit on runsc itself would
        only starve the Sentry."""
        if self.cgroup is None or self.gvisor is not None:
            return None
        return self.cgroup.preexec()

    def wrap(
        self,
        command: Sequence[str],
        *,
        network: bool,
        read_only: Sequence[tuple[str, str]] = (),
        read_write: Sequence[tuple[str, str]] = (),
        environment: Mapping[str, str] | None = None,
        socket_channel: str | None = None,
    ) -> list[str]:
        """``command`` as it must be started to run inside this session's sandbox, with
        ``environment`` instead of the session's own (`environment`) if given.

        ``socket_channel`` (gVisor only): a host directory whose unix sockets the sandbox may
        connect to, at `_gvisor.CHANNEL_DIR` (pip's index proxy).
        """
        if not self.isolated:
            return list(command)
        env = self.environment() if environment is None else environment
        if self.gvisor is not None:
            return self._gvisor_command(
                self.gvisor.boot(self.python_executable, "exec", command),
                network=network,
                environment=env,
                read_only=read_only,
                read_write=read_write,
                channel=socket_channel,
            )
        assert self.bwrap is not None
        return bubblewrap_argv(
            self.bwrap,
            command,
            python=self.python,
            workspace=self.workspace_dir,
            files=self.files,
            env=env,
            network=network,
            read_only=[*self._environment_bind(), *read_only],
            read_write=read_write,
            tmp_size_bytes=self.tmp_size_bytes,
            user_namespace=self.user_namespace,
        )

    def _environment_bind(self) -> list[tuple[str, str]]:
        if self.sandbox_environment is None:
            return []
        return [(self.sandbox_environment, SANDBOX_ENVIRONMENT_DIR)]

    def _gvisor_command(
        self,
        inner: Sequence[str],
        *,
        network: bool,
        environment: Mapping[str, str],
        read_only: Sequence[tuple[str, str]] = (),
        read_write: Sequence[tuple[str, str]] = (),
        channel: str | None = None,
        worker: bool = False,
    ) -> list[str]:
        """A gVisor container with the file system bubblewrap would assemble (same mounts)."""
        assert self.gvisor is not None
        mounts = root_mounts(
            self.python,
            files=self.files,
            network=network,
            read_only=[*self._environment_bind(), *read_only],
        )
        return self.gvisor.command(
            inner,
            mounts=mounts,
            env=environment,
            network=network,
            boot=None,
            workspace=self.workspace_dir,
            read_write=read_write,
            tmp_size_bytes=self.tmp_size_bytes,
            channel=channel,
            host_fifos=worker,
            # pip's index proxy in its channel; the worker's egress proxy in its binds.
            host_sockets=(not worker and channel is not None)
            or any(sandbox == EGRESS_DIR for _, sandbox in read_only),
            socket_servers=worker and self.ports_dir is not None,
        )

    @contextlib.contextmanager
    def spawnable(self, argv: Sequence[str]) -> Iterator[tuple[list[str], tuple[int, ...]]]:
        """The argv to execute and the descriptors to pass for a command from `wrap`:
        bubblewrap's options moved to a descriptor, and the session's cgroups joined first."""
        if self.isolation != "bubblewrap":
            yield self._joined(argv), ()
            return
        joined = () if self.user_namespace is None else (self.user_namespace,)
        with options_via_fd(argv, seccomp=self.seccomp) as (command, fds):
            yield self._joined(command), (*fds, *joined)

    def _joined(self, argv: Sequence[str]) -> list[str]:
        return self.cgroup.join_command(argv) if self.cgroup is not None else list(argv)

    def process_env(self) -> dict[str, str]:
        """Environment of the started process itself (the sandbox sets its own inside)."""
        return {} if self.isolated else self.environment()

    def process_cwd(self) -> str:
        """Working directory of the started process: bubblewrap's is neutral, since the shell
        that joins the cgroups exports it as ``PWD``, which ``/proc/1/environ`` would show."""
        return "/" if self.isolated else self.workspace_dir


def sandbox_files(worker_bytecode: str | None) -> dict[str, str]:
    """The files every sandbox gets as copies (no host path of them is visible inside):
    the generated ``/etc`` files, the worker, the guest modules and the variables module with the
    cloudpickle it pickles with (``{sandbox path: source}``).
    """
    sources = {
        f"{SANDBOX_RUNTIME_DIR}/worker.py": _WORKER_SOURCE,
        f"{SANDBOX_RUNTIME_DIR}/kernel_state.py": _KERNEL_STATE_SOURCE,
        f"{SANDBOX_RUNTIME_DIR}/cloudpickle.py": cloudpickle_path(),
        **{f"{SANDBOX_RUNTIME_DIR}/{name}.py": path for name, path in _GUEST_MODULES.items()},
    }
    if worker_bytecode:
        sources[f"{SANDBOX_RUNTIME_DIR}/worker.pyc"] = Path(worker_bytecode)
        for name in _GUEST_MODULES:
            bytecode = Path(_module_bytecode(worker_bytecode, name))
            sources[f"{SANDBOX_RUNTIME_DIR}/{name}.pyc"] = bytecode
    runtime = {
        path: sealed_file(source.name, source.read_bytes()) for path, source in sources.items()
    }
    return {**etc_files(), **runtime}


_COMPILE_ALL = (
    "import py_compile, sys\n"
    "files = sys.argv[1:]\n"
    "for at in range(0, len(files), 3):\n"
    "    source, cfile, shown = files[at : at + 3]\n"
    "    py_compile.compile(source, cfile=cfile, dfile=shown, doraise=True)\n"
)


def compile_worker(python: PythonInstall, cache_dir: str, *, isolated: bool) -> str | None:
    """Compile the worker and the guest modules once for ``python`` into ``cache_dir``; the
    worker's bytecode path (a guest module's is `_module_bytecode` of it), or ``None`` on failure.

    A script is compiled at every start (only imported modules get cached bytecode), which is a
    good part of a session's cold start. The bytecode is made by the session's own interpreter
    (so its format matches) and names the files as the sandbox sees them, so tracebacks never
    show a host path.
    """
    files = {"worker": _WORKER_SOURCE, **_GUEST_MODULES}
    sources = b"".join(path.read_bytes() for path in files.values())
    digest = hashlib.sha256(sources + f"{python.executable}\0{isolated}".encode()).hexdigest()[:16]
    target = Path(cache_dir) / f"worker-{python.version}-{digest}.pyc"
    compiled = [
        (path, Path(_module_bytecode(str(target), name)), f"{name}.py")
        for name, path in files.items()
    ]
    if all(cfile.is_file() for _, cfile, _ in compiled):
        return str(target)
    # Unique per call: providers in other threads or processes may compile here too.
    staged = [cfile.with_suffix(f".{uuid.uuid4().hex}.tmp") for _, cfile, _ in compiled]
    # One interpreter compiles every file: its start-up is most of the cost.
    arguments = [
        argument
        for (source, _, name), staging in zip(compiled, staged, strict=True)
        for argument in (
            str(source),
            str(staging),
            f"{SANDBOX_RUNTIME_DIR}/{name}" if isolated else str(source),
        )
    ]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [python.executable, "-I", "-c", _COMPILE_ALL, *arguments],
            check=True,
            capture_output=True,
            timeout=60,
            env={"PATH": os.defpath},
        )
        # The guest modules first: a worker's bytecode on disk means theirs are there too.
        for (_, cfile, _), staging in reversed(list(zip(compiled, staged, strict=True))):
            os.replace(staging, cfile)
    except (OSError, subprocess.SubprocessError):
        for staging in staged:
            staging.unlink(missing_ok=True)
        return None
    return str(target)


def _module_bytecode(worker_bytecode: str, module: str) -> str:
    """Where `compile_worker` put a module's bytecode (``"worker"`` or a guest module's name,
    as the sandbox knows it), beside the worker's."""
    directory, name = os.path.split(worker_bytecode)
    return os.path.join(directory, module + name.removeprefix("worker"))


__all__ = [
    "PACKAGES_DIR",
    "PORTS_DIR",
    "SANDBOX_ENVIRONMENT_DIR",
    "Isolation",
    "Launcher",
    "compile_worker",
    "sandbox_files",
]
