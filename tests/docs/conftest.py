"""Reports what the snippet test ran, what it did not run (and why), and the pages with nothing to
run (which have no test)."""

from __future__ import annotations

import pytest

from .markdown_blocks import blocks
from .test_snippets import IDLE_PAGES, ROOT, TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLY["executed"] and not TALLY["not_run"]:
        return
    write = terminalreporter.write_line
    write(
        f"docs snippets: {len(TALLY['executed'])} blocks executed, "
        f"{len(TALLY['not_run'])} not run by design:"
    )
    for entry in TALLY["not_run"]:
        write(f"  not run  {entry}")
    if IDLE_PAGES:
        write(f"docs pages with nothing to run (no test collected): {len(IDLE_PAGES)}")
        for page in IDLE_PAGES:
            write(f"  idle     {page.relative_to(ROOT)}")
            for block in blocks(page, ROOT):
                if block.not_run is not None:
                    write(f"    not run  {block.where}: {block.not_run}")
