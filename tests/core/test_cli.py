"""The command line, as a user runs it: a real process, the real local provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "langchain_sandbox.cli"]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FAKE_API_KEY": "sk-host-secret-123"}
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, text=True, timeout=180, env=env
    )


def test_exec_prints_output_and_last_value() -> None:
    done = _run("exec", "import sys; x = 6 * 7; print(x); x")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "42\n[value] 42\n"


def test_exec_runs_in_the_selected_sandbox_environment() -> None:
    probe = (
        "import importlib.util as u; print(bool(u.find_spec('numpy')), bool(u.find_spec('pytest')))"
    )
    assert _run("exec", probe).stdout == "True False\n"  # default: the data stack, not the host's
    assert _run("exec", probe, "--template", "host").stdout.endswith("True\n")
    unknown = _run("exec", "1", "--template", "gpu")
    assert unknown.returncode == 2
    assert "no sandbox environment 'gpu'" in unknown.stderr


def test_exec_failures_and_timeouts_have_exit_codes() -> None:
    failed = _run("exec", "1 / 0")
    assert failed.returncode == 1
    assert "ZeroDivisionError" in failed.stderr
    timed = _run("exec", "while True: pass", "--timeout", "1")
    assert timed.returncode == 124
    assert "[timed out]" in timed.stderr


def test_shell_exit_code_and_env_allow_list() -> None:
    done = _run("shell", "echo hi; echo ${FAKE_API_KEY:-absent}; exit 3")
    assert done.returncode == 3
    assert done.stdout == "hi\nabsent\n"


def test_exec_reads_stdin_and_prints_json() -> None:
    done = _run("exec", "-", "--json", stdin="print('from stdin')\n")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stdout"] == "from stdin\n"
    assert result["kind"] == "code"


def test_doctor_reports_isolation_and_providers() -> None:
    done = _run("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "isolation works:   yes" in done.stdout
    # This machine has bubblewrap and runsc (and runs as root), so both levels really start.
    assert "  bubblewrap:        available\n" in done.stdout
    assert "  gvisor:            available\n" in done.stdout
    assert "network isolation: yes" in done.stdout
    for name in ("local", "e2b", "runloop", "kubernetes"):
        assert f"  {name}" in done.stdout


def test_demo_options_reach_the_demo(tmp_path: Path) -> None:
    done = _run("demo", "--model", "scripted", "--output-dir", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(p.read_bytes().startswith(b"\x89PNG") for p in tmp_path.rglob("*.png"))


@pytest.mark.parametrize("args", [["exec"], ["nope"]])
def test_bad_usage_is_an_error(args: list[str]) -> None:
    assert _run(*args).returncode == 2
