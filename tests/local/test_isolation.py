"""What a bubblewrap'd local session cannot see or do: network, host files, host env, host processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from network_probe import LoopbackListener

from langchain_sandbox.errors import InvalidInputError, IsolationUnavailableError
from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.local import (
    LocalProvider,
    LocalSession,
    isolation_levels,
    probe_isolation,
)

_CONNECT = """
import socket
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=5) as s:
        outcome = s.recv(4).decode()
except OSError as exc:
    outcome = type(exc).__name__
outcome
"""


async def test_no_network_by_default(
    session: LocalSession, loopback_listener: LoopbackListener
) -> None:
    connect = await session.run_code(loopback_listener.probe)
    assert connect.ok, connect.render()
    assert connect.stdout.startswith("refused"), connect.render()
    assert not loopback_listener.reached(), "the sandbox reached a port on the host"
    dns = await session.run_code(
        "import socket\ntry:\n    socket.getaddrinfo('example.com', 443)\n    outcome = 'resolved'\n"
        "except OSError as exc:\n    outcome = type(exc).__name__\noutcome"
    )
    assert dns.value == repr("gaierror")


async def test_network_when_the_session_asks_for_it(
    provider: LocalProvider, host_server: int
) -> None:
    async with await provider.create(SessionSpec(network=True)) as session:
        connect = await session.run_code(_CONNECT.format(port=host_server))
        assert connect.value == repr("pong"), connect.render()


async def test_host_files_are_not_visible(session: LocalSession, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    home = Path.home()
    probes = [str(secret), str(tmp_path), str(home), __file__, str(Path.cwd())]
    result = await session.run_code(
        f"import os\nprobes = {probes!r}\n{{p: os.path.exists(p) for p in probes}}"
    )
    assert result.ok, result.render()
    assert result.value == repr({p: False for p in probes})
    cat = await session.run_command(f"cat {secret}; ls -a {home}")
    assert "TOP SECRET" not in cat.stdout
    assert cat.exit_code != 0


async def test_nothing_outside_home_and_tmp_is_writable(session: LocalSession) -> None:
    targets = [
        "/x",
        "/etc/x",
        "/etc/passwd",
        "/usr/x",
        "/usr/lib/x",
        "/opt/x",
        "/opt/python/x",
        "/opt/langchain-sandbox/worker.py",
        "/home/x",
        "/dev/x",
        "/proc/sys/kernel/hostname",
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/vm/drop_caches",
        "/proc/self/oom_score_adj",
    ]
    code = (
        "import os, sys\n"
        f"targets = {targets!r} + [p + '/x' for p in sys.path if p.startswith('/opt')]\n"
        "written = []\n"
        "for path in targets:\n"
        "    # Opening for writing is the test; nothing is written, even where it would work.\n"
        "    try:\n"
        "        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))\n"
        "        written.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('/home/user/ok', 'w').write('1')\n"
        "open('/tmp/ok', 'w').write('1')\n"
        "written"
    )
    result = await session.run_code(code)
    assert result.ok, result.render()
    assert result.value == "[]"


async def test_host_environment_does_not_leak(
    provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_API_KEY", "sk-host-secret")
    async with await provider.create(SessionSpec(env={"GIVEN": "yes"})) as session:
        result = await session.run_code("import os\nsorted(os.environ)")
        names = json.loads(result.value.replace("'", '"')) if result.value else []
        assert "FAKE_API_KEY" not in names
        assert "GIVEN" in names
        shell = await session.run_command("env")
        assert "sk-host-secret" not in shell.stdout
        assert "GIVEN=yes" in shell.stdout
        assert "HOME=/home/user" in shell.stdout


async def test_only_the_sessions_own_processes_are_visible(session: LocalSession) -> None:
    result = await session.run_code(
        "import os\n"
        "cmds = []\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        cmds.append(open(f'/proc/{pid}/cmdline', 'rb').read().decode(errors='replace'))\n"
        "    except OSError:\n"
        "        pass\n"
        "cmds"
    )
    assert result.ok, result.render()
    seen = result.value or ""
    assert "pytest" not in seen
    # bubblewrap's own pid 1 gets its options through a descriptor: no host path is shown.
    assert session.directory not in seen
    assert seen.count("', '") + 1 <= 3


async def test_no_capabilities_and_not_root_inside(session: LocalSession) -> None:
    result = await session.run_code(
        "fields = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "(fields['CapEff'].strip(), fields['CapPrm'].strip(), fields['Uid'].split()[0])"
    )
    cap_eff, cap_prm, uid = eval(result.value or "")
    assert int(cap_eff, 16) == 0
    assert int(cap_prm, 16) == 0
    assert uid != "0"
    shell = await session.run_command("id -u; grep CapEff /proc/self/status")
    assert shell.stdout.splitlines()[0] != "0"
    assert shell.stdout.split()[-1] == "0000000000000000"


def test_missing_bubblewrap_refuses_with_a_fix(tmp_path: Path) -> None:
    with pytest.raises(IsolationUnavailableError) as caught:
        LocalProvider(base_dir=tmp_path / "b", bwrap=str(tmp_path / "no" / "bwrap"))
    message = str(caught.value)
    assert "bubblewrap" in message
    assert "install" in message.lower()
    # Where to pass it, not only its name.
    assert "provider=LocalProvider(isolation='none')" in message
    assert "provider_options={'isolation': 'none'}" in message
    assert not (tmp_path / "b" / "sessions").exists() or not any(
        (tmp_path / "b" / "sessions").iterdir()
    )


async def test_unisolated_only_by_name_and_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_API_KEY", "sk-host-secret")
    provider = LocalProvider(base_dir=tmp_path / "none", isolation="none")
    with pytest.warns(RuntimeWarning, match="directly on this machine"):
        # "host": no sandbox environment to build (unisolated environments are tested with them)
        session = await provider.create(SessionSpec(template="host"))
    async with session:
        result = await session.run_code("import os\nx = 1\n(os.environ.get('FAKE_API_KEY'), x)")
        assert result.value == "(None, 1)"
        assert (await session.run_command("echo $HOME")).stdout.strip() == session.workspace_dir
    with pytest.raises(InvalidInputError, match="isolation must be"):
        LocalProvider(isolation="off")  # type: ignore[arg-type]


def test_probe_reports_what_is_enforced_here() -> None:
    report = probe_isolation()
    assert report.bubblewrap_usable
    assert report.network_isolation
    assert report.syscall_filter
    assert report.process_limit.startswith("cgroup")
    assert report.memory_limit.startswith("cgroup")
    # This suite runs as root with e2fsprogs: each workspace is a file system of its own.
    assert report.workspace_quota.startswith("file system"), report.workspace_quota
    assert report.sandbox_user.startswith("host uid 1879048191"), report.sandbox_user
    missing = probe_isolation("/nonexistent/bwrap")
    assert not missing.bubblewrap_usable
    assert any("bubblewrap" in problem for problem in missing.problems)


def test_isolation_levels_say_which_level_starts_here_and_why_not() -> None:
    assert isolation_levels() == {"bubblewrap": "", "gvisor": ""}
    missing = isolation_levels("/nonexistent/bwrap", "/nonexistent/runsc")
    assert missing.keys() == {"bubblewrap", "gvisor"}
    assert "bubblewrap" in missing["bubblewrap"]
    assert "runsc was not found at '/nonexistent/runsc'" in missing["gvisor"]
    assert "isolation='bubblewrap'" in missing["gvisor"]  # says what to use instead


def test_bubblewrap_without_user_namespaces_refuses_with_a_fix(tmp_path: Path) -> None:
    # What bubblewrap prints where unprivileged user namespaces are disabled; the provider must
    # turn it into an error that says how to fix it, and leave nothing behind.
    failing = tmp_path / "bwrap"
    failing.write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    failing.chmod(0o755)
    with pytest.raises(IsolationUnavailableError) as caught:
        LocalProvider(base_dir=tmp_path / "b", bwrap=str(failing))
    assert "user namespaces" in str(caught.value)
    assert "Permission denied" in str(caught.value)
    assert not (tmp_path / "b").exists()
    report = probe_isolation(str(failing))
    assert not report.bubblewrap_usable
    assert any("user namespaces" in problem for problem in report.problems)


_WITHOUT_LIBSECCOMP = """
import asyncio, sys
sys.modules["pyseccomp"] = None  # as on a machine where the binding or libseccomp is missing
from langchain_sandbox.errors import IsolationUnavailableError
from langchain_sandbox.providers.local import LocalProvider

