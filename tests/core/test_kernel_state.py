"""Capturing and restoring interpreter globals (the code every sandbox runs)."""

from __future__ import annotations

import linecache
import threading

import pytest

from langchain_sandbox.providers.guest.packer import cloudpickle_source
from langchain_sandbox.providers.guest.variables import dump_namespace, load_namespace, prepare


@pytest.fixture(autouse=True)
def _kernel_prepared() -> None:
    """What every sandbox does before its first dump: load the shipped cloudpickle."""
    prepare(cloudpickle_source())


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
    assert list(skipped) == ["lock"]

    fresh: dict[str, object] = {"__name__": "__main__"}
    failed = load_namespace(fresh, blob)
    assert failed == {}
    assert fresh["data"] == {"a": [1, 2, 3]}
    assert fresh["double"](21) == 42  # type: ignore[operator]
    assert fresh["j"].dumps([1]) == "[1]"  # type: ignore[attr-defined]
    assert fresh["Point"](3).x == 3  # type: ignore[operator]
    assert "_private" not in fresh


def test_unknown_blob_is_refused() -> None:
    import pickle

    with pytest.raises(ValueError, match="known format"):
        load_namespace({}, pickle.dumps({"format": 999}))


def test_loading_into_a_namespace_that_moved_on_equals_loading_into_a_fresh_one() -> None:
    """A rewind loads an earlier dump into the live interpreter: globals made since are gone,
    changed ones are back, and the kernel's own names are left alone."""
    earlier: dict[str, object] = {"__name__": "__main__"}
    exec("import json\nx = 1\nitems = [1]\n", earlier)
    blob, _, _ = dump_namespace(earlier)

    live = dict(earlier)
    exec("x = 2\nitems.append(2)\nlater = 'new'\nimport os\n_private = 1\n", live)
    live["In"] = ["kernel history"]
    assert load_namespace(live, blob) == {}
    fresh: dict[str, object] = {"__name__": "__main__"}
    assert load_namespace(fresh, blob) == {}

    def user(ns: dict[str, object]) -> dict[str, object]:
        return {k: v for k, v in ns.items() if not k.startswith("_") and k != "In"}

    assert user(live) == user(fresh) == {"json": __import__("json"), "x": 1, "items": [1]}
    assert live["In"] == ["kernel history"]
