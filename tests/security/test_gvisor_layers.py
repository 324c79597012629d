"""Each isolation layer of the gVisor level proven on its own: the attack it stops, run with that
one layer taken out of the container the real code path generates (and the others that would mask
it relaxed), succeeds; with the layer in place it fails.

The containers and the test-only switch ``without`` are ``gvisor_containers.py``'s; the layers,
their spec fields or ``runsc`` flags and the test that proves each are the gVisor table of
``README.md`` in this directory, which ``test_the_spec_and_argv_carry_every_documented_layer``
holds the generated spec and argv against. Layers that the Sentry itself makes unobservable (an
attack gVisor's own kernel stops whether the layer is there or not) have no with/without pair:
the table says so, and ``test_the_sentry_masks_these_layers`` shows their attack failing both
ways.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from isolation_levels import require_gvisor
from network_probe import LoopbackListener

from langchain_sandbox.providers.local._cgroups import SessionCgroup, detect_cgroups
from langchain_sandbox.providers.local._gvisor import host_limits
from langchain_sandbox.providers.local._launcher import SANDBOX_ENVIRONMENT_DIR
from security.gvisor_containers import (
    LAYERS,
    MAX_PROCESSES,
    README,
    REMOVALS,
    GvisorContainers,
    bundle_spec,
    holds,
    make_containers,
    pids_max_hits,
    processes_naming,
    run,
    small_host_pids_cgroup,
    without,
    worker_argv,
)


@pytest.fixture(autouse=True)
def _gvisor() -> None:
    require_gvisor()


@pytest.fixture
def sandbox(tmp_path: Path) -> GvisorContainers:
    return make_containers(tmp_path)


def test_the_spec_and_argv_carry_every_documented_layer(sandbox: GvisorContainers) -> None:
    assert set(LAYERS) == set(REMOVALS)
    names = {name for name in globals() if name.startswith("test_")}
    generated = [sandbox.argv("pass"), *worker_argv(sandbox)]  # a command's, the worker's
    for layer, (settings, cell) in LAYERS.items():
        assert settings, layer
        tests = re.findall(r"test_\w+", cell)
        assert tests, f"{layer}: no test named in {cell!r}"
        assert set(tests) <= names, f"{layer}: no test {cell!r} here"
        for argv in generated:
            path = bundle_spec(argv)
            original = path.read_text()
            spec = json.loads(original)
            missing = [s for s in settings if not holds(s, argv, spec)]
            assert not missing, f"{layer}: {missing} not in the generated container"
            removed = without(argv, layer)
            spec = json.loads(path.read_text())
            assert not all(holds(s, removed, spec) for s in settings), f"{layer}: not removed"
            path.write_text(original)


_HOST_ROW = re.compile(r"^\| gvisor host `(?P<limit>[a-z-]+)` \| [^|]+ \| (?P<test>[^|]+) \|$")


def test_every_gvisor_host_limit_has_a_row() -> None:
    rows = {
        match["limit"]: match["test"].strip()
        for line in README.read_text().splitlines()
        if (match := _HOST_ROW.match(line.strip()))
    }
    assert set(rows) == {"memory-cgroup", "pids-cgroup"}
    for limit, test in rows.items():
        assert test in globals(), f"{limit}: no test {test!r} here"


@pytest.mark.parametrize(
    ("relaxed", "removed", "connects"),
    [
        pytest.param("network-namespace", None, False, id="network-none"),
        pytest.param("network-namespace", "network-none", True, id="without-network-none"),
        pytest.param("network-none", None, False, id="network-namespace"),
        pytest.param("network-none", "network-namespace", True, id="without-network-namespace"),
    ],
)
def test_network_none_and_the_network_namespace_each_alone_keep_the_hosts_loopback_out(
    sandbox: GvisorContainers,
    loopback_listener: LoopbackListener,
    relaxed: str,
    removed: str | None,
    connects: bool,
) -> None:
    """Code reaches a port on the host's 127.0.0.1 only with both network layers gone: with
    ``--network=none`` the Sentry's network stack has nothing but its own loopback; with the
    host's network (``--network=host``) but a network namespace of its own, the Sentry's host
    sockets are made in that empty namespace. Each is run with the other removed."""
    argv = without(sandbox.argv(loopback_listener.probe), relaxed, *([removed] if removed else []))
    assert run(argv).startswith("connected" if connects else "refused")
    assert loopback_listener.reached() is connects


@pytest.mark.parametrize(
    ("relaxed", "removed", "reads"),
    [
        pytest.param("uid", None, False, id="no-capabilities"),
        pytest.param("uid", "no-capabilities", True, id="without-no-capabilities"),
        pytest.param("no-capabilities", None, False, id="uid"),
        pytest.param("no-capabilities", "uid", True, id="without-uid"),
    ],
)
def test_no_capabilities_and_the_sandbox_uid_each_alone_keep_root_privileges_out(
    sandbox: GvisorContainers, relaxed: str, removed: str | None, reads: bool
) -> None:
    """A file of the host's root whose mode forbids reading it is read by sandboxed code only
    as root with the capabilities a container usually gets (``CAP_DAC_OVERRIDE``): the sandbox
    uid alone, or the empty capability sets alone, keep it out. Each is run with the other
    removed."""
    locked = sandbox.workspace / "locked"
    locked.write_text("host-only")
    locked.chmod(0)
    read = (
        "try:\n    print(open('/home/user/locked').read())\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    )
    argv = without(sandbox.argv(read), relaxed, *([removed] if removed else []))
    assert run(argv) == ("host-only\n" if reads else "refused 13\n")


def _plant(path: str) -> str:
    """Python that creates ``path`` and prints ``planted``, or prints why it could not."""
    return (
        f"try:\n    open({path!r}, 'w').write('planted')\n    print('planted')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    )


@pytest.mark.parametrize(
    "layer_on", [True, False], ids=["read-only-root", "without-read-only-root"]
)
def test_the_read_only_root_alone_keeps_files_out_of_the_shared_root(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """The root directory is one host directory for every session of a provider: a file planted
    there (beside the mount points, where a later command's lookups find it) lands on the host,
    in every later session's sandbox. Without ``root.readonly`` code writes there, run as the
    uid that owns it (the sandbox uid removed); with it, ``EROFS``."""
    argv = sandbox.argv(_plant("/planted"))
    argv = without(argv, "uid") if layer_on else without(argv, "uid", "read-only-root")
    assert run(argv) == ("refused 30\n" if layer_on else "planted\n")
    assert (sandbox.rootfs / "planted").exists() is not layer_on


@pytest.mark.parametrize(
    "layer_on", [True, False], ids=["read-only-binds", "without-read-only-binds"]
)
def test_read_only_binds_alone_keep_a_shared_environment_unchanged(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """The system directories, the interpreter and the sandbox environment are the host's own,
    bound in: a module planted in an environment's directory would run in every session that
    uses it. Shown with an environment the sandbox user owns, so that only the read-only bind
    refuses it."""
    argv = sandbox.argv(_plant(f"{SANDBOX_ENVIRONMENT_DIR}/planted.py"))
    if not layer_on:
        argv = without(argv, "read-only-binds")
    assert run(argv) == ("refused 30\n" if layer_on else "planted\n")
    assert (sandbox.environment / "planted.py").exists() is not layer_on


@pytest.mark.parametrize("layer_on", [True, False], ids=["tmpfs-size", "without-tmpfs-size"])
def test_the_tmpfs_size_alone_keeps_the_sandbox_from_filling_memory_through_tmp(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """``/tmp`` is the Sentry's memory: a 2 MiB write to the 1 MiB ``/tmp`` fails (``ENOSPC``);
    without its size, it fills."""
    fill = (
        "try:\n    open('/tmp/fill', 'wb').write(bytes(2 * 1024 * 1024))\n    print('filled')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    )
    argv = sandbox.argv(fill)
    if not layer_on:
        argv = without(argv, "tmpfs-size")
    assert run(argv) == ("refused 28\n" if layer_on else "filled\n")


@pytest.mark.parametrize("layer_on", [True, False], ids=["rlimit-nproc", "without-rlimit-nproc"])
def test_rlimit_nproc_alone_stops_code_that_starts_processes_past_its_limit(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """The Sentry enforces ``RLIMIT_NPROC`` for the sandbox user (not root there): 40 live
    processes are refused past the limit (``EAGAIN``); without it, all start."""
    forks = (
        "import os, time\nstarted = 0\n"
        "try:\n    for _ in range(40):\n"
        "        if os.fork() == 0:\n            time.sleep(2)\n            os._exit(0)\n"
        "        started += 1\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
        "print(started)\n"
    )
    argv = sandbox.argv(forks)
    if not layer_on:
        argv = without(argv, "rlimit-nproc")
    # The limit counts the sandbox user's processes: the first one and its children.
    assert run(argv) == (f"refused 11\n{MAX_PROCESSES - 1}\n" if layer_on else "40\n")


@pytest.mark.parametrize("layer_on", [True, False], ids=["rlimit-as", "without-rlimit-as"])
def test_rlimit_as_alone_stops_code_that_allocates_past_its_limit(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """Where no memory cgroup holds the session, ``RLIMIT_AS`` (enforced by the Sentry) is the
    memory limit: 320 MiB under a 256 MiB limit fails (``MemoryError``); without it, allocated."""
    allocate = (
        "try:\n    data = bytearray(320 * 1024 * 1024)\n    print('allocated')\n"
        "except MemoryError:\n    print('refused')\n"
    )
    argv = sandbox.argv(allocate)
    if not layer_on:
        argv = without(argv, "rlimit-as")
    assert run(argv) == ("refused\n" if layer_on else "allocated\n")


@pytest.fixture
def memory_cgroup() -> Iterator[SessionCgroup]:
    """A session's memory cgroup as the provider makes it at the gVisor level (`host_limits`:
    64 MiB for the code, plus gVisor's own share), removed afterwards."""
    memory, _ = host_limits(64 * 1024 * 1024, None)
    support = detect_cgroups()
    group = SessionCgroup.create(
        support, f"gvisor-layer-{uuid.uuid4().hex[:8]}", memory_bytes=memory, max_processes=None
    )
    if not group.limits_memory:
        group.remove()
        pytest.skip(f"no memory cgroup can be made here: {support.reason}")
    try:
        yield group
    finally:
        group.remove()


@pytest.mark.parametrize("layer_on", [True, False], ids=["memory-cgroup", "without-memory-cgroup"])
def test_the_host_memory_cgroup_alone_stops_code_that_allocates_past_its_limit(
    sandbox: GvisorContainers, memory_cgroup: SessionCgroup, layer_on: bool
) -> None:
    """Where the session has a memory cgroup, it holds ``runsc``, the Sentry and the gofer, and
    is the memory limit (the provider then sets no ``RLIMIT_AS``, removed here too): 512 MiB
    allocated by the code gets the Sentry killed by the host kernel (an OOM kill counted in the
    session's cgroup); started outside it, as the launcher would without the cgroup, the same
    container allocates it all."""
    script = (
        "chunks = [bytearray(16 * 1024 * 1024) for _ in range(32)]\n"  # every page touched
        "print('allocated', sum(map(len, chunks)) >> 20)\n"
    )
    done = sandbox.run_in(memory_cgroup if layer_on else None, script, "rlimit-as")
    if layer_on:
        assert done.returncode != 0, done
        assert done.stdout == "", done
        assert memory_cgroup.oom_kills() >= 1
    else:
        assert done.stdout == "allocated 512\n", done


@pytest.fixture
def pids_cgroup() -> Iterator[SessionCgroup]:
    """The session's host pids cgroup, made small by the test-only switch (256 tasks)."""
    with small_host_pids_cgroup() as group:
        if not group.limits_processes:
            pytest.skip(f"no pids cgroup can be made here: {detect_cgroups().reason}")
        yield group


_FORKS = (
    "import os, signal, time\n"
    "children = []\n"
    "try:\n"
    "    for _ in range(64):\n"
    "        child = os.fork()\n"
    "        if child == 0:\n"
    "            time.sleep(30)\n"
    "            os._exit(0)\n"
    "        children.append(child)\n"
    "    print('started', len(children))\n"
    "except OSError as exc:\n"
    "    print('refused after', len(children), exc.errno)\n"
    "for child in children:\n"
    "    os.kill(child, signal.SIGKILL)\n"
    "    os.waitpid(child, 0)\n"
)


@pytest.mark.parametrize("layer_on", [True, False], ids=["pids-cgroup", "without-pids-cgroup"])
def test_the_host_pids_cgroup_alone_stops_code_that_starts_processes_past_its_limit(
    sandbox: GvisorContainers, pids_cgroup: SessionCgroup, layer_on: bool
) -> None:
    """Where the session has a pids cgroup, it holds ``runsc``, the Sentry, the gofer and the
    ptrace platform's stub processes (about seven host tasks per sandboxed process), and bounds
    them. With ``RLIMIT_NPROC`` removed (the Sentry would refuse the code first), 64 processes
    forked under 256 host tasks: the host refuses the Sentry a task past the limit (counted in
    ``pids.events``) and the container stops (or the fork fails inside). Started outside the
    cgroup, as the launcher would without it, the same container starts all 64."""
    done = sandbox.run_in(pids_cgroup if layer_on else None, _FORKS, "rlimit-nproc")
    if layer_on:
        assert done.stdout == "" or done.stdout.startswith("refused after"), done
        assert pids_max_hits(pids_cgroup) >= 1
        pids_cgroup.kill_all()  # what the session's close does with what the failure left
    else:
        assert done.stdout == "started 64\n", done
        assert pids_max_hits(pids_cgroup) == 0
    assert processes_naming(sandbox.state_dir) == []


_FILTERED_CALLS = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    done = getattr(libc, name)(*args)
    print(name, "made" if done >= 0 else errno.errorcode[ctypes.get_errno()])
call("socket", 16, 3, 15)  # AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT: the host's device events
call("unshare", 0x10000000)  # CLONE_NEWUSER: a user namespace where the code is root
"""


@pytest.mark.parametrize("layer_on", [True, False], ids=["seccomp", "without-seccomp"])
def test_the_seccomp_filter_alone_keeps_calls_from_the_sentry(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """The session's filter, installed inside by ``BOOT``, refuses calls gVisor's kernel would
    serve (its surface the code then reaches): a netlink socket of a family the filter does
    not allow, and a user namespace. Without the filter (``BOOT`` given none), both are made."""
    argv = sandbox.argv(_FILTERED_CALLS)
    if not layer_on:
        argv = without(argv, "seccomp")
    refused = "socket EPROTONOSUPPORT\nunshare EPERM\n"
    assert run(argv) == (refused if layer_on else "socket made\nunshare made\n")


@pytest.mark.parametrize("layer_on", [True, False], ids=["empty-sys", "without-empty-sys"])
def test_the_empty_sys_alone_hides_the_sentrys_sysfs(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """gVisor mounts a sysfs of its own (the CPUs, devices and cgroup mount points it shows
    the sandbox) unless ``/sys`` is given: bubblewrap's sandboxes have no ``/sys``, so neither
    do these. Without the empty read-only tmpfs, code lists it."""
    argv = sandbox.argv("import os\nprint(sorted(os.listdir('/sys')))\n")
    if not layer_on:
        argv = without(argv, "empty-sys")
    listed = json.loads(run(argv).replace("'", '"'))
    assert (listed == []) is layer_on, listed
    assert ("devices" in listed) is not layer_on, listed


@pytest.mark.parametrize(
    "layer_on", [True, False], ids=["no-host-sockets", "without-no-host-sockets"]
)
def test_no_host_sockets_alone_keeps_the_hosts_unix_sockets_out_of_reach(
    sandbox: GvisorContainers, layer_on: bool
) -> None:
    """A host service's unix socket in a directory the sandbox sees (here its workspace) is out
    of reach unless ``runsc`` runs with ``--host-uds=open``, which only pip's container gets,
    for its index proxy in its own channel directory. With the flag added, code connects."""
    server = socket.socket(socket.AF_UNIX)
    path = sandbox.workspace / "host.sock"
    server.bind(str(path))
    server.listen()
    path.chmod(0o777)
    connect = (
        "import socket\n"
        "try:\n    socket.socket(socket.AF_UNIX).connect('/home/user/host.sock')\n"
        "    print('connected')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
    )
    try:
        argv = sandbox.argv(connect)
        if not layer_on:
            argv = without(argv, "no-host-sockets")
        assert run(argv) == ("refused 1\n" if layer_on else "connected\n")
    finally:
        server.close()


_IPC_KEY = 0x1C5B0027
_MASKED = {
    # A set-user-ID root program (its owner and bit as the sandbox sees them, then the uid it
    # runs as): the Sentry of this release ignores the bit on exec.
    "no-new-privileges": "import os, subprocess\nfound = os.stat('/home/user/id')\n"
    "print(found.st_uid, bool(found.st_mode & 0o4000), subprocess.run(['/home/user/id', '-u'], "
    "capture_output=True, text=True, check=True).stdout.strip())\n",
    # The processes /proc lists: the sandbox's first process only, never the host's.
    "pid-namespace": "import os\nprint([e for e in os.listdir('/proc') if e.isdigit()])\n",
    # The host's System V shared memory segment _IPC_KEY: gVisor's kernel has its own.
    "ipc-namespace": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    f"print(libc.shmget({_IPC_KEY}, 0, 0), ctypes.get_errno())\n",
    # The hostname: the spec's, served by the Sentry.
    "uts-namespace": "import socket\nprint(socket.gethostname())\n",
    # The mount points: the Sentry's own file system, made from the spec's mounts.
    "mount-namespace": "print(sorted({line.split()[4] for line in open('/proc/self/mountinfo')}))",
}


@pytest.fixture
def _host_segment() -> Iterator[None]:
    """A System V shared memory segment of the host's, at ``_IPC_KEY``."""
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(_IPC_KEY, 4096, 0o1666)  # IPC_CREAT, readable by everyone
    assert segment >= 0, ctypes.get_errno()
    try:
        yield
    finally:
        libc.shmctl(segment, 0, None)  # IPC_RMID


@pytest.mark.usefixtures("_host_segment")
@pytest.mark.parametrize("layer_on", [True, False], ids=["on", "off"])
@pytest.mark.parametrize("layer", sorted(_MASKED))
def test_the_sentry_masks_these_layers(
    sandbox: GvisorContainers, layer: str, layer_on: bool
) -> None:
    """Layers whose attack gVisor's own kernel stops with or without them: the same attack has
    the same (failed) outcome both ways, which is why they have no pair of their own (the table
    says what each still guards: the Sentry's own host process, should it be compromised)."""
    argv = sandbox.argv(_MASKED[layer])
    if layer == "no-new-privileges":
        setuid = sandbox.workspace / "id"
        shutil.copy(shutil.which("id") or "/usr/bin/id", setuid)
        os.chown(setuid, 0, 0)
        setuid.chmod(0o4755)
        argv = without(argv, "seccomp")  # BOOT sets no_new_privs itself before the filter
    spec = json.loads(bundle_spec(argv).read_text())
    if not layer_on:
        argv = without(argv, layer)
    printed = run(argv).strip()
    # The spec's mount points, and gVisor's own devpts in its /dev; the host has others.
    destinations = {"/", "/dev/pts", *(mount["destination"] for mount in spec["mounts"])}
    with open("/proc/self/mountinfo") as host:
        assert {line.split()[4] for line in host} - destinations
    expected = {
        "no-new-privileges": lambda: printed == "0 True 1000",
        "pid-namespace": lambda: printed == "['1']",
        "ipc-namespace": lambda: printed == "-1 2",  # ENOENT
        "uts-namespace": lambda: printed == "sandbox" != socket.gethostname(),
        "mount-namespace": lambda: set(json.loads(printed.replace("'", '"'))) <= destinations,
    }
    assert expected[layer](), printed
