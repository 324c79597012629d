"""Sandbox environments of the local provider: the local twin of E2B templates and Runloop blueprints.

A [`SandboxEnvironment`][langchain_sandbox.SandboxEnvironment] names a list of requirements. The first session that selects it
(``SessionSpec(template=name)``; ``None`` selects ``"default"``) builds it once for this machine:
a virtualenv made from the sessions' interpreter, with the requirements installed by pip. Sessions
then bind the environment's prefix read-only at ``/opt/environment`` and import from its
site-packages, never from the host application's virtualenv: the application's own packages
(langchain, psycopg, its code) are not importable in the sandbox unless it asks for them, either
with the ``"host"`` environment (the interpreter's own site-packages, the behaviour before
environments existed) or by listing them in an environment's requirements.

Built environments are *content-addressed*: the directory's name is a hash of everything that
decides its contents (the requirements, the interpreter's path and exact build, where pip may
fetch from, the isolation mode), so changing any input builds a new one and two processes asking
for the same inputs share one. Building is safe under concurrency: a lock file lets one process
build while the others wait, and the finished environment appears with one atomic rename.

Threat model of the build: pip runs the *application's* requirements (trusted by whoever
configured them), not model code; still, installing runs code from the index (build backends,
``setup.py``), so with bubblewrap (or gVisor) the build runs in a sandbox of its own like
``install_packages``: scrubbed environment, no host home or secrets, only the environment being
built writable, network only when the index is remote. An environment built at either level
serves both: its files are the same, and sessions only read them.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_sandbox.core.requirements import validate_requirements
from langchain_sandbox.errors import EnvironmentBuildError, InvalidInputError
from langchain_sandbox.providers.local._bubblewrap import PythonInstall, etc_files
from langchain_sandbox.providers.local._gvisor import GvisorSandbox, make_owned, prepare_rootfs
from langchain_sandbox.providers.local._launcher import (
    SANDBOX_ENVIRONMENT_DIR,
    Isolation,
    Launcher,
)
from langchain_sandbox.providers.local._packages import PackageIndex, system_ca_bundle

DEFAULT_ENVIRONMENT = "default"
"""Name of the environment a session gets when its spec names none."""

HOST_ENVIRONMENT = "host"
"""Name of the opt-in environment that is the interpreter's own site-packages (the host's venv)."""

DEFAULT_REQUIREMENTS = ("numpy>=1.26,<3", "pandas>=2.2,<3", "matplotlib>=3.8,<4")
"""The code-interpreter stack of the default environment."""

BUILD_TIMEOUT = 1800.0
"""Longest a build may take (seconds) before it is stopped."""

Progress = Callable[[str], None]
"""Receives one line at a time while an environment is being built."""

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_FORMAT = 1
_TAIL_LINES = 20
# What pip prints when it cannot reach an index (name resolution, refused or timed-out
# connections, proxies): worth a message that says so rather than only pip's last lines.
_UNREACHABLE = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name "
    r"resolution|Name or service not known|Network is unreachable|Connection refused|"
    r"ConnectTimeoutError|ProxyError|Could not fetch URL"
)
_CREDENTIALS = re.compile(r"://[^/@\s]+@")


@dataclass(frozen=True)
class SandboxEnvironment:
    """A Python environment local sessions can run in, selected with ``SessionSpec(template=name)``.

    Attributes:
        name: What ``SessionSpec.template`` names (lowercase letters, digits, ``-_.``).
        requirements: Plain requirements (``"numpy"``, ``"pandas==2.2.3"``); no options, URLs or
            paths: to install a package of your own, put its wheel in a directory and name that
            directory in ``package_index.find_links``.
        package_index: Where pip may fetch from (``None``: PyPI, or what ``index_url`` says).
            ``PackageIndex(find_links=[wheel_dir], no_index=True)`` builds offline. This is the
            application's setting; it is independent of where ``install_packages`` (the model's
            installs) may fetch from.
        extends: An environment to build on: ``"default"`` (numpy, pandas, matplotlib) or a
            [`SandboxEnvironment`][langchain_sandbox.SandboxEnvironment]. Its requirements come first and are resolved with these
            in one pip run, so every environment extending one parent shares its constraints
            (``pandas>=2.2,<3`` of the default stays true next to ``"pandas"`` here); its
            ``package_index`` is used when this one gives none.
    """

    name: str
    requirements: tuple[str, ...] = ()
    package_index: PackageIndex | None = None
    extends: SandboxEnvironment | str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidInputError(
                f"{self.name!r} is not an environment name: use lowercase letters, digits, "
                "'-', '_' and '.' (at most 64)."
            )
        if self.name == HOST_ENVIRONMENT:
            raise InvalidInputError(
                f"{HOST_ENVIRONMENT!r} is reserved for the interpreter's own site-packages."
            )
        if isinstance(self.requirements, str):
            raise InvalidInputError("requirements must be a list of requirements, not a string.")
        requirements = tuple(self.requirements)
        if requirements:
            requirements = tuple(validate_requirements(requirements))
        parent = self.extends
        if parent == DEFAULT_ENVIRONMENT:
            parent = DEFAULT
        if parent is not None:
            if not isinstance(parent, SandboxEnvironment):
                raise InvalidInputError(
                    f"extends must be {DEFAULT_ENVIRONMENT!r} or a SandboxEnvironment, "
                    f"not {parent!r}."
                )
            requirements = (*parent.requirements, *requirements)
            if self.package_index is None:
                object.__setattr__(self, "package_index", parent.package_index)
            object.__setattr__(self, "extends", parent.name)
        object.__setattr__(self, "requirements", requirements)


DEFAULT = SandboxEnvironment(DEFAULT_ENVIRONMENT, DEFAULT_REQUIREMENTS)
"""The default environment: numpy, pandas and matplotlib."""


@dataclass(frozen=True)
class EnvironmentStatus:
    """One environment as this machine has it.

    Attributes:
        name: The environment's name.
        key: Hash of its inputs; the name of its directory.
        path: Host directory it is (or will be) built in.
        built: Whether it is built.
        size_bytes: Its size on disk (0 when not built; ``None`` when not measured: measuring
            walks the whole tree, which a session's start does not need).
        inputs: What it is built from: requirements, interpreter, package index (credentials in
            URLs masked).
        built_now: Whether this call built it (``False``: it was there already).
        build_seconds: How long building took (``None`` when it was not built by this call).
    """

    name: str
    key: str
    path: Path
    built: bool
    size_bytes: int | None
    inputs: dict[str, Any]
    built_now: bool = False
    build_seconds: float | None = None


class EnvironmentCache:
    """The built environments of one interpreter, in one directory, shared by every process.

    Args:
        root: The directory (see `environments_dir`).
        python: The interpreter sessions run; environments are virtualenvs of it.
        isolation: ``"bubblewrap"`` or ``"gvisor"`` builds in a sandbox; ``"none"`` on the host.
        bwrap: The bubblewrap binary (with ``"bubblewrap"``).
        runsc: gVisor's ``runsc`` (with ``"gvisor"``).
        seccomp: The seccomp filter the build sandbox runs under, as sessions do.
    """

    def __init__(
        self,
        root: Path,
        *,
        python: PythonInstall,
        isolation: Isolation,
        bwrap: str | None,
        runsc: str | None = None,
        seccomp: bytes | None = None,
    ) -> None:
        self.root = root
        self.python = dataclasses.replace(python, site_packages=())
        self.isolation: Isolation = isolation
        self.bwrap = bwrap
        self.runsc = runsc
        self.seccomp = seccomp

    @staticmethod
    def _index(environment: SandboxEnvironment) -> PackageIndex:
        return environment.package_index or PackageIndex()

    def inputs(self, environment: SandboxEnvironment) -> dict[str, Any]:
        """Everything that decides what ``environment`` contains (what its key hashes)."""
        options, _ = self._index(environment).pip_options(isolated=False)
        return {
            "format": _FORMAT,
            "requirements": list(environment.requirements),
            "python": self.python.executable,
            "python_build": self.python.build,
            "index": options,
            # Sandboxed builds at either level make the same files (paths as sessions see them).
            "isolation": "none" if self.isolation == "none" else "bubblewrap",
        }

    def key(self, environment: SandboxEnvironment) -> str:
        encoded = json.dumps(self.inputs(environment), sort_keys=True).encode()
        return hashlib.sha256(encoded).hexdigest()[:24]

    def path(self, environment: SandboxEnvironment) -> Path:
        return self.root / self.key(environment)

    def status(self, environment: SandboxEnvironment, *, measure: bool = True) -> EnvironmentStatus:
        """Whether ``environment`` is built, and from what (no building); its size if ``measure``."""
        path = self.path(environment)
        built = path.is_dir()
        return EnvironmentStatus(
            name=environment.name,
            key=path.name,
            path=path,
            built=built,
            size_bytes=(_size(path) if measure else None) if built else 0,
            inputs=_shown(self.inputs(environment)),
        )

    def ensure(
        self, environment: SandboxEnvironment, progress: Progress, *, measure: bool = True
    ) -> EnvironmentStatus:
        """Build ``environment`` unless it is built; wait if another process is building it.

        Raises:
            EnvironmentBuildError: pip failed (no index reachable, a requirement that does not
                resolve); nothing is left behind.
        """
        path = self.path(environment)
        if path.is_dir():
            return self.status(environment, measure=measure)
        self.root.mkdir(parents=True, exist_ok=True)
        with _exclusive(self.root / f".{path.name}.lock", environment.name, progress):
            if path.is_dir():
                return self.status(environment, measure=measure)
            started = time.monotonic()
            self._build(environment, path, progress)
            elapsed = time.monotonic() - started
        progress(f"environment {environment.name!r} built in {elapsed:.0f} s: {path}")
        return dataclasses.replace(
            self.status(environment, measure=measure), built_now=True, build_seconds=elapsed
        )

    def _build(self, environment: SandboxEnvironment, target: Path, progress: Progress) -> None:
        index = self._index(environment)
        isolated = self.isolation != "none"
        options, binds = index.pip_options(isolated=isolated)
        remote = not index.no_index or any("://" in os.fspath(f) for f in index.find_links)
        work = Path(tempfile.mkdtemp(prefix=f".build-{target.name}-", dir=self.root))
        try:
            staging = work / "environment"
            for directory in (staging, work / "home"):
                directory.mkdir(mode=0o755)
            launcher = Launcher(
                isolation=self.isolation,
                python=self.python,
                workspace_dir=str(work / "home"),
                bwrap=self.bwrap,
                files=etc_files() if isolated else {},
                seccomp=self.seccomp,
                gvisor=self._gvisor(work, staging),
            )
            # Inside the build sandbox the environment already sits where sessions will see it,
            # so the paths pip writes into it (scripts' shebangs) hold after the rename.
            prefix = SANDBOX_ENVIRONMENT_DIR if isolated else str(staging)
            writable = [(str(staging), SANDBOX_ENVIRONMENT_DIR)]
            described = ", ".join(environment.requirements) or "no requirements"
            progress(
                f"building sandbox environment {environment.name!r} ({described}); "
                "this happens once per machine and can take a minute"
            )
            steps = [[launcher.python_executable, "-I", "-m", "venv", prefix]]
            if remote:
                # pip then trusts what the machine trusts (a TLS-inspecting proxy included),
                # not only its own copy of certifi.
                bundle = system_ca_bundle()
                options = [*options, "--cert", bundle] if bundle else options
            if environment.requirements:
                steps.append(
                    [
                        f"{prefix}/bin/python",
                        "-I",
                        "-m",
                        "pip",
                        "install",
                        "--no-input",
                        "--no-cache-dir",
                        "--disable-pip-version-check",
                        "--progress-bar",
                        "off",
                        "--retries",
                        "1",
                        "--timeout",
                        "30",
                        *options,
                        "--",
                        *environment.requirements,
                    ]
                )
            for step in steps:
                argv = launcher.wrap(step, network=remote, read_only=binds, read_write=writable)
                _run_step(launcher, argv, environment, progress)
            if self.isolation == "gvisor":
                # Built by the sandbox user; every session only reads it, and nobody but this
                # host user may change what they all import.
                _chown_tree(staging, os.getuid(), os.getgid())
            record = {"name": environment.name, "built_at": time.time(), **self.inputs(environment)}
            _write_atomically(target.with_suffix(".json"), json.dumps(_shown(record)))
            os.rename(staging, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _gvisor(self, work: Path, staging: Path) -> GvisorSandbox | None:
        """The build's gVisor containers (with ``"gvisor"``): their state and root in ``work``,
        and what pip writes owned by the sandbox user."""
        if self.isolation != "gvisor":
            return None
        assert self.runsc is not None
        for directory in (staging, work / "home"):
            make_owned(str(directory))
        return GvisorSandbox(
            runsc=self.runsc,
            rootfs=prepare_rootfs(str(work), etc_files(), self.seccomp),
            directory=str(work / "gvisor"),
            seccomp=self.seccomp is not None,
        )

    def built(self) -> list[EnvironmentStatus]:
        """Every environment built in this cache (by any interpreter or process)."""
        found: list[EnvironmentStatus] = []
        if not self.root.is_dir():
            return found
        for entry in sorted(self.root.iterdir()):
            if not entry.is_dir() or entry.name.startswith("."):
                continue
            try:
                record = json.loads(entry.with_suffix(".json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                record = {}
            found.append(
                EnvironmentStatus(
                    name=str(record.pop("name", "?")),
                    key=entry.name,
                    path=entry,
                    built=True,
                    size_bytes=_size(entry),
                    inputs=record,
                )
            )
        return found


def _run_step(
    launcher: Launcher, argv: list[str], environment: SandboxEnvironment, progress: Progress
) -> None:
    """Run one build command, passing its output on line by line; raise if it fails."""
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    unreachable = False
    with launcher.spawnable(argv) as (command, fds):
        process = subprocess.Popen(
            command,
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=launcher.process_env(),
            cwd=launcher.process_cwd(),
            start_new_session=True,
        )
    timer = threading.Timer(BUILD_TIMEOUT, _kill_group, (process.pid,))
    timer.start()
    try:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                unreachable = unreachable or bool(_UNREACHABLE.search(line))
                tail.append(line)
                progress(line)
        code = process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:
            _kill_group(process.pid)
            process.wait()
    if code == 0:
        return
    output = "\n".join(tail)
    if unreachable:
        cause = (
            "pip could not reach a package index. Connect this machine to the network, or give "
            "the environment a reachable mirror or a directory of wheels to build from offline: "
            f"LocalProvider(environments=[SandboxEnvironment({environment.name!r}, [...], "
            "PackageIndex(index_url=...))]) or "
            "PackageIndex(find_links=['/path/to/wheels'], no_index=True)."
        )
    else:
        cause = f"the command exited with status {code}."
    raise EnvironmentBuildError(
        f"Building sandbox environment {environment.name!r} failed: {cause}\n"
        f"Last lines of its output:\n{_CREDENTIALS.sub('://***@', output)}",
        provider="local",
        details={"environment": environment.name, "exit_code": code},
    )


@contextlib.contextmanager
def _exclusive(lock_path: Path, name: str, progress: Progress) -> Iterator[None]:
    """Hold ``lock_path`` exclusively; say so when another process holds it first."""
    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another process that is building environment {name!r}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)


def _shown(inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` with credentials in index URLs masked (for files and listings)."""
    return {
        key: [_CREDENTIALS.sub("://***@", str(v)) for v in value] if key == "index" else value
        for key, value in inputs.items()
    }


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for directory, names, files in os.walk(root):
        for name in (*names, *files):
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


def _size(path: Path) -> int:
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def print_progress(line: str) -> None:
    """The default `Progress`: each line on standard error, marked as the package's."""
    print(f"[langchain-sandbox] {line}", file=sys.stderr, flush=True)


def environment_names(environments: Sequence[SandboxEnvironment]) -> list[str]:
    """Names a session may select, the opt-in ``"host"`` included."""
    return [*(e.name for e in environments), HOST_ENVIRONMENT]


__all__ = [
    "BUILD_TIMEOUT",
    "DEFAULT",
    "DEFAULT_ENVIRONMENT",
    "DEFAULT_REQUIREMENTS",
    "HOST_ENVIRONMENT",
    "EnvironmentCache",
    "EnvironmentStatus",
    "Progress",
    "SandboxEnvironment",
    "environment_names",
    "print_progress",
]
