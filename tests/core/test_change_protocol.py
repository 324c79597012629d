"""The guest's side of the change-listing protocol (`guest_changes.answer_changes`), which E2B's
kernel and the Runloop/Kubernetes worker both run: a token names the listing it leaves, an unknown
token is ``stale``, a workspace that is not a directory is ``missing``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_sandbox.providers.guest.changes import answer_changes

_CAPS = {"max_bytes": 1 << 20, "max_file_bytes": 1 << 20}


class _Memory:
    def __init__(self) -> None:
        self.last: tuple[str, dict[str, list[Any]]] | None = None

    def remembered(self) -> tuple[str, dict[str, list[Any]]] | None:
        return self.last

    def remember(self, last: tuple[str, dict[str, list[Any]]]) -> None:
        self.last = last


def test_a_token_names_the_listing_it_left_and_an_unknown_one_is_stale(tmp_path: Path) -> None:
    memory = _Memory()
    (tmp_path / "a.txt").write_bytes(b"a")
    first = answer_changes(
        {"path": str(tmp_path), "known": {}, **_CAPS}, memory.remembered, memory.remember
    )
    assert [entry[0] for entry in first["changed"]] == ["a.txt"]
    assert first["contents"] == {"a.txt": "YQ=="}
    assert memory.last is not None
    assert memory.last[0] == first["token"]

    (tmp_path / "b.txt").write_bytes(b"bb")
    second = answer_changes(
        {"path": str(tmp_path), "since": first["token"], **_CAPS},
        memory.remembered,
        memory.remember,
    )
    assert [entry[0] for entry in second["changed"]] == ["b.txt"]  # a.txt is known by the token
    assert second["token"] != first["token"]

    stale = answer_changes(
        {"path": str(tmp_path), "since": first["token"], **_CAPS},
        memory.remembered,
        memory.remember,
    )
    assert stale == {"stale": True}
    assert answer_changes(
        {"path": str(tmp_path), "since": "anything", **_CAPS}, lambda: None, memory.remember
    ) == {"stale": True}


def test_a_workspace_that_is_not_a_directory_is_missing(tmp_path: Path) -> None:
    memory = _Memory()
    answer = answer_changes(
        {"path": str(tmp_path / "gone"), "known": {}, **_CAPS}, memory.remembered, memory.remember
    )
    assert answer == {"missing": str(tmp_path / "gone")}
    assert memory.last is None
