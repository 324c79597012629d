"""Every fenced code block of the documentation runs as written (see ``markdown_blocks``).

One test per page: its Python and shell blocks run in page order in a fresh interpreter, in a scratch
directory whose ``.venv`` is the environment running the tests (pages say ``.venv/bin/...``), with
``$LANGCHAIN_SANDBOX_HOME`` there too and no provider API key: everything runs offline, on the local
provider or the emulators of ``langchain_sandbox.testing``. A page with nothing to run (no code
block, or only blocks marked not-run) gets no test at all rather than one that passes having run
nothing. How many blocks ran, which were not run and why, and which pages had nothing to run, is
printed at the end of the session (``conftest.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .markdown_blocks import PYTHON, SHELL, Block, MarkdownError, blocks

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").rglob("*.md")]
)
RUNNER = Path(__file__).with_name("run_page.py")
SECRETS = ("E2B_API_KEY", "RUNLOOP_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def _runs(block: Block) -> bool:
    return block.language in PYTHON | SHELL and block.not_run is None


def _nothing_to_run(page: Path) -> bool:
    """Whether ``page`` has no block to run; a page that breaks the block rules has a test,
    which fails saying how."""
    try:
        return not any(_runs(b) for b in blocks(page, ROOT))
    except MarkdownError:
        return False


IDLE_PAGES = [page for page in PAGES if _nothing_to_run(page)]
"""Pages with nothing to run: listed at the end of the session, with no test of their own."""

TALLY: dict[str, list[str]] = {"executed": [], "not_run": []}

# Every page in a fresh interpreter, some with sandboxes and emulators: minutes in all.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "page",
    [page for page in PAGES if page not in IDLE_PAGES],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    relative = page.relative_to(ROOT)
    found = blocks(page, ROOT)
    runnable = [b for b in found if _runs(b)]
    TALLY["not_run"] += [
        f"{relative}:{b.line}: {b.not_run}" for b in found if b.not_run is not None
    ]
    spec = {
        "page": str(relative),
        "blocks": [
            {
                "line": b.line,
                "language": "python" if b.language in PYTHON else "bash",
                "code": b.code,
            }
            for b in runnable
        ],
    }
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env["LANGCHAIN_SANDBOX_HOME"] = str(tmp_path / "home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path / "blocks.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{relative}\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    TALLY["executed"] += [f"{relative}:{b.line}" for b in runnable]
