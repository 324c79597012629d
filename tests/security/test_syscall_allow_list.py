"""Attack class 11: kernel interfaces outside the allow-list, and host-wide ``/proc`` files.

What the red team of round 3 used, run for real in a sandbox: a vsock socket bound in the
machine's vsock space (not namespaced, so ``--unshare-net`` does nothing for it), packet, crypto
and non-routing netlink sockets, ``fanotify``, secret memory, the LDT, NUMA memory policy, the
``inotify`` channel between sessions, kernel calls newer than the table (``listmount``), and the
``/proc`` files that describe the host's memory and timers. Each must be refused with the errno
the table promises, while the families and calls the stack needs keep working.
"""

from __future__ import annotations

import json
import os

import pyseccomp

from langchain_sandbox.providers.local import LocalSession

_SOCKETS = r"""
import ctypes, errno, json, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def attempt(family, kind, protocol=0, bind=None):
    try:
        made = socket.socket(family, kind, protocol)
    except OSError as exc:
        return errno.errorcode[exc.errno]
    try:
        if bind is not None:
            made.bind(bind)
        return "ok"
    except OSError as exc:
        return "created, bind " + errno.errorcode[exc.errno]
    finally:
        made.close()

def pair(family):
    try:
        for end in socket.socketpair(family, socket.SOCK_STREAM):
            end.close()
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]

def raw_socket(family):
    # The family with bits above 32 set: the kernel reads an int, the filter must too.
    result = libc.syscall(NR_SOCKET, ctypes.c_ulong(family), ctypes.c_ulong(1), ctypes.c_ulong(0))
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]

found = {
    "vsock": attempt(socket.AF_VSOCK, socket.SOCK_STREAM, bind=(socket.VMADDR_CID_ANY, 7321)),
    "vsock_dgram": attempt(socket.AF_VSOCK, socket.SOCK_DGRAM),
    "packet": attempt(socket.AF_PACKET, socket.SOCK_RAW, 0x0300),
    "alg": attempt(socket.AF_ALG, socket.SOCK_SEQPACKET, bind=("hash", "sha256")),
    "bluetooth": attempt(31, socket.SOCK_STREAM),
    "xdp": attempt(44, socket.SOCK_RAW),
    "unknown_family": attempt(45, socket.SOCK_STREAM),
    "vsock_high_bits": raw_socket((1 << 32) | socket.AF_VSOCK),
    "netlink_audit": attempt(socket.AF_NETLINK, socket.SOCK_RAW, 9),
    "netlink_uevent": attempt(socket.AF_NETLINK, socket.SOCK_DGRAM, 15),
    "netlink_sock_diag": attempt(socket.AF_NETLINK, socket.SOCK_DGRAM, 4),
    "socketpair_vsock": pair(socket.AF_VSOCK),
    # What must keep working.
    "unix": attempt(socket.AF_UNIX, socket.SOCK_STREAM),
    "inet": attempt(socket.AF_INET, socket.SOCK_STREAM, bind=("127.0.0.1", 0)),
    "inet6": attempt(socket.AF_INET6, socket.SOCK_DGRAM),
    "netlink_route": attempt(socket.AF_NETLINK, socket.SOCK_RAW, 0),
    "socketpair_unix": pair(socket.AF_UNIX),
    "if_nameindex": [name for _index, name in socket.if_nameindex()],
}
print(json.dumps(found))
"""

_SOCKETS_EXPECTED = {
    "vsock": "EAFNOSUPPORT",
    "vsock_dgram": "EAFNOSUPPORT",
    "packet": "EAFNOSUPPORT",
    "alg": "EAFNOSUPPORT",
    "bluetooth": "EAFNOSUPPORT",
    "xdp": "EAFNOSUPPORT",
    "unknown_family": "EAFNOSUPPORT",
    "vsock_high_bits": "EAFNOSUPPORT",
    "netlink_audit": "EPROTONOSUPPORT",
    "netlink_uevent": "EPROTONOSUPPORT",
    "netlink_sock_diag": "EPROTONOSUPPORT",
    "socketpair_vsock": "EAFNOSUPPORT",
    "unix": "ok",
    "inet": "ok",
    "inet6": "ok",
    "netlink_route": "ok",
    "socketpair_unix": "ok",
    "if_nameindex": ["lo"],
}


async def test_socket_families_outside_the_allow_list_are_refused(session: LocalSession) -> None:
    code = f"NR_SOCKET = {pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, 'socket')}\n" + _SOCKETS
    result = await session.run_code(code)
    assert result.ok, result.render()
    assert json.loads(result.stdout) == _SOCKETS_EXPECTED


