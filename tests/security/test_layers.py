"""Each isolation layer of the local provider proven on its own: the attack it stops, run with that
one layer removed from the generated bubblewrap command line (and the others that would mask it
relaxed), succeeds; with the layer in place it fails.

The layers, their bwrap arguments and the test that proves each are the table of ``README.md`` in
this directory; ``test_the_command_line_carries_every_documented_layer`` holds the generated argv
against it. ``_without`` is the test-only switch: it removes a layer's arguments by the layer's
name from what :func:`bubblewrap_argv` generates, so no option of the provider can turn a layer off.
The runs below start bwrap directly, without the seccomp filter (its rules are one of the layers
that would mask another).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import subprocess
import sys
import termios
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from network_probe import LoopbackListener

from langchain_sandbox.providers.local._bubblewrap import (
    bubblewrap_argv,
    describe_python,
    find_bubblewrap,
    options_via_fd,
)

README = Path(__file__).with_name("README.md")
_ROW = re.compile(r"^\| `(?P<layer>[a-z-]+)` \| (?P<args>[^|]+) \| (?P<test>[^|]+) \|$")


def _table() -> dict[str, tuple[list[str], str]]:
    """Layer name -> (its bwrap arguments, the test that proves it alone, or "none yet")."""
    rows = {}
    for line in README.read_text().splitlines():
        if match := _ROW.match(line.strip()):
            args = re.findall(r"`([^`]+)`", match["args"])
            rows[match["layer"]] = ([a for arg in args for a in arg.split()], match["test"].strip())
    return rows


LAYERS = _table()
PYTHON = describe_python(sys.executable)


def _argv(workspace: Path, command: Sequence[str]) -> list[str]:
    return bubblewrap_argv(
        find_bubblewrap(),
        command,
        python=PYTHON,
        workspace=str(workspace),
        files={},
        env={"PATH": "/usr/bin:/bin"},
        network=False,
    )


def _run(
    argv: list[str], seccomp: bytes | None = None, **options: Any
) -> subprocess.CompletedProcess[str]:
    """Run a whole bwrap command line as the launcher does: data files and options by descriptor
    (and the BPF program ``seccomp``, if given)."""
    with options_via_fd(argv, seccomp=seccomp) as (short, fds):
        return subprocess.run(short, pass_fds=fds, **options)


def _without(argv: list[str], layer: str) -> list[str]:
    """``argv`` with the arguments of ``layer`` (as the table gives them) removed once."""
    args = LAYERS[layer][0]
    for start in range(len(argv) - len(args) + 1):
        if argv[start : start + len(args)] == args:
            return argv[:start] + argv[start + len(args) :]
    raise AssertionError(f"{layer}: {args} not in the command line")


def test_the_command_line_carries_every_documented_layer(tmp_path: Path) -> None:
    assert {"clearenv", "new-session", "cap-drop", "uid", "unshare-net"} <= set(LAYERS)
    argv = _argv(tmp_path, ["true"])
    names = {name for name in globals() if name.startswith("test_")}
    for layer, (_, test) in LAYERS.items():
        assert _without(argv, layer) != argv, layer  # its arguments are in the command line
        assert test == "none yet" or test in names, f"{layer}: no test {test!r} here"


@pytest.mark.parametrize("layer_on", [True, False], ids=["clearenv", "without-clearenv"])
def test_clearenv_alone_keeps_the_host_environment_out(tmp_path: Path, layer_on: bool) -> None:
    """Without ``--clearenv`` a variable of the host's environment reaches sandboxed code."""
    argv = _argv(tmp_path, ["/bin/sh", "-c", 'echo "[$HOST_ONLY_SECRET]"'])
    if not layer_on:
        argv = _without(argv, "clearenv")
    env = {**os.environ, "HOST_ONLY_SECRET": "sk-host-1234"}
    done = _run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == ("[]\n" if layer_on else "[sk-host-1234]\n")


_INJECT = (
    "import fcntl, termios\n"
    "try:\n"
    "    for ch in b'id\\n':\n"
    "        fcntl.ioctl(0, termios.TIOCSTI, bytes([ch]))\n"
    "    print('injected')\n"
    "except OSError as exc:\n"
    "    print('refused', exc.errno)\n"
)


