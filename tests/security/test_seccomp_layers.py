"""Each rule group of the seccomp filter proven on its own: the call it refuses, made in a sandbox
whose filter allows that one group (``_program(allowing=...)``, the builder's test-only switch),
reaches the kernel and works; with the whole filter it is refused. The bwrap layers that would
refuse the call too are removed in both runs (``_without`` of ``test_layers.py``), and the table of
``README.md`` says which.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import pyseccomp
import pytest

from langchain_sandbox.providers.local._seccomp import _program, seccomp_program
from langchain_sandbox.providers.local._syscall_table import CHECKED, REFUSED
from security import test_layers
from security.test_layers import _INJECT, PYTHON, README, _argv, _inject_keystrokes, _run, _without

_ROW = re.compile(r"^\| seccomp `(?P<group>[^`]+)` \| (?P<relaxed>[^|]*) \| (?P<test>[^|]+) \|$")


def _groups() -> dict[str, tuple[list[str], list[str]]]:
    """Seccomp group -> (the bwrap layers removed for its tests, the tests that prove it)."""
    rows = {}
    for line in README.read_text().splitlines():
        if match := _ROW.match(line.strip()):
            relaxed = re.findall(r"`([^`]+)`", match["relaxed"])
            rows[match["group"]] = (relaxed, [test.strip() for test in match["test"].split(",")])
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
    """Every refused group and checked call of the filter has a row, and every row a group and
    existing tests: a group added to the table without a row, or a row without a test, fails
    here."""
    calls = {group.name: group.calls for group in (*REFUSED, *CHECKED)}
    assert set(GROUPS) == set(calls)
    names = {name for module in (globals(), vars(test_layers)) for name in module}
    for group, (relaxed, tests) in GROUPS.items():
        assert set(tests) <= names, f"{group}: no test {set(tests) - names}"
        assert set(relaxed) <= set(test_layers.LAYERS), group
        if any(_known(call) for call in calls[group]):  # else refused as unknown either way
            assert _program(frozenset({group})) != seccomp_program(), group


def _known(call: str) -> bool:
    return pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, call) >= 0


def _sandbox_argv(
    tmp_path: Path, group: str, command: list[str], relaxing: Sequence[str] | None = None
) -> list[str]:
    """The command line with the group's masking layers removed (its row's, or ``relaxing``: a
    subset of them, for an attack of the group that fewer of them mask)."""
    layers = GROUPS[group][0] if relaxing is None else relaxing
    assert set(layers) <= set(GROUPS[group][0]), f"{group}: {layers} not in its row"
    argv = _argv(tmp_path, command)
    for layer in layers:
        argv = _without(argv, layer)
    return argv


def _number(call: str) -> int:
    if not _known(call):
        pytest.skip(f"{call} is not a call of this machine's ABI")
    return int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, call))


@pytest.mark.parametrize("group", sorted(_CALLS))
@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-group"])
def test_each_refused_call_group_alone_keeps_its_calls_from_the_kernel(
    tmp_path: Path, group: str, layer_on: bool
) -> None:
    """The group's call answers its refusal under the whole filter, and works (the kernel answers)
    under the filter with that group allowed."""
    call, args, refusal = _CALLS[group]
    probe = _PROBE.format(number=_number(call), args=args, call=call)
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


_NEW_API = "new clone and mount API"
_SYSCALL = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "def call(number, *args):\n"
    "    answer = libc.syscall(number, *args)\n"
    "    if answer < 0:\n"
    "        print('refused', ctypes.get_errno())\n"
    "        raise SystemExit\n"
    "    return answer\n"
)
# fsopen a tmpfs, create it (FSCONFIG_CMD_CREATE), make it a mount and move it onto /tmp
# (MOVE_MOUNT_F_EMPTY_PATH: the mount is the descriptor itself). A file made in the old /tmp
# first is gone once the new one is over it.
_MOUNT_API = _SYSCALL + (
    "open('/tmp/before', 'w').close()\n"
    "fs = call({fsopen}, b'tmpfs', 0)\n"
    "call({fsconfig}, fs, 6, None, None, 0)\n"
    "mount = call({fsmount}, fs, 0, 0)\n"
    "call({move_mount}, mount, b'', -100, b'/tmp', 4)\n"
    "print('not mounted' if os.path.exists('/tmp/before') else 'made')\n"
)


@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-new-api-rule"])
def test_the_new_mount_api_rule_alone_keeps_the_sandbox_from_mounting(
    tmp_path: Path, layer_on: bool
) -> None:
    """With the ``mount`` rule in place (the filter refuses ``mount``), the new mount API
    (``fsopen``, ``fsconfig``, ``fsmount``, ``move_mount``) mounts a tmpfs over ``/tmp`` unless the
    filter refuses it too (``ENOSYS``). The same three bwrap layers as for ``mount`` mask it and are
    removed: each alone leaves the call without ``CAP_SYS_ADMIN`` over the mount namespace."""
    if os.geteuid() != 0:
        pytest.skip("only a sandbox started by root keeps capabilities once --cap-drop is removed")
    probe = _MOUNT_API.format(
        **{call: _number(call) for call in ("fsopen", "fsconfig", "fsmount", "move_mount")}
    )
    argv = _sandbox_argv(tmp_path, _NEW_API, [PYTHON.sandbox_executable(), "-c", probe])
    program = seccomp_program() if layer_on else _program(frozenset({_NEW_API}))
    done = _run(argv, program, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == ("refused 38\n" if layer_on else "made\n"), done


# clone(CLONE_NEWUSER | SIGCHLD), which the checked ``clone`` rule refuses, then the same through
# clone3, whose flags are in a struct clone_args in memory, out of the filter's sight. The child
# (no stack given: a fork's copy of the parent's) says by its exit status whether its user
# namespace is a new one.
_CLONE3 = _SYSCALL + (
    "before = os.readlink('/proc/self/ns/user')\n"
    "if libc.syscall({clone}, 0x10000000 | 17, 0, 0, 0, 0) == 0:\n"
    "    os._exit(0)\n"
    "print('clone refused', ctypes.get_errno())\n"
    "args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17)\n"  # flags, ..., exit_signal
    "if call({clone3}, args, ctypes.sizeof(args)) == 0:\n"
    "    os._exit(0 if os.readlink('/proc/self/ns/user') != before else 1)\n"
    "print('made' if os.wait()[1] == 0 else 'same namespace')\n"
)


@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-new-api-rule"])
def test_the_clone3_rule_alone_keeps_code_from_making_a_namespace_past_the_clone_check(
    tmp_path: Path, layer_on: bool
) -> None:
    """``clone`` with a namespace flag is refused by its argument check in both runs; ``clone3``
    with the same flag makes a child in a new user namespace unless the filter refuses
    ``clone3`` outright (``ENOSYS``): seccomp cannot read the flags ``clone3`` takes from memory.
    Only ``--disable-userns`` masks it (a user namespace needs no capability), so only it is
    removed."""
    probe = _CLONE3.format(clone=_number("clone"), clone3=_number("clone3"))
    command = [PYTHON.sandbox_executable(), "-c", probe]
    argv = _sandbox_argv(tmp_path, _NEW_API, command, relaxing=["disable-userns"])
    program = seccomp_program() if layer_on else _program(frozenset({_NEW_API}))
    done = _run(argv, program, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == "clone refused 1\n" + ("refused 38\n" if layer_on else "made\n"), done


_NEWER = "calls newer than the table"
# fchmodat2 (Linux 6.6) on a file of the workspace, the host's to check.
_FCHMODAT2 = _SYSCALL + "call({fchmodat2}, -100, b'target', 0o640, 0)\nprint('made')\n"


@pytest.mark.parametrize("layer_on", [True, False], ids=["filter", "without-newer-calls-rule"])
def test_the_newer_calls_rule_alone_keeps_calls_the_table_predates_from_the_kernel(
    tmp_path: Path, layer_on: bool
) -> None:
    """``fchmodat2`` changes a workspace file's mode (seen from the host) unless the filter
    answers it ``ENOSYS``, as a kernel older than the call would, leaving the file as it was."""
    target = tmp_path / "target"
    target.touch(mode=0o600)
    target.chmod(0o600)
    probe = _FCHMODAT2.format(fchmodat2=_number("fchmodat2"))
    argv = _sandbox_argv(tmp_path, _NEWER, [PYTHON.sandbox_executable(), "-c", probe])
    program = seccomp_program() if layer_on else _program(frozenset({_NEWER}))
    done = _run(argv, program, capture_output=True, text=True, timeout=60, check=True)
    if not layer_on and done.stdout == "refused 38\n":
        pytest.skip("this kernel predates fchmodat2 (Linux 6.6)")
    assert done.stdout == ("refused 38\n" if layer_on else "made\n"), done
    assert target.stat().st_mode & 0o777 == (0o600 if layer_on else 0o640)
