"""The sandbox channel's reducer merges parallel updates of one step."""

from __future__ import annotations

import pytest

from langchain_sandbox.state import SandboxState, merge_sandbox_state


def test_highest_revision_wins_and_counters_add() -> None:
    base: SandboxState = {"revision": 5, "head": "h5", "snapshot": "s5", "exec_count": 5}
    first: SandboxState = {"revision": 6, "head": "h6", "snapshot": "s6", "exec_count": 1}
    second: SandboxState = {"revision": 7, "head": "h7", "snapshot": "s7", "exec_count": 1}
    for a, b in ((first, second), (second, first)):
        merged = merge_sandbox_state(merge_sandbox_state(base, a), b)
        assert merged["revision"] == 7
        assert merged["head"] == "h7"
        assert merged["snapshot"] == "s7"
        assert merged["exec_count"] == 7


def test_empty_sides() -> None:
    update: SandboxState = {"revision": 1, "exec_count": 1}
    assert merge_sandbox_state(None, update) == update
    assert merge_sandbox_state(update, None) == update
    assert merge_sandbox_state(None, None) == {}


def test_two_records_claiming_one_revision_are_not_merged_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    left: SandboxState = {"revision": 3, "head": "h-left", "exec_count": 1}
    right: SandboxState = {"revision": 3, "head": "h-right", "exec_count": 1}
    with caplog.at_level("WARNING", logger="langchain_sandbox.state"):
        merged = merge_sandbox_state(left, right)
    assert merged["head"] == "h-right"
    assert "claim revision 3 with different heads (h-left, h-right)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="langchain_sandbox.state"):
        merge_sandbox_state(left, {"revision": 3, "head": "h-left", "exec_count": 0})
    assert not caplog.text, "the same state reported twice is no conflict"