async def main(base):
    try:
        await LocalProvider(base_dir=base + "/filtered").create()
    except IsolationUnavailableError as exc:
        print("refused:", exc)
    async with await LocalProvider(base_dir=base + "/opted-out", syscall_filter="none").create() as s:
        print("unfiltered:", (await s.run_code("6 * 7")).value)

asyncio.run(main(sys.argv[1]))
"""


def test_without_libseccomp_sessions_refuse_unless_the_filter_is_declined_by_name(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LIBSECCOMP, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    refused, unfiltered = done.stdout.splitlines()
    assert refused.startswith("refused:")
    assert "libseccomp2" in refused
    assert "pip install pyseccomp" in refused
    assert "syscall_filter='none'" in refused
    assert unfiltered == "unfiltered: 42"
    with pytest.raises(InvalidInputError, match="syscall_filter must be"):
        LocalProvider(syscall_filter="off")  # type: ignore[arg-type]


def test_the_probe_binds_only_the_system_directories(tmp_path: Path) -> None:
    # A bind of the host's whole / carried every mount under it into the probe, and bubblewrap
    # failed when one went away while it remounted them read-only (another session's workspace
    # image, under a parallel test run): the failure was cached, and no session started again.
    recorded = tmp_path / "argv"
    bwrap = tmp_path / "bwrap"
    real = shutil.which("bwrap")
    bwrap.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {recorded}\nexec {real} "$@"\n')
    bwrap.chmod(0o755)
    assert probe_isolation(str(bwrap)).bubblewrap_usable
    argv = recorded.read_text().splitlines()
    binds = {argv[i + 1] for i, option in enumerate(argv) if option.endswith("-bind")}
    assert binds, argv
    assert binds <= {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}, binds
