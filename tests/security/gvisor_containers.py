"""The gVisor containers of the layer tests, made by the real code path, and the test-only switch
that takes one layer out of one (``test_gvisor_layers.py`` uses them).

A container is made as a session's is (`Launcher.wrap` -> `GvisorSandbox.command`: the bundle's
``config.json`` and the ``runsc`` argv). ``without`` then edits what was generated: it takes the
layers it is given, by the names of the gVisor table of ``README.md`` in this directory, out of the
bundle's spec or the argv. No option of the provider can turn a layer off. ``holds`` reads that
table's settings (``LAYERS``) against a generated container. ``small_host_pids_cgroup`` is the
switch of the host pids cgroup's test: the session's cgroup sized by `host_limits` with gVisor's
share of host tasks taken out, so that the test reaches the limit in a few dozen forks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

from langchain_sandbox.providers.local import _gvisor
from langchain_sandbox.providers.local._bubblewrap import describe_python, etc_files
from langchain_sandbox.providers.local._cgroups import SessionCgroup, detect_cgroups
from langchain_sandbox.providers.local._gvisor import (
    SECCOMP_FILE,
    GvisorSandbox,
    find_runsc,
    host_limits,
    make_owned,
    prepare_rootfs,
)
from langchain_sandbox.providers.local._launcher import Launcher
from langchain_sandbox.providers.local._seccomp import seccomp_program

README = Path(__file__).with_name("README.md")
_ROW = re.compile(r"^\| gvisor `(?P<layer>[a-z-]+)` \| (?P<settings>[^|]+) \| (?P<test>[^|]+) \|$")
PYTHON = describe_python(sys.executable)
FILES = etc_files()
# The limits of every container here; the table's settings name these numbers.
MAX_PROCESSES = 16
MEMORY_BYTES = 256 * 1024 * 1024
TMP_BYTES = 1024 * 1024
# What a root container gets by default elsewhere (Docker's set): the capabilities to give back.
_CONTAINER_CAPABILITIES = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
]

Spec = dict[str, Any]


def _table() -> dict[str, tuple[list[str], str]]:
    """Layer name -> (its settings in the spec or argv, the cell naming the test that proves it)."""
    rows = {}
    for line in README.read_text().splitlines():
        if match := _ROW.match(line.strip()):
            rows[match["layer"]] = (re.findall(r"`([^`]+)`", match["settings"]), match["test"])
    return rows


LAYERS = _table()


def _drop_namespace(kind: str) -> Callable[[Spec], None]:
    def drop(spec: Spec) -> None:
        spec["linux"]["namespaces"].remove({"type": kind})

    return drop


def _drop_rlimit(kind: str) -> Callable[[Spec], None]:
    def drop(spec: Spec) -> None:
        spec["process"]["rlimits"] = [r for r in spec["process"]["rlimits"] if r["type"] != kind]

    return drop


def _root_user(spec: Spec) -> None:
    spec["process"]["user"] = {"uid": 0, "gid": 0}


def _container_capabilities(spec: Spec) -> None:
    capabilities = spec["process"]["capabilities"]
    for kind in capabilities:
        capabilities[kind] = list(_CONTAINER_CAPABILITIES)


def _writable_binds(spec: Spec) -> None:
    # The system directories become writable too, but stay root's on the host: out of reach of
    # the sandbox uid the read-only-binds test runs as (it writes only a directory of its own).
    for mount in spec["mounts"]:
        if mount["type"] == "bind":
            mount["options"] = ["rw" if option == "ro" else option for option in mount["options"]]


def _unsized_tmpfs(spec: Spec) -> None:
    for mount in spec["mounts"]:
        if mount["destination"] in ("/tmp", "/dev/shm"):
            mount["options"] = [o for o in mount["options"] if not o.startswith("size=")]


def _no_filter(spec: Spec) -> None:
    spec["process"]["args"] = ["" if a == SECCOMP_FILE else a for a in spec["process"]["args"]]


def _no_sys(spec: Spec) -> None:
    spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/sys"]


def _set(path: str, value: object) -> Callable[[Spec], None]:
    def assign(spec: Spec) -> None:
        *parents, name = path.split(".")
        node = spec
        for parent in parents:
            node = node[parent]
        node[name] = value

    return assign


@dataclass(frozen=True)
class _Removal:
    """How one layer is taken out: a change to the spec, and argv words swapped or added."""

    spec: Callable[[Spec], None] | None = None
    swap: tuple[str, str] | None = None
    add: str | None = None


# runsc's default network (``sandbox``) would take over the interfaces of the namespace it runs in:
# with the namespace removed too, the host's. The network it gives the sandbox instead is the host's.
REMOVALS = {
    "network-none": _Removal(swap=("--network=none", "--network=host")),
    "network-namespace": _Removal(_drop_namespace("network")),
    "uid": _Removal(_root_user),
    "no-capabilities": _Removal(_container_capabilities),
    "no-new-privileges": _Removal(_set("process.noNewPrivileges", False)),
    "read-only-root": _Removal(_set("root.readonly", False)),
    "read-only-binds": _Removal(_writable_binds),
    "tmpfs-size": _Removal(_unsized_tmpfs),
    "rlimit-nproc": _Removal(_drop_rlimit("RLIMIT_NPROC")),
    "rlimit-as": _Removal(_drop_rlimit("RLIMIT_AS")),
    "seccomp": _Removal(_no_filter),
    "pid-namespace": _Removal(_drop_namespace("pid")),
    "ipc-namespace": _Removal(_drop_namespace("ipc")),
    "uts-namespace": _Removal(_drop_namespace("uts")),
    "mount-namespace": _Removal(_drop_namespace("mount")),
    "empty-sys": _Removal(_no_sys),
    "no-host-sockets": _Removal(add="--host-uds=open"),
}


def bundle_spec(argv: list[str]) -> Path:
    return Path(argv[argv.index("--bundle") + 1]) / "config.json"


def without(argv: list[str], *layers: str) -> list[str]:
    """The container of ``argv`` with ``layers`` taken out: its bundle's spec rewritten in place,
    and the argv to run it by returned."""
    path = bundle_spec(argv)
    spec = json.loads(path.read_text())
    for layer in layers:
        removal = REMOVALS[layer]
        if removal.spec is not None:
            removal.spec(spec)
        if removal.swap is not None:
            old, new = removal.swap
            assert old in argv, f"{layer}: {old} not in the argv"
            argv = [new if word == old else word for word in argv]
        if removal.add is not None:
            run = argv.index("run")
            argv = [*argv[:run], removal.add, *argv[run:]]
    path.write_text(json.dumps(spec))
    return argv


def _split(text: str, separators: str) -> list[str]:
    """``text`` cut at each of ``separators`` outside square brackets (the cuts kept)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0 and char in separators:
            parts += [text[start:index], char]
            start = index + 1
    return [*parts, text[start:]]


