"""The command line as a user runs it: a real process, the real local provider."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_cli(tmp_path: Path) -> RunCli:
    """Run ``langchain-sandbox ARGS...`` in ``tmp_path`` with its own package home."""

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LANGCHAIN_SANDBOX_HOME": str(tmp_path / "home")}
        return subprocess.run(
            [sys.executable, "-m", "langchain_sandbox.cli", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            cwd=tmp_path,
        )

    return run
