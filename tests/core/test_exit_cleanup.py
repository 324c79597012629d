"""A script that uses the default runtime and just ends leaves no sandbox behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_default_runtime_closes_its_sandboxes_at_exit(tmp_path: Path) -> None:
    script = (
        "from langchain_sandbox import SandboxExecTool\n"
        "print(SandboxExecTool().invoke({'code': 'x = 1\\nx'}))\n"
    )
    env = {**os.environ, "LANGCHAIN_SANDBOX_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "value:\n1" in done.stdout
    assert "failed" not in done.stderr, done.stderr
    assert list((tmp_path / "sessions").iterdir()) == []
