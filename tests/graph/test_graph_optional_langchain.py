"""The graph glue works without the ``langchain`` package; only the middleware needs it, and asking
for it without the package names the extra that brings it."""

from __future__ import annotations

import subprocess
import sys

_WITHOUT_LANGCHAIN = """
import sys

class _NoLangchain:
    def find_spec(self, name, path=None, target=None):
        if name == "langchain" or name.startswith("langchain."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoLangchain())

import langchain_sandbox.graph as graph
from langchain_sandbox.errors import MissingDependencyError

assert graph.SandboxToolNode and graph.SandboxGraphState
assert not any(m == "langchain" or m.startswith("langchain.") for m in sys.modules)
try:
    graph.SandboxMiddleware
except MissingDependencyError as exc:
    print("refused:", exc)
"""


def test_graph_glue_imports_without_langchain() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LANGCHAIN], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout
    assert "pip install 'langchain-sandbox[agents]'" in proc.stdout
