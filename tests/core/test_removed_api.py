"""Code written for the old Pyodide-based ``langchain-sandbox`` (0.0.x), whose import name this
package took over, fails with a message that names the replacement, not a bare ImportError."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import langchain_sandbox

# Every name the old package's releases exported (top level, ``pyodide`` and ``tool`` modules).
_OLD_NAMES = {
    "PyodideSandbox": "SandboxRuntime",
    "SyncPyodideSandbox": "SandboxRuntime",
    "BasePyodideSandbox": "SandboxRuntime",
    "PyodideSandboxTool": "SandboxExecTool",
    "PyodideStatefulSandboxTool": "SandboxExecTool",
    "PyodideStatelessSandboxTool": "SandboxExecTool",
    "CodeExecutionResult": "ExecutionResult",
}


@pytest.mark.parametrize(("old", "new"), sorted(_OLD_NAMES.items()))
def test_each_old_name_says_what_replaces_it(old: str, new: str) -> None:
    with pytest.raises(ImportError) as raised:
        exec(f"from langchain_sandbox import {old}", {})
    message = str(raised.value)
    assert f"{old} was part of the old Pyodide-based langchain-sandbox" in message
    assert f"from langchain_sandbox import {new}" in message
    assert "docs/migration.md" in message
    # The replacement it names really is importable from there.
    assert getattr(langchain_sandbox, new) is not None


def test_the_old_module_says_what_replaces_it() -> None:
    with pytest.raises(ImportError, match=r"SandboxExecTool .*SandboxRuntime.*migration\.md"):
        importlib.import_module("langchain_sandbox.pyodide")
    # Other missing names stay plain AttributeErrors, and no old name is advertised.
    assert not hasattr(langchain_sandbox, "NoSuchThing")
    assert not any(name.startswith("Pyodide") for name in dir(langchain_sandbox))


def test_the_old_readme_example_fails_with_the_message_in_a_fresh_interpreter() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from langchain_sandbox import PyodideSandbox, PyodideSandboxTool"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: PyodideSandbox was part of the old Pyodide-based")
    assert "SandboxRuntime" in last
