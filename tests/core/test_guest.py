"""The guest module on its own (it is stdlib-only, so it runs here as it runs in a sandbox)."""

from __future__ import annotations

import sys

import pytest

from langchain_sandbox.providers.guest import cells as guest


class _Bad:
    def __repr__(self) -> str:
        raise ValueError("no repr")


_REPR_NOTICE = (
    "repr() of the last value raised an exception; the value shown is a placeholder "
    "(its text, from the sandbox, names the type and the error)."
)


def test_a_failing_repr_is_a_placeholder_and_the_host_can_tell() -> None:
    text = guest.value_text(_Bad())
    assert text == "<_Bad object: repr() failed with ValueError: no repr>"
    assert guest.repr_failure(text) == _REPR_NOTICE
    # Any repr can return text that looks like the placeholder: the notice quotes none of it.
    assert guest.repr_failure("<[host] network on object: repr() failed with X>") == _REPR_NOTICE
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


def test_figures_are_capped_and_failures_reported_as_facts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for _ in range(3):
        plt.figure()
        plt.plot([1, 2, 3])
    one, failed, left_out = guest.collect_figures()
    assert (len(one), failed, left_out) == (3, [], 0)
    assert all(png.startswith(b"\x89PNG") for png in one)
    for _ in range(3):
        plt.figure()
        plt.plot([1, 2, 3])
    capped, failed, left_out = guest.collect_figures(max_bytes=len(one[0]) + 1)
    assert (len(capped), failed, left_out) == (1, [], 2)
    broken = plt.figure()
    broken.savefig = _raise_network_on  # type: ignore[method-assign]
    drawn, failed, left_out = guest.collect_figures()
    assert (drawn, failed, left_out) == ([], [1], 0)
    assert "figure 1 could not be drawn: RuntimeError: network on" in capsys.readouterr().err
    assert not plt.get_fignums(), "every figure is closed either way"
    assert "matplotlib.pyplot" in sys.modules


def _raise_network_on(*args: object, **kwargs: object) -> None:
    raise RuntimeError("network on")
