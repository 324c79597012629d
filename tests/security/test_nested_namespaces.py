"""Attack class 1: nested namespaces, mounts and the session's own cgroup limits.

Sandboxed code tries what the red team did on the unfiltered sandbox: a nested user + mount +
cgroup namespace, a cgroupfs mount, and rewriting its session's ``pids.max`` and memory limit
through every path it can find. Each step must be refused, the host's limit files must be
unchanged, and the process limit must still hold afterwards.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyseccomp

from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession

_MAX_PROCESSES = 24

_ESCAPE = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
report = {}

def outcome(result):
    return "ok" if result == 0 else errno.errorcode.get(ctypes.get_errno(), "?")

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUSER = 0x00020000, 0x02000000, 0x10000000
report["unshare"] = outcome(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP))
report["unshare_mount_only"] = outcome(libc.unshare(CLONE_NEWNS))
os.makedirs("/tmp/cg1", exist_ok=True)
os.makedirs("/tmp/cg2", exist_ok=True)
report["mount_cgroup_v1"] = outcome(libc.mount(b"cgroup", b"/tmp/cg1", b"cgroup", 0, b"pids,memory"))
report["mount_cgroup_v2"] = outcome(libc.mount(b"cgroup2", b"/tmp/cg2", b"cgroup2", 0, None))
report["mount_sysfs"] = outcome(libc.mount(b"sysfs", b"/tmp/cg2", b"sysfs", 0, None))

rewritten = []
for root, _dirs, files in list(os.walk("/tmp/cg1")) + list(os.walk("/tmp/cg2")) + list(os.walk("/sys")):
    for name in files:
        if name in ("pids.max", "memory.limit_in_bytes", "memory.max", "memory.memsw.limit_in_bytes"):
            path = os.path.join(root, name)
            try:
                with open(path, "w") as handle:
                    handle.write("max" if name.startswith("pids") or name == "memory.max" else "-1")
                rewritten.append(path)
            except OSError:
                pass
report["rewritten"] = rewritten
report["sys_fs_cgroup_visible"] = os.path.exists("/sys/fs/cgroup")
print(json.dumps(report))
"""

_COUNT_PROCESSES = f"""
import os, signal, time
children = []
try:
    while len(children) < {_MAX_PROCESSES * 3}:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
except OSError:
    pass
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
len(children)
"""


def _limit_files(session: LocalSession) -> dict[str, str]:
    """The session's limit files as the host sees them."""
    files: dict[str, str] = {}
    for directory in session.cgroup.directories.values():
        for path in sorted(Path(directory).iterdir()):
            if path.name.endswith((".max", "limit_in_bytes")):
                files[str(path)] = path.read_text()
    return files


async def test_no_nested_namespace_no_mount_and_the_limits_hold(provider: LocalProvider) -> None:
    spec = SessionSpec(limits=Limits(max_processes=_MAX_PROCESSES, memory_mb=256, timeout=60.0))
    async with await provider.create(spec) as session:
        assert session.cgroup.limits_processes, "this machine must give sessions a pids cgroup"
        before = await asyncio.to_thread(_limit_files, session)

        # A fresh single-threaded process: the kernel refuses a new user namespace to a threaded one.
        await session.write_files({"escape.py": _ESCAPE.encode()})
        attack = await session.run_command("python3 escape.py")
        assert attack.ok, attack.render()
        report = json.loads(attack.stdout)
        assert report["unshare"] == "EPERM"
        assert report["unshare_mount_only"] == "EPERM"
        assert report["mount_cgroup_v1"] == "EPERM"
        assert report["mount_cgroup_v2"] == "EPERM"
        assert report["mount_sysfs"] == "EPERM"
        assert report["rewritten"] == []
        assert report["sys_fs_cgroup_visible"] is False

        # The same from a shell, with the tools an attacker would reach for first.
        shell = await session.run_command(
            "unshare -U -r -m -C sh -c 'echo escaped'; "
            "unshare -U -r --map-root-user true || echo refused; "
            "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m || echo refused"
        )
        assert "escaped" not in shell.stdout
        assert shell.stdout.count("refused") == 2

        assert await asyncio.to_thread(_limit_files, session) == before
        counted = await session.run_code(_COUNT_PROCESSES)
        assert counted.ok, counted.render()
        assert counted.value is not None
        assert int(counted.value) < _MAX_PROCESSES