def _nodes(spec: Spec, path: str) -> list[Any]:
    """What ``path`` (``a.b[key=value].c``, ``*`` for every value of a mapping) names."""
    nodes: list[Any] = [spec]
    for step in _split(path, ".")[::2]:
        name, _, selector = step.partition("[")
        if name == "*":
            nodes = [value for node in nodes for value in node.values()]
        else:
            nodes = [node[name] for node in nodes if name in node]
        if selector:
            key, _, wanted = selector.rstrip("]").partition("=")
            nodes = [item for node in nodes for item in node if str(item.get(key)) == wanted]
    return nodes


def holds(setting: str, argv: list[str], spec: Spec) -> bool:
    """Whether one documented setting is in a container: ``--flag`` in its argv (``!--flag``:
    not), or a spec path that exists, equals (``=``) or contains (``~``) a JSON value."""
    if setting.startswith("!"):
        return setting[1:] not in argv
    if setting.startswith("--"):
        return setting in argv
    path, *test = _split(setting, "=~")
    nodes = _nodes(spec, path)
    if not test:
        return bool(nodes)
    operator, value = test[0], json.loads("".join(test[1:]))
    if operator == "=":
        return bool(nodes) and all(node == value for node in nodes)
    return bool(nodes) and all(value in node for node in nodes)


