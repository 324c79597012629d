"""The guest module on its own (it is stdlib-only, so it runs here as it runs in a sandbox)."""

from __future__ import annotations

import sys

import pytest

from langchain_sandbox.providers import guest


class _Bad:
    def __repr__(self) -> str:
        raise ValueError("no repr")


def test_a_failing_repr_is_a_placeholder_and_the_host_can_tell() -> None:
    text = guest.value_text(_Bad())
    assert text == "<_Bad object: repr() failed with ValueError: no repr>"
    assert guest.repr_failure(text) == (
        "repr() of the last value (_Bad) raised ValueError: no repr; the value shown is a "
        "placeholder."
    )
    assert guest.repr_failure("'an ordinary string'") is None
    assert guest.value_text(None) is None
    assert guest.value_text("x" * (guest.MAX_VALUE_CHARS + 5)).endswith("...")


def test_cells_return_the_last_value_and_tracebacks_show_only_user_frames() -> None:
    cells = guest.Cells({"__name__": "__main__"})
    assert cells.run("a = 2\na * 21") == 42
    assert cells.run("b = a") is None
    with pytest.raises(ZeroDivisionError) as caught:
        cells.run("def f():\n    return 1 / 0\nf()")
    report = guest.describe_exception(caught.value, machinery=(__file__,))
    assert report["name"] == "ZeroDivisionError"
    assert '"<cell-3>", line 3' in report["traceback"]
    assert '"<cell-3>", line 2, in f' in report["traceback"]
    assert "guest.py" not in report["traceback"]
    assert __file__ not in report["traceback"], "the caller's frames are machinery too"


def test_figures_are_capped_with_a_notice() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for _ in range(3):
        plt.figure()
        plt.plot([1, 2, 3])
    one, notices = guest.collect_figures()
    assert len(one) == 3
    assert not notices
    assert all(png.startswith(b"\x89PNG") for png in one)
    for _ in range(3):
        plt.figure()
        plt.plot([1, 2, 3])
    capped, notices = guest.collect_figures(max_bytes=len(one[0]) + 1)
    assert len(capped) == 1
    assert "left out" in notices[0]
    assert not plt.get_fignums(), "every figure is closed either way"
    assert "matplotlib.pyplot" in sys.modules