def _inject_keystrokes(argv: list[str], seccomp: bytes | None) -> tuple[str, bytes]:
    """Run ``_INJECT`` by ``argv`` with the caller's terminal as stdin: what it printed, and what
    reached the terminal's input."""
    if Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() != "1":
        pytest.skip("this kernel refuses TIOCSTI to everyone (dev.tty.legacy_tiocsti=0)")
    controller, terminal = pty.openpty()
    try:
        done = _run(
            argv,
            seccomp,
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # the caller's terminal
        )
        os.set_blocking(terminal, False)
        try:
            typed = os.read(terminal, 100)
        except BlockingIOError:
            typed = b""
    finally:
        os.close(controller)
        os.close(terminal)
    return done.stdout, typed


@pytest.mark.parametrize("layer_on", [True, False], ids=["new-session", "without-new-session"])
def test_new_session_alone_keeps_keystrokes_out_of_the_callers_terminal(
    tmp_path: Path, layer_on: bool
) -> None:
    """Sandboxed code whose stdin is the caller's terminal pushes keystrokes into it (TIOCSTI:
    the caller's shell would run them) unless ``--new-session`` took the terminal away. Run
    without the seccomp filter, whose ioctl rule would refuse it too."""
    argv = _argv(tmp_path, [PYTHON.sandbox_executable(), "-c", _INJECT])
    if not layer_on:
        argv = _without(argv, "new-session")
    printed, typed = _inject_keystrokes(argv, None)
    if layer_on:
        assert printed.startswith("refused"), printed
        assert typed == b""
    else:
        assert printed == "injected\n", printed
        assert typed == b"id\n"


@pytest.mark.parametrize(
    ("relaxed", "removed", "reads"),
    [
        pytest.param("uid", None, False, id="cap-drop"),
        pytest.param("uid", "cap-drop", True, id="without-cap-drop"),
        pytest.param("cap-drop", None, False, id="uid"),
        pytest.param("cap-drop", "uid", True, id="without-uid"),
    ],
)
def test_cap_drop_and_the_sandbox_uid_each_alone_keep_the_callers_privileges_out(
    tmp_path: Path, relaxed: str, removed: str | None, reads: bool
) -> None:
    """Started by root, a sandbox keeps root's capabilities unless ``--cap-drop ALL`` drops them
    or the switch to the sandbox uid loses them: either alone keeps it from reading a file whose
    mode forbids it (CAP_DAC_OVERRIDE). Each is run with the other removed."""
    if os.geteuid() != 0:
        pytest.skip("only a sandbox started by root has capabilities to drop")
    locked = tmp_path / "locked"
    locked.write_text("host-only")
    locked.chmod(0)
    argv = _without(_argv(tmp_path, ["/bin/sh", "-c", "cat /home/user/locked"]), relaxed)
    if removed is not None:
        argv = _without(argv, removed)
    done = _run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout == ("host-only" if reads else ""), done
    assert (done.returncode == 0) is reads, done


@pytest.mark.parametrize("layer_on", [True, False], ids=["unshare-net", "without-unshare-net"])
def test_unshare_net_alone_keeps_the_hosts_loopback_out_of_reach(
    tmp_path: Path, layer_on: bool, loopback_listener: LoopbackListener
) -> None:
    """Without ``--unshare-net`` sandboxed code connects to a port on the host's 127.0.0.1."""
    argv = _argv(tmp_path, [PYTHON.sandbox_executable(), "-c", loopback_listener.probe])
    if not layer_on:
        argv = _without(argv, "unshare-net")
    done = _run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.startswith("refused" if layer_on else "connected"), done
    assert loopback_listener.reached() is not layer_on


def _plant_as_owner(tmp_path: Path, script: str, layer: str, layer_on: bool) -> None:
    """Run ``script`` (which prints ``planted`` once it wrote) as the uid that owns what it
    writes (the sandbox uid removed), with or without ``layer``: a read-only mount refuses it."""
    if os.geteuid() != 0:
        pytest.skip("the relaxed run needs a caller whose uid owns the sandbox's root and /proc")
    argv = _without(_argv(tmp_path, ["/bin/sh", "-c", script]), "uid")
    if not layer_on:
        argv = _without(argv, layer)
    done = _run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout == ("" if layer_on else "planted\n"), done
    if layer_on:
        assert "Read-only file system" in done.stderr, done


