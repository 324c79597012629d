"""The README's quickstart runs as written and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_quickstart_runs_as_written() -> None:
    text = README.read_text(encoding="utf-8")
    code = re.search(r"## Quickstart\n\n```python\n(.*?)```", text, re.S)
    assert code is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "README.md", "exec"), {})
    printed = out.getvalue()
    assert "value:\n42" in printed
    assert "value:\n6.283185307179586" in printed


def test_readme_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    block = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert block[0].startswith("bash .ci/bootstrap demo")
    assert block[1].startswith("bash .ci/bootstrap test")
    assert "bash .ci/bootstrap test" in (README.parent / ".ci" / "run").read_text()
