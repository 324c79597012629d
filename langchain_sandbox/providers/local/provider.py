"""The local provider: isolated sandboxes on this machine with bubblewrap (or gVisor), no account,
no daemon.

Each session lives in ``<base_dir>/sessions/<session_id>/`` (mode 0700): its workspace (bound at
``/home/user``) and a ``session.json`` record used to find sessions left behind by a process that
died (``list_sessions`` / ``destroy``, for ``gc``). A local sandbox
lives and dies with the process that made it, so ``attach`` finds only sessions of this process.

Just past 500 lines: the provider owns creation for both isolation levels, the workspace's own
file system and the leftover cleanup; each has its module, and this one only wires them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_sandbox.core.environment import validate_env
from langchain_sandbox.core.paths import HOME_ENV, state_dir
from langchain_sandbox.core.paths import environments_dir as default_environments_dir
from langchain_sandbox.errors import ConfigurationError, InvalidInputError, SandboxError
from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.base import (
    Provider,
    SessionRecord,
    SessionSpec,
    install_spec_packages,
)
from langchain_sandbox.providers.local._bubblewrap import (
    PythonInstall,
    describe_python,
)
from langchain_sandbox.providers.local._cgroups import (
    CgroupSupport,
    SessionCgroup,
    detect_cgroups,
)
from langchain_sandbox.providers.local._egress_proxy import (
    EgressProxy,
    EgressUpstream,
    prepare_egress,
)
from langchain_sandbox.providers.local._egress_sandbox import egress_env
from langchain_sandbox.providers.local._gvisor import (
    GvisorSandbox,
    host_limits,
    kill_containers,
    make_owned,
    prepare_rootfs,
    usable_runsc,
)
from langchain_sandbox.providers.local._host_user import host_owner, sandbox_user_namespace
from langchain_sandbox.providers.local._launcher import (
    PACKAGES_DIR,
    Isolation,
    Launcher,
    compile_worker,
    sandbox_files,
)
from langchain_sandbox.providers.local._packages import PackageIndex
from langchain_sandbox.providers.local._probe import usable_bubblewrap
from langchain_sandbox.providers.local._seccomp import SyscallFilter, seccomp_program
from langchain_sandbox.providers.local._workspace_fs import (
    mount_ports,
    mount_workspace,
    release_directory,
    unavailable_reason,
)
from langchain_sandbox.providers.local.environments import (
    DEFAULT,
    DEFAULT_ENVIRONMENT,
    HOST_ENVIRONMENT,
    EnvironmentCache,
    EnvironmentStatus,
    Progress,
    SandboxEnvironment,
    environment_names,
    print_progress,
)
from langchain_sandbox.providers.local.session import LOCAL_CAPABILITIES, LocalSession
from langchain_sandbox.providers.names import LOCAL

logger = logging.getLogger(__name__)

_SESSION_ID = re.compile(r"^[0-9a-f]{32}$")
_RECORD_FILE = "session.json"
_STAGING_PREFIX = ".new-"
_PORTS_DIR_NAME = "ports"
# Inodes of a workspace file system whose file count is not limited (Limits.workspace_files=None):
# ext4's own default for a 16 GiB file system.
_UNLIMITED_FILES = 1 << 20


default_base_dir = state_dir


class LocalProvider(Provider):
    """Sandboxes on this machine, isolated with bubblewrap (or gVisor).

    Args:
        base_dir: Where session directories live (default: `default_base_dir`).
        isolation: ``"bubblewrap"`` (default: namespaces and a seccomp filter; the fastest
            start). ``"gvisor"`` runs the same sandbox under gVisor's ``runsc``, whose user-space
            kernel serves the code's system calls, so the host kernel is not its attack surface
            (slower to start, slower system calls; needs ``runsc`` and a root host process; see
            ``docs/isolation.md``). ``"none"`` runs code directly on the host, with
            only the limits and the scrubbed environment; it must be asked for by name and
            warns, because sandboxed code can then read and change anything this user can.
        python: Interpreter the sessions run (default: the one running this process).
        package_index: Where ``install_packages`` may fetch from (trusted, host-side); sandbox
            environments name their own (``SandboxEnvironment.package_index``).
        bwrap: Path of the bubblewrap binary (default: ``bwrap`` on ``PATH``).
        runsc: Path of gVisor's ``runsc`` (with ``isolation="gvisor"``; default: on ``PATH``).
        environments: Sandbox environments sessions may select with ``SessionSpec(template=...)``,
            besides ``"default"`` (numpy, pandas, matplotlib; an environment named ``"default"``
            replaces it) and ``"host"`` (the interpreter's own site-packages: the host
            application's packages become importable, so only when asked for by name).
        environments_dir: Where built environments, and the sandbox worker's bytecode, are
            cached (default: `environments_dir`), shared by every process.
        progress: Receives the lines of an environment build (default: standard error).
        syscall_filter: ``"seccomp"`` (default) installs the sandbox's seccomp filter (no nested
            namespaces, mounts, kernel keyring, ``bpf``...; see ``docs/isolation.md``); without
            libseccomp sessions then refuse to start. ``"none"`` runs without it; it must be
            asked for by name, because the sandbox then reaches the whole kernel interface.
        egress_upstream: How the egress proxy of sessions with a
            [`NetworkPolicy`][langchain_sandbox.NetworkPolicy] verifies and finds upstream
            servers (default: the host's trust store and resolver; see ``docs/network.md``).
        expose_host: The host address `Session.expose_port` listens on (default
            ``"127.0.0.1"``: only this machine can open the URLs). Another address (e.g.
            ``"0.0.0.0"``) makes exposed ports reachable from wherever that address is; see
            ``docs/local-provider.md``.

    Raises:
        IsolationUnavailableError: with ``isolation="bubblewrap"``, bubblewrap is missing or
            cannot create namespaces here; with ``"gvisor"``, runsc is missing or cannot start a
            sandbox (the message says how to fix it). Checked when the provider is built (it
            starts one sandbox per process), so build it off any event loop;
            [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] does.
    """

    name = LOCAL
    capabilities = LOCAL_CAPABILITIES

    def __init__(
        self,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        isolation: Isolation = "bubblewrap",
        python: str | None = None,
        package_index: PackageIndex | None = None,
        bwrap: str | None = None,
        runsc: str | None = None,
        environments: Sequence[SandboxEnvironment] = (),
        environments_dir: str | os.PathLike[str] | None = None,
        progress: Progress | None = None,
        syscall_filter: SyscallFilter = "seccomp",
        egress_upstream: EgressUpstream | None = None,
        expose_host: str = "127.0.0.1",
    ) -> None:
        if isolation not in ("bubblewrap", "gvisor", "none"):
            raise InvalidInputError(
                f"isolation must be 'bubblewrap', 'gvisor' or 'none', not {isolation!r}."
            )
        if syscall_filter not in ("seccomp", "none"):
            raise InvalidInputError(
                f"syscall_filter must be 'seccomp' or 'none', not {syscall_filter!r}."
            )
        self.base_dir = Path(base_dir) if base_dir is not None else default_base_dir()
        self.isolation: Isolation = isolation
        self.python = python or sys.executable
        self.package_index = package_index or PackageIndex()
        self.bwrap = bwrap
        self.environments = {DEFAULT_ENVIRONMENT: DEFAULT}
        for environment in environments:
            if not isinstance(environment, SandboxEnvironment):
                raise InvalidInputError(
                    f"environments must be SandboxEnvironment objects, not {environment!r}."
                )
            self.environments[environment.name] = environment
        self.environments_dir = (
            Path(environments_dir) if environments_dir is not None else default_environments_dir()
        )
        self.progress = progress or print_progress
        self.syscall_filter: SyscallFilter = syscall_filter
        self.egress_upstream = egress_upstream
        if not isinstance(expose_host, str) or not expose_host:
            raise InvalidInputError(f"expose_host must be a host address, not {expose_host!r}.")
        self.expose_host = expose_host
        # Checked now, so a machine that cannot isolate fails when the provider is built.
        self._bwrap_path = usable_bubblewrap(bwrap) if isolation == "bubblewrap" else None
        self._runsc_path = usable_runsc(runsc) if isolation == "gvisor" else None
        self._gvisor_roots: dict[bytes | None, str] = {}
        self._python_install: PythonInstall | None = None
        self._worker_bytecode: str | None = None
        self._sandbox_files: dict[str, str] = {}
        self._cgroups: CgroupSupport | None = None
        self._environment_lock = threading.Lock()
        self._sessions: dict[str, LocalSession] = {}

    @property
    def sessions_dir(self) -> Path:
        return self.base_dir / "sessions"

    async def _environment(self) -> tuple[PythonInstall, CgroupSupport]:
        """Facts about this machine (and the worker compiled for it), found once per provider."""
        if self._python_install is not None and self._cgroups is not None:
            return self._python_install, self._cgroups
        return await asyncio.to_thread(self._find_environment)

    def _find_environment(self) -> tuple[PythonInstall, CgroupSupport]:
        # Under a lock: sessions created at once would each compile the worker and set the
        # bytecode and the sandbox's copy of it apart, so a session could start with a worker
        # path whose file its sandbox was not given.
        with self._environment_lock:
            if self._python_install is None:
                python = describe_python(self.python)
                # Beside the environments: content-addressed like them, so every provider and
                # process of this machine shares one compile.
                self._worker_bytecode = compile_worker(
                    python,
                    str(self.environments_dir / ".bytecode"),
                    isolated=self.isolation != "none",
                )
                if self.isolation != "none":
                    self._sandbox_files = sandbox_files(self._worker_bytecode)
                self._python_install = python
            if self._cgroups is None:
                self._cgroups = detect_cgroups()
            return self._python_install, self._cgroups

    async def create(self, spec: SessionSpec | None = None) -> LocalSession:
        spec = spec or SessionSpec()
        env = validate_env(spec.env)
        policy = spec.network if isinstance(spec.network, NetworkPolicy) else None
        if policy is not None:
            if self.isolation == "none":
                raise ConfigurationError(
                    "A NetworkPolicy needs LocalProvider(isolation='bubblewrap') or 'gvisor': "
                    "isolation='none' cannot route the sandbox through its proxy."
                )
            env = {**env, **policy.sandbox_env(), **egress_env(policy)}
        bwrap = self._bwrap_path
        seccomp: bytes | None = None
        user_namespace: int | None = None
        if self.isolation != "none":
            if self.syscall_filter == "seccomp":
                seccomp = await asyncio.to_thread(seccomp_program)
            if host_owner() is not None:
                user_namespace = await asyncio.to_thread(sandbox_user_namespace)
        else:
            warnings.warn(
                "LocalProvider(isolation='none') runs sandboxed code directly on this machine: "
                "it can read and change anything this user can, and reach the network.",
                RuntimeWarning,
                stacklevel=2,
            )
        python, support = await self._environment()
        environment = await self._sandbox_environment(spec.template, python, bwrap, seccomp)
        if environment is not None:
            # The sandbox imports from the environment, never from the host's site-packages.
            python = dataclasses.replace(python, site_packages=())
        session_id = uuid.uuid4().hex
        directory = self.sessions_dir / session_id
        created_at = time.time()
        memory_mb = spec.limits.memory_mb
        memory_bytes = memory_mb * 1024 * 1024 if memory_mb else None
        cgroup = SessionCgroup()
        try:
            try:
                await asyncio.to_thread(
                    self._make_directory, directory, session_id, spec, created_at
                )
            except OSError as exc:
                raise _directory_error(exc) from None
            host_memory, host_processes = memory_bytes, spec.limits.max_processes
            if self.isolation == "gvisor":
                host_memory, host_processes = host_limits(memory_bytes, host_processes)
            cgroup = await asyncio.to_thread(
                SessionCgroup.create,
                support,
                session_id,
                memory_bytes=host_memory,
                max_processes=host_processes,
            )
            egress: EgressProxy | None = None
            egress_dir: str | None = None
            if policy is not None:
                egress, egress_dir = await asyncio.to_thread(
                    prepare_egress, str(directory), policy, self.egress_upstream
                )
            gvisor = None
            if self._runsc_path is not None:
                gvisor = GvisorSandbox(
                    runsc=self._runsc_path,
                    rootfs=await asyncio.to_thread(self._gvisor_root, seccomp),
                    directory=str(directory / "gvisor"),
                    seccomp=seccomp is not None,
                    max_processes=spec.limits.max_processes,
                    memory_bytes=None if cgroup.limits_memory else memory_bytes,
                )
            launcher = Launcher(
                isolation=self.isolation,
                python=python,
                workspace_dir=str(directory / "workspace"),
                bwrap=bwrap,
                network=spec.network is True,
                files=self._sandbox_files,
                extra_env=env,
                tmp_size_bytes=spec.limits.tmp_bytes or memory_bytes,
                worker_bytecode=self._worker_bytecode,
                cgroup=cgroup,
                sandbox_environment=environment,
                seccomp=seccomp,
                user_namespace=user_namespace,
                gvisor=gvisor,
                policy=policy,
                egress_dir=egress_dir,
                ports_dir=str(directory / _PORTS_DIR_NAME),
            )
            session = LocalSession(
                session_id=session_id,
                spec=spec,
                directory=str(directory),
                launcher=launcher,
                cgroup=cgroup,
                package_index=self.package_index,
                created_at=created_at,
                on_close=self._forget,
                egress=egress,
                expose_host=self.expose_host,
            )
            await session.start()
        except BaseException:
            await asyncio.to_thread(cgroup.remove)
            # A directory that could not be made may not be removable either; the first error
            # is the one to report.
            with contextlib.suppress(OSError):
                await asyncio.to_thread(release_directory, directory)
            raise
        self._sessions[session_id] = session
        await install_spec_packages(session)
        return session

    def _gvisor_root(self, seccomp: bytes | None) -> str:
        """The read-only root of this provider's gVisor containers (one per filter)."""
        with self._environment_lock:
            if seccomp not in self._gvisor_roots:
                self._gvisor_roots[seccomp] = prepare_rootfs(
                    str(self.base_dir / "runtime"), self._sandbox_files, seccomp
                )
            return self._gvisor_roots[seccomp]

    def _selected(self, template: str | None) -> SandboxEnvironment | None:
        """The environment ``template`` names (``None`` for ``"host"``), or raise."""
        name = DEFAULT_ENVIRONMENT if template is None else template
        if name == HOST_ENVIRONMENT:
            return None
        if name not in self.environments:
            known = ", ".join(repr(n) for n in environment_names(list(self.environments.values())))
            raise InvalidInputError(
                f"The local provider has no sandbox environment {name!r} (known: {known}). "
                "Define it with LocalProvider(environments=[SandboxEnvironment("
                f"{name!r}, requirements=[...])])."
            )
        return self.environments[name]

    def _cache(
        self, python: PythonInstall, bwrap: str | None, seccomp: bytes | None = None
    ) -> EnvironmentCache:
        return EnvironmentCache(
            self.environments_dir,
            python=python,
            isolation=self.isolation,
            bwrap=bwrap,
            runsc=self._runsc_path,
            seccomp=seccomp,
        )

    async def _sandbox_environment(
        self,
        template: str | None,
        python: PythonInstall,
        bwrap: str | None,
        seccomp: bytes | None,
    ) -> str | None:
        """Host directory of the environment ``template`` selects, built first if needed."""
        environment = self._selected(template)
        if environment is None:
            return None
        cache = self._cache(python, bwrap, seccomp)
        status = await asyncio.to_thread(cache.ensure, environment, self.progress, measure=False)
        return str(status.path)

    async def prepare_environment(self, name: str = DEFAULT_ENVIRONMENT) -> EnvironmentStatus:
        """Build the environment ``name`` now unless it is built (sessions would on first use).

        Raises:
            InvalidInputError: no such environment (or ``"host"``, which is never built).
            EnvironmentBuildError: the build failed.
        """
        environment = self._selected(name)
        if environment is None:
            raise InvalidInputError(f"{HOST_ENVIRONMENT!r} is the host's own; it is not built.")
        bwrap = self._bwrap_path
        seccomp: bytes | None = None
        if self.isolation != "none" and self.syscall_filter == "seccomp":
            seccomp = await asyncio.to_thread(seccomp_program)
        python, _ = await self._environment()
        return await asyncio.to_thread(
            self._cache(python, bwrap, seccomp).ensure, environment, self.progress
        )

    async def environment_statuses(self) -> list[EnvironmentStatus]:
        """This provider's environments (built or not) and any other built in its cache."""
        python, _ = await self._environment()
        bwrap = self.bwrap if self.isolation == "bubblewrap" else None
        cache = self._cache(python, bwrap)

        def collect() -> list[EnvironmentStatus]:
            known = [cache.status(e) for e in self.environments.values()]
            keys = {s.key for s in known}
            return known + [s for s in cache.built() if s.key not in keys]

        return await asyncio.to_thread(collect)

    def _make_directory(
        self, directory: Path, session_id: str, spec: SessionSpec, created_at: float
    ) -> None:
        directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        record: dict[str, Any] = {
            "provider": LOCAL,
            "session_id": session_id,
            "sandbox_id": session_id,
            "created_at": created_at,
            "metadata": dict(spec.metadata),
            "state": {"owner_pid": os.getpid()},
        }
        # The record goes in first, under a name `list_sessions` skips, and the directory takes
        # its session's name only then: a session directory always says whose it is, so `gc`
        # (or another process's `destroy`) never takes a session still being made for an orphan.
        staging = directory.with_name(f"{_STAGING_PREFIX}{session_id}")
        staging.mkdir(mode=0o700)
        (staging / _RECORD_FILE).write_text(json.dumps(record), encoding="utf-8")
        staging.rename(directory)
        workspace = directory / "workspace"
        workspace.mkdir(mode=0o700)
        limits = spec.limits
        if (
            limits.workspace_bytes is not None or limits.workspace_files is not None
        ) and unavailable_reason() is None:
            try:
                mount_workspace(
                    directory,
                    workspace,
                    workspace_bytes=limits.workspace_bytes,
                    workspace_files=limits.workspace_files or _UNLIMITED_FILES,
                )
            except OSError as exc:
                # No loop device left, say: the quota is then measured, as where not root.
                logger.warning("workspace quota measured only, no file system of its own: %s", exc)
        (workspace / PACKAGES_DIR).mkdir(mode=0o755)
        # Where the sandbox's port relays listen (its own: no other sandbox binds it).
        ports = directory / _PORTS_DIR_NAME
        ports.mkdir(mode=0o700)
        if os.geteuid() == 0 and unavailable_reason() is None:
            try:
                mount_ports(ports)
            except OSError as exc:  # the bind then shows the directory's host path inside
                logger.warning("port directory not a file system of its own: %s", exc)
        owner = host_owner()
        if owner is not None:
            # The sandbox runs as an unprivileged host user: its workspace is that user's.
            for path in (workspace, workspace / PACKAGES_DIR, ports):
                os.chown(path, *owner)
        if self.isolation == "gvisor":
            make_owned(str(workspace))
            make_owned(str(ports))

    def _forget(self, session: LocalSession) -> None:
        self._sessions.pop(session.session_id, None)

    async def _attach(self, record: SessionRecord) -> LocalSession | None:
        session = self._sessions.get(str(record.get("session_id", "")))
        if session is None or not await session.is_alive():
            return None
        return session

    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        records = await asyncio.to_thread(self._read_records)
        wanted = dict(metadata or {})
        return [
            record
            for record in records
            if all(record.get("metadata", {}).get(k) == v for k, v in wanted.items())
        ]

    def _read_records(self) -> list[SessionRecord]:
        records: list[SessionRecord] = []
        if not self.sessions_dir.is_dir():
            return records
        for entry in sorted(self.sessions_dir.iterdir()):
            if not _SESSION_ID.match(entry.name):
                continue
            try:
                raw = json.loads((entry / _RECORD_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raw = {}
            state = dict(raw.get("state") or {}) if isinstance(raw, dict) else {}
            owner = state.get("owner_pid")
            state["live"] = entry.name in self._sessions
            state["orphaned"] = not state["live"] and not _process_exists(owner)
            metadata = raw.get("metadata") if isinstance(raw, dict) else None
            records.append(
                {
                    "provider": LOCAL,
                    "session_id": entry.name,
                    "sandbox_id": entry.name,
                    "created_at": float(raw.get("created_at", 0.0)) if raw else 0.0,
                    "metadata": {str(k): str(v) for k, v in (metadata or {}).items()},
                    "state": state,
                }
            )
        return records

    async def _destroy(self, record: SessionRecord) -> bool:
        session_id = str(record.get("session_id", ""))
        if not _SESSION_ID.match(session_id):
            raise InvalidInputError(f"{session_id!r} is not a local session id.")
        session = self._sessions.get(session_id)
        if session is not None:
            await session.close()
            return True
        directory = self.sessions_dir / session_id
        _, support = await self._environment()
        leftover = SessionCgroup.leftover(support, session_id)
        await asyncio.to_thread(leftover.remove)
        if not directory.is_dir():
            return False
        # A gVisor session's containers, if any outlived their process: stopped, state removed.
        await asyncio.to_thread(kill_containers, str(directory / "gvisor"))
        await asyncio.to_thread(release_directory, directory)
        return True

    async def aclose(self) -> None:
        """Close every session this provider made (they cannot outlive the process anyway)."""
        for session in list(self._sessions.values()):
            await session.close()


def _process_exists(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 0)
        return True
    return False


def _directory_error(exc: OSError) -> SandboxError:
    # The model reads this (a tool's error) and logs keep it: it names the failure and how to
    # fix it, never the directory itself, which lies in the user's home.
    return SandboxError(
        "The local provider could not create the session's directory "
        f"({exc.strerror or type(exc).__name__}). Give it a writable one: its base_dir, "
        f"or ${HOME_ENV} (default $XDG_STATE_HOME/langchain-sandbox).",
        provider=LOCAL,
    )


__all__ = ["HOME_ENV", "LocalProvider", "default_base_dir"]