@dataclass
class GvisorContainers:
    """A launcher at the gVisor level, as a session's, in a test's own directory."""

    launcher: Launcher
    workspace: Path
    environment: Path
    rootfs: Path

    def argv(self, script: str) -> list[str]:
        """The argv of a container running Python ``script``, made as a session makes it."""
        python = self.launcher.python_executable
        return self.launcher.wrap([python, "-c", script], network=False)

    def run_in(
        self, cgroup: SessionCgroup | None, script: str, *layers: str
    ) -> subprocess.CompletedProcess[str]:
        """Run Python ``script`` in a container with ``layers`` taken out, started as the
        launcher starts it: in the session's ``cgroup`` (joined first), or, as the launcher
        would without it, in none."""
        launcher = replace(self.launcher, cgroup=cgroup)
        argv = launcher.wrap([launcher.python_executable, "-c", script], network=False)
        with launcher.spawnable(without(argv, *layers)) as (command, _):
            return subprocess.run(
                command, capture_output=True, text=True, timeout=120, env={}, cwd="/", check=False
            )

    @property
    def state_dir(self) -> str:
        """The ``runsc`` state directory of these containers (every process of theirs names it)."""
        assert self.launcher.gvisor is not None
        return self.launcher.gvisor.state_dir


def make_containers(tmp_path: Path) -> GvisorContainers:
    """A gVisor launcher as a session's (the filter, the limits above), in ``tmp_path``."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    make_owned(str(workspace))
    # A sandbox environment (shared by every session that names it) the sandbox user could write
    # were it not bound read-only.
    environment = tmp_path / "environment"
    environment.mkdir()
    make_owned(str(environment))
    rootfs = prepare_rootfs(str(tmp_path / "runtime"), FILES, seccomp_program())
    gvisor = GvisorSandbox(
        runsc=find_runsc(),
        rootfs=rootfs,
        directory=str(tmp_path / "gvisor"),
        seccomp=True,
        max_processes=MAX_PROCESSES,
        memory_bytes=MEMORY_BYTES,
    )
    launcher = Launcher(
        isolation="gvisor",
        python=PYTHON,
        workspace_dir=str(workspace),
        files=FILES,
        tmp_size_bytes=TMP_BYTES,
        sandbox_environment=str(environment),
        gvisor=gvisor,
    )
    return GvisorContainers(launcher, workspace, environment, Path(rootfs))


def run(argv: list[str]) -> str:
    """Run a container as the launcher does (no environment, from ``/``): what it printed."""
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={}, cwd="/", check=False
    )
    assert done.returncode == 0, done
    return done.stdout


def worker_argv(sandbox: GvisorContainers) -> Iterator[list[str]]:
    """The argv of the worker's container (one, generated as a session starts its worker)."""
    reader, writer = sandbox.launcher.control_pipe()
    try:
        yield sandbox.launcher.worker_command(0, 1, reader)
    finally:
        os.close(reader)
        os.close(writer)


@contextlib.contextmanager
def small_host_pids_cgroup() -> Iterator[SessionCgroup]:
    """A session's host cgroups as the provider makes them at the gVisor level for
    ``MAX_PROCESSES`` (`host_limits`, `SessionCgroup.create`), but with gVisor's base share
    (2,048 tasks) taken out: 16 host tasks per allowed process, 256. An idle container takes
    about 70; each sandboxed process adds about seven (the ptrace platform's stubs). Removed
    afterwards, with anything still in it."""
    with mock.patch.object(_gvisor, "_HOST_TASKS_BASE", 0):
        _, tasks = host_limits(None, MAX_PROCESSES)
    name = f"gvisor-layer-{uuid.uuid4().hex[:8]}"
    group = SessionCgroup.create(detect_cgroups(), name, memory_bytes=None, max_processes=tasks)
    try:
        yield group
    finally:
        group.remove()


def pids_max_hits(group: SessionCgroup) -> int:
    """How many times a task was refused for the pids limit of ``group`` (``pids.events``)."""
    events = Path(group.directories["pids"], "pids.events").read_text().split()
    return int(dict(zip(events[::2], events[1::2], strict=True))["max"])


def processes_naming(path: str) -> list[str]:
    """The command lines of the host's processes that name ``path`` (``runsc``, its gofer and its
    Sentry name their state directory on theirs)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if path in cmdline:
            found.append(cmdline)
    return found