_SYSCALLS = r"""
import ctypes, errno, json, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def raw(number, *args):
    result = libc.syscall(number, *[ctypes.c_ulong(a) for a in args])
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

NR = json.loads(NUMBERS)
found = {
    "setns": raw(NR["setns"], 0, 0),
    "pivot_root": raw(NR["pivot_root"], 0, 0),
    "umount2": raw(NR["umount2"], 0, 0),
    "clone3": raw(NR["clone3"], 0, 0),
    "clone_newuser": raw(NR["clone"], 0x10000000 | 17, 0, 0, 0, 0),
    "clone_newnet": raw(NR["clone"], 0x40000000 | 17, 0, 0, 0, 0),
    "bpf": raw(NR["bpf"], 0, 0, 0),
    "perf_event_open": raw(NR["perf_event_open"], 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0),
    "userfaultfd": raw(NR["userfaultfd"], 0),
    "io_uring_setup": raw(NR["io_uring_setup"], 1, 0),
    "ptrace_attach_pid1": raw(NR["ptrace"], 16, 1, 0, 0),
    "process_vm_readv": raw(NR["process_vm_readv"], 1, 0, 0, 0, 0, 0),
    "kexec_load": raw(NR["kexec_load"], 0, 0, 0, 0),
    "finit_module": raw(NR["finit_module"], 0, 0, 0),
    "delete_module": raw(NR["delete_module"], 0, 0),
    "open_by_handle_at": raw(NR["open_by_handle_at"], 0, 0, 0),
    "keyctl": raw(NR["keyctl"], 0, 0xFFFFFFFD, 0),
    "fsopen": raw(NR["fsopen"], 0, 0),
    "ioctl_tiocsti": raw(NR["ioctl"], 0, 0x5412, 0),
    "ioctl_tiocsti_high_bits": raw(NR["ioctl"], 0, 0x100005412, 0),
    "personality_no_aslr": raw(NR["personality"], 0x0040000),
    "personality_read_implies_exec": raw(NR["personality"], 0x0400000),
    "personality_query": raw(NR["personality"], 0xFFFFFFFF),
}
# What must keep working: threads, fork/exec (glibc falls back from clone3 to clone).
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
found["subprocess"] = subprocess.run(["/bin/sh", "-c", "echo fine"], capture_output=True, text=True).stdout.strip()
print(json.dumps(found))
"""

_EXPECTED = {
    "setns": "EPERM",
    "pivot_root": "EPERM",
    "umount2": "EPERM",
    "clone3": "ENOSYS",
    "clone_newuser": "EPERM",
    "clone_newnet": "EPERM",
    "bpf": "EPERM",
    "perf_event_open": "EPERM",
    "userfaultfd": "EPERM",
    "io_uring_setup": "ENOSYS",
    "ptrace_attach_pid1": "EPERM",
    "process_vm_readv": "EPERM",
    "kexec_load": "EPERM",
    "finit_module": "EPERM",
    "delete_module": "EPERM",
    "open_by_handle_at": "EPERM",
    "keyctl": "ENOSYS",
    "fsopen": "ENOSYS",
    "ioctl_tiocsti": "EPERM",
    "ioctl_tiocsti_high_bits": "EPERM",
    "personality_no_aslr": "EPERM",
    "personality_read_implies_exec": "EPERM",
    "personality_query": "ok",
    "subprocess": "fine",
}


_SYSCALL_NAMES = (
    "setns",
    "pivot_root",
    "umount2",
    "clone3",
    "clone",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "ptrace",
    "process_vm_readv",
    "kexec_load",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "keyctl",
    "fsopen",
    "ioctl",
    "personality",
)


def _syscall_number(name: str) -> int:
    """The native number of a system call (the sandbox runs the host's architecture)."""
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    assert number >= 0, f"libseccomp does not know {name}"
    return number


async def test_dangerous_kernel_calls_are_refused_with_the_chosen_errno(
    session: LocalSession,
) -> None:
    numbers = {name: _syscall_number(name) for name in _SYSCALL_NAMES}
    code = f"NUMBERS = {json.dumps(json.dumps(numbers))}\n" + _SYSCALLS
    result = await session.run_code(code)
    assert result.ok, result.render()
    expected = dict(_EXPECTED)
    if session.launcher.isolation == "gvisor":
        # The filter lets the query through; gVisor's kernel does not implement it.
        expected["personality_query"] = "EINVAL"
    assert json.loads(result.stdout) == expected
