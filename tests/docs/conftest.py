"""Reports what the snippet test ran and what it did not run (and why)."""

from __future__ import annotations

import pytest

from .test_snippets import TALLY


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
