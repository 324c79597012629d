"""Capturing and restoring interpreter globals (the code every sandbox runs)."""

from __future__ import annotations

import linecache
import threading

from langchain_sandbox.providers.kernel_state import dump_namespace, load_namespace


def _run_cell(namespace: dict[str, object], source: str, name: str) -> None:
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    exec(compile(source, name, "exec"), namespace)


def test_values_modules_and_functions_round_trip_unpicklables_are_listed() -> None:
    ns: dict[str, object] = {"__name__": "__main__"}
    _run_cell(
        ns,
        "import json as j\n"
        "data = {'a': [1, 2, 3]}\n"
        "def double(x):\n    return 2 * x\n"
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "_private = 1\n",
        "<cell-1>",
    )
    ns["lock"] = threading.Lock()
    blob, saved, skipped = dump_namespace(ns)
    assert saved == ["Point", "data", "double", "j"]
    assert skipped == ["lock"]

    fresh: dict[str, object] = {"__name__": "__main__"}
    failed = load_namespace(fresh, blob)
    assert failed == []
    assert fresh["data"] == {"a": [1, 2, 3]}
    assert fresh["double"](21) == 42  # type: ignore[operator]
    assert fresh["j"].dumps([1]) == "[1]"  # type: ignore[attr-defined]
    assert fresh["Point"](3).x == 3  # type: ignore[operator]
    assert "_private" not in fresh


def test_unknown_blob_is_refused() -> None:
    import pickle

    import pytest

    with pytest.raises(ValueError, match="known format"):
        load_namespace({}, pickle.dumps({"format": 999}))