@pytest.mark.parametrize(
    "layer_on", [True, False], ids=["read-only-root", "without-read-only-root"]
)
def test_the_read_only_root_alone_keeps_the_sandbox_from_planting_files_outside_its_workspace(
    tmp_path: Path, layer_on: bool
) -> None:
    """Without ``--remount-ro /`` code can create files beside the system directories (where a
    later command's lookups would find them). Run as the uid that owns the root (the sandbox
    uid removed), which could write there otherwise."""
    _plant_as_owner(tmp_path, "mkdir /planted && echo planted", "read-only-root", layer_on)


@pytest.mark.parametrize("layer_on", [True, False], ids=["unshare-pid", "without-unshare-pid"])
def test_unshare_pid_alone_hides_the_hosts_processes(tmp_path: Path, layer_on: bool) -> None:
    """Without ``--unshare-pid`` the sandbox's ``/proc`` lists the host's processes: this test's
    own among them (its command line, its environment's owner...)."""
    look = f"test -d /proc/{os.getpid()} && echo visible || echo hidden"
    argv = _argv(tmp_path, ["/bin/sh", "-c", look])
    if not layer_on:
        argv = _without(argv, "unshare-pid")
    done = _run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == ("hidden\n" if layer_on else "visible\n"), done


@pytest.mark.parametrize("layer_on", [True, False], ids=["unshare-ipc", "without-unshare-ipc"])
def test_unshare_ipc_alone_hides_the_hosts_shared_memory(tmp_path: Path, layer_on: bool) -> None:
    """Without ``--unshare-ipc`` the sandbox sees (and may attach to) the host's System V
    shared memory segments: one this test makes is listed inside."""
    made = subprocess.run(
        ["ipcmk", "-M", "4096"], capture_output=True, text=True, timeout=30, check=True
    )
    segment = made.stdout.split()[-1]
    try:
        argv = _argv(tmp_path, ["/bin/sh", "-c", "ipcs -m"])
        if not layer_on:
            argv = _without(argv, "unshare-ipc")
        done = _run(argv, capture_output=True, text=True, timeout=60, check=True)
    finally:
        subprocess.run(["ipcrm", "-m", segment], timeout=30, check=True)
    listed = any(line.split()[1:2] == [segment] for line in done.stdout.splitlines())
    assert listed is not layer_on, done.stdout


@pytest.mark.parametrize(
    "layer_on", [True, False], ids=["disable-userns", "without-disable-userns"]
)
def test_disable_userns_alone_keeps_code_from_making_a_user_namespace(
    tmp_path: Path, layer_on: bool
) -> None:
    """Without ``--disable-userns`` code makes a user namespace of its own, where it could be
    root with every capability (the start of most kernel privilege escalations). Run without the
    seccomp filter, whose clone/unshare rules would refuse it too; no uid is mapped in it (the
    read-only ``/proc`` refuses the map), so ``id`` shows the overflow uid."""
    argv = _argv(tmp_path, ["/bin/sh", "-c", "unshare -U id -u && echo made"])
    if not layer_on:
        argv = _without(argv, "disable-userns")
    done = _run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout == ("" if layer_on else "65534\nmade\n"), done


@pytest.mark.parametrize(
    "layer_on", [True, False], ids=["read-only-proc", "without-read-only-proc"]
)
def test_the_read_only_proc_alone_keeps_sysctls_unwritable(tmp_path: Path, layer_on: bool) -> None:
    """Without ``--remount-ro /proc`` code writes the sysctls its namespaces' owner may write
    (for the uid that maps to the host's, host-wide ones too). Shown harmlessly with the
    hostname of the sandbox's own UTS namespace, as the uid that owns it (the sandbox uid
    removed)."""
    write = "echo planted > /proc/sys/kernel/hostname && cat /proc/sys/kernel/hostname"
    _plant_as_owner(tmp_path, write, "read-only-proc", layer_on)
