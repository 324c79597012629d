"""The README's first command, as a user runs it: a venv made by the user-facing install (no dev
extra), then ``langchain-sandbox demo``. The sandbox's packages come from the default sandbox
environment, not from that venv (which has no matplotlib)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from langchain_sandbox.demo import CHART_NAME

# Hang guard: the venv's install runs in the test (or another xdist worker's, waited for).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_demo_in_a_venv_made_by_the_user_install(
    tmp_path: Path, user_venv: Callable[..., Path]
) -> None:
    venv = user_venv("agents")
    host_has_matplotlib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import matplotlib"], capture_output=True
    )
    assert host_has_matplotlib.returncode != 0  # the chart can only come from the sandbox's own
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [str(venv / "bin" / "langchain-sandbox"), "demo", "--output-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    chart = tmp_path / "out" / CHART_NAME
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    lines = done.stdout.splitlines()
    assert lines[-1] == f"chart saved to {chart.resolve()}"
    assert lines[-2].startswith("sandbox environment 'default': ")
    assert "The chart is monthly_sales.png in the sandbox." in done.stdout