_CALLS = r"""
import ctypes, errno, json, mmap, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buffer = ctypes.create_string_buffer(4096)

def raw(name, *args):
    number = NR[name] if isinstance(name, str) else name
    result = libc.syscall(number, *[a if isinstance(a, ctypes.Array) else ctypes.c_ulong(a) for a in args])
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

FAN_CLASS_NOTIF, FAN_REPORT_FID = 0, 0x200
found = {
    "fanotify_init": raw("fanotify_init", FAN_CLASS_NOTIF | FAN_REPORT_FID, os.O_RDONLY),
    "memfd_secret": raw(447, 0),
    "set_mempolicy": raw("set_mempolicy", 0, 0, 0),
    "get_mempolicy": raw("get_mempolicy", 0, 0, 0, 0, 0),
    "mbind": raw("mbind", 0, 4096, 0, 0, 0, 0),
    "inotify_init1": raw("inotify_init1", 0),
    "pkey_alloc": raw("pkey_alloc", 0, 0),
    "listmount": raw(458, buffer, buffer, 16, 0),
    "statmount": raw(457, buffer, buffer, 4096, 0),
    "personality_no_aslr": raw("personality", 0x0040000),
    "personality_query": raw("personality", 0xFFFFFFFF),
}
if "modify_ldt" in NR:
    found["modify_ldt"] = raw("modify_ldt", 0, buffer, 4096)
# What must keep working: threads, processes, a shell with tail (which polls without inotify).
found["tail"] = subprocess.run(
    ["sh", "-c", "echo line > /tmp/f; timeout 1 tail -f /tmp/f; true"],
    capture_output=True, text=True,
).stdout.strip()
print(json.dumps(found))
"""

_CALLS_EXPECTED = {
    "fanotify_init": "EPERM",
    "memfd_secret": "ENOSYS",
    "set_mempolicy": "ENOSYS",
    "get_mempolicy": "ENOSYS",
    "mbind": "ENOSYS",
    "inotify_init1": "ENOSYS",
    "pkey_alloc": "EPERM",
    "listmount": "EPERM",
    "statmount": "EPERM",
    "personality_no_aslr": "EPERM",
    "personality_query": "ok",
    "tail": "line",
}

_NAMED = (
    "fanotify_init",
    "set_mempolicy",
    "get_mempolicy",
    "mbind",
    "inotify_init1",
    "pkey_alloc",
    "personality",
    "modify_ldt",
)


async def test_kernel_calls_outside_the_allow_list_are_refused(session: LocalSession) -> None:
    numbers = {
        name: number
        for name in _NAMED
        if (number := pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)) >= 0
    }
    result = await session.run_code(f"NR = {numbers!r}\n" + _CALLS)
    assert result.ok, result.render()
    expected = dict(_CALLS_EXPECTED)
    if "modify_ldt" in numbers:
        expected["modify_ldt"] = "EPERM"
    if session.launcher.isolation == "gvisor":
        # gVisor's own kernel answers the query 0xffffffff with EINVAL (it knows no personality
        # but the default); the filter lets it through on both levels.
        expected["personality_query"] = "EINVAL"
    assert json.loads(result.stdout) == expected


# What Docker masks, plus what the red team read; each is shown empty where the host has it.
_MASKED_FILES = (
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
_MASKED_DIRS = ("/proc/asound", "/proc/acpi", "/proc/scsi", "/sys/firmware")

_READ = r"""
import json, os
found = {}
for path in FILES:
    try:
        with open(path, "rb") as handle:
            found[path] = handle.read(4096).hex()
    except OSError as exc:
        found[path] = type(exc).__name__
for path in DIRS:
    try:
        found[path] = sorted(os.listdir(path))
    except FileNotFoundError:
        found[path] = []
    except OSError as exc:
        found[path] = type(exc).__name__
print(json.dumps(found))
"""


def _present() -> tuple[list[str], list[str]]:
    """The masked paths the host's kernel has."""
    files = [path for path in _MASKED_FILES if os.path.exists(path)]
    return files, [path for path in _MASKED_DIRS if os.path.isdir(path)]


async def test_host_wide_proc_files_read_empty(session: LocalSession) -> None:
    files, dirs = _present()
    assert files, "the host's /proc must have some of the masked files for this test to mean much"
    result = await session.run_code(f"FILES = {files!r}\nDIRS = {dirs!r}\n" + _READ)
    assert result.ok, result.render()
    found = json.loads(result.stdout)
    # Under gVisor /proc is its own kernel's, which has none of these host-wide files at all.
    hidden = "FileNotFoundError" if session.launcher.isolation == "gvisor" else ""
    assert found == {**dict.fromkeys(files, hidden), **{path: [] for path in dirs}}


_OTHER_ABI = r"""
import ctypes, json, platform, subprocess, sys
# getpid of the x32 ABI (x86_64's __X32_SYSCALL_BIT); on other machines just an unknown number.
probe = "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print('survived')"
done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
print(json.dumps({"machine": platform.machine(), "returncode": done.returncode, "stdout": done.stdout}))
"""


async def test_a_call_of_another_abi_kills_the_process(session: LocalSession) -> None:
    result = await session.run_code(_OTHER_ABI)
    assert result.ok, result.render()
    found = json.loads(result.stdout)
    if found["machine"] == "x86_64":
        assert found["returncode"] == -31  # SIGSYS: the filter's verdict for a foreign ABI
        assert found["stdout"] == ""
    else:
        assert (found["returncode"], found["stdout"]) == (0, "survived\n")
