"""Each rule group of the seccomp filter proven on its own: the call it refuses, made in a sandbox
whose filter allows that one group (``_program(allowing=...)``, the builder's test-only switch),
reaches the kernel and works; with the whole filter it is refused. The bwrap layers that would
refuse the call too are removed in both runs (``_without`` of ``test_layers.py``), and the table of
``README.md`` says which.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyseccomp
import pytest

from langchain_sandbox.providers.local._seccomp import _program, seccomp_program
from langchain_sandbox.providers.local._syscall_table import CHECKED, REFUSED
from security import test_layers
from security.test_layers import _INJECT, PYTHON, README, _argv, _inject_keystrokes, _run, _without

_ROW = re.compile(r"^\| seccomp `(?P<group>[^`]+)` \| (?P<relaxed>[^|]*) \| (?P<test>[^|]+) \|$")


def _groups() -> dict[str, tuple[list[str], str]]:
    """Seccomp group -> (the bwrap layers removed for its test, the test or "none yet")."""
    rows = {}
    for line in README.read_text().splitlines():
        if match := _ROW.match(line.strip()):
            relaxed = re.findall(r"`([^`]+)`", match["relaxed"])
            rows[match["group"]] = (relaxed, match["test"].strip())
    return rows


GROUPS = _groups()

_PROBE = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "buf = ctypes.create_string_buffer(4096)\n"
    "ctypes.c_uint.from_buffer(buf).value = 128\n"  # a file handle's room, for name_to_handle_at
    "answer = libc.syscall({number}, {args})\n"
    "if answer == 0 and {call!r} == 'clone':\n"
    "    os._exit(0)\n"  # the child
    "print('refused', ctypes.get_errno()) if answer == -1 else print('made')\n"
)

# Group -> the call that shows it (by name, its arguments as Python source) and its refusal.
_CALLS = {
    "clone": ("clone", "0x10000000 | 17, 0, 0, 0, 0", 1),  # CLONE_NEWUSER | SIGCHLD
    "personality": ("personality", "0x0040000", 1),  # ADDR_NO_RANDOMIZE
    "other processes": ("ptrace", "0, 0, 0, 0", 1),  # PTRACE_TRACEME
    "kernel extension and observation": ("userfaultfd", "1", 1),  # UFFD_USER_MODE_ONLY
    "host-wide state": ("modify_ldt", "0, buf, 16", 1),
    "file handles": ("name_to_handle_at", "-100, b'/', buf, ctypes.byref(ctypes.c_int()), 0", 1),
    "io_uring": ("io_uring_setup", "1, buf", 38),
    "kernel keyring": ("keyctl", "0, -4, 0", 38),  # the id of the host user's keyring
    "inotify": ("inotify_init1", "0", 38),
    "NUMA memory policy": ("get_mempolicy", "0, 0, 0, 0, 0", 38),
    "secret memory": ("memfd_secret", "0", 38),
}


def test_the_filter_carries_every_documented_group() -> None:
    """Every refused group and checked call of the filter has a row, and every row a group and an
    existing test: a group added to the table without a row fails here."""
    calls = {group.name: group.calls for group in (*REFUSED, *CHECKED)}
    assert set(GROUPS) == set(calls)
    names = {name for module in (globals(), vars(test_layers)) for name in module}
    for group, (relaxed, test) in GROUPS.items():
        assert test == "none yet" or test in names, f"{group}: no test {test!r}"
        assert set(relaxed) <= set(test_layers.LAYERS), group
        if any(_known(call) for call in calls[group]):  # else refused as unknown either way
            assert _program(frozenset({group})) != seccomp_program(), group


def _known(call: str) -> bool:
    return pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, call) >= 0


def _sandbox_argv(tmp_path: Path, group: str, command: list[str]) -> list[str]:
    argv = _argv(tmp_path, command)
    for layer in GROUPS[group][0]:
        argv = _without(argv, layer)
    return argv


@pytest.mark.parametrize("group", sorted(_CALLS))
@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-group"])
def test_each_refused_call_group_alone_keeps_its_calls_from_the_kernel(
    tmp_path: Path, group: str, layer_on: bool
) -> None:
    """The group's call answers its refusal under the whole filter, and works (the kernel answers)
    under the filter with that group allowed."""
    call, args, refusal = _CALLS[group]
    if not _known(call):
        pytest.skip(f"{call} is not a call of this machine's ABI")
    probe = _PROBE.format(
        number=pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, call), args=args, call=call
    )
    argv = _sandbox_argv(tmp_path, group, [PYTHON.sandbox_executable(), "-c", probe])
    program = seccomp_program() if layer_on else _program(frozenset({group}))
    done = _run(argv, program, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == (f"refused {refusal}\n" if layer_on else "made\n"), done


_VSOCK = (
    "import socket\n"
    "try:\n"
    "    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print('made')\n"
    "except OSError as exc:\n"
    "    print('refused', exc.errno)\n"
)


@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-socket-rule"])
def test_the_socket_rule_alone_keeps_families_out_that_the_network_namespace_does_not_cover(
    tmp_path: Path, layer_on: bool
) -> None:
    """A vsock socket (to the hypervisor; ``--unshare-net`` does not cover it) is made without the
    socket rule, refused (EAFNOSUPPORT) with it."""
    argv = _sandbox_argv(tmp_path, "socket", [PYTHON.sandbox_executable(), "-c", _VSOCK])
    program = seccomp_program() if layer_on else _program(frozenset({"socket"}))
    done = _run(argv, program, capture_output=True, text=True, timeout=60, check=True)
    if not layer_on and done.stdout == "refused 97\n":
        pytest.skip("this kernel has no vsock")
    assert done.stdout == ("refused 97\n" if layer_on else "made\n"), done


@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-ioctl-rule"])
def test_the_ioctl_rule_alone_keeps_keystrokes_out_of_the_callers_terminal(
    tmp_path: Path, layer_on: bool
) -> None:
    """With ``--new-session`` removed, TIOCSTI pushes keystrokes into the caller's terminal
    unless the ioctl rule refuses it."""
    argv = _sandbox_argv(tmp_path, "ioctl", [PYTHON.sandbox_executable(), "-c", _INJECT])
    program = seccomp_program() if layer_on else _program(frozenset({"ioctl"}))
    printed, typed = _inject_keystrokes(argv, program)
    assert printed == ("refused 1\n" if layer_on else "injected\n"), printed
    assert typed == (b"" if layer_on else b"id\n")


_MOUNT = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "answer = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
    "print('refused', ctypes.get_errno()) if answer == -1 else print('made')\n"
)


@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-mount-rule"])
def test_the_mount_rule_alone_keeps_the_sandbox_from_mounting(
    tmp_path: Path, layer_on: bool
) -> None:
    """Code with every capability in the namespace that owns its mounts mounts a tmpfs over its
    ``/tmp`` unless the filter refuses ``mount``. Three bwrap layers mask the rule and are removed:
    ``--cap-drop ALL`` and the sandbox uid (no ``CAP_SYS_ADMIN``) and ``--disable-userns``, which
    starts the command in a nested user namespace that does not own the mount namespace (so even
    its root gets EPERM)."""
    if os.geteuid() != 0:
        pytest.skip("only a sandbox started by root keeps capabilities once --cap-drop is removed")
    group = "namespaces and mounts"
    argv = _sandbox_argv(tmp_path, group, [PYTHON.sandbox_executable(), "-c", _MOUNT])
    program = seccomp_program() if layer_on else _program(frozenset({group}))
    done = _run(argv, program, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == ("refused 1\n" if layer_on else "made\n"), done
