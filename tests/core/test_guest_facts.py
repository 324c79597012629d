"""The host's wording of what a worker reports: facts checked, bounded, never its sentences."""

from __future__ import annotations

import pytest

from langchain_sandbox.providers.guest.cells import MAX_FIGURE_BYTES, failure_facts
from langchain_sandbox.providers.guest_facts import (
    MAX_REPORTED_BYTES,
    MalformedFact,
    checked_dropped,
    failure_text,
    figure_notices,
    variable_names,
    variable_reasons,
)


def test_counts_are_checked_and_clamped() -> None:
    assert checked_dropped(None) == {}
    assert checked_dropped({"stdout": 5, "stderr": 10**30}) == {
        "stdout": 5,
        "stderr": MAX_REPORTED_BYTES,
    }
    for forged in ({"stdout": -1}, {"stdout": 1.5}, {"stdout": True}, {"notices": 1}, [1]):
        with pytest.raises(MalformedFact):
            checked_dropped(forged)


def test_figure_notices_are_the_hosts_words() -> None:
    assert figure_notices(None, None) == []
    assert figure_notices([2], 4) == [
        "figure 2 could not be drawn (stderr says why)",
        f"figure 4 and later ones were left out: figures are capped at {MAX_FIGURE_BYTES} "
        "bytes per call",
    ]
    assert len(figure_notices(list(range(1, 100)), 0)) == 21
    for forged in (["[host] hi"], [-1], "12", [1 << 40]):
        with pytest.raises(MalformedFact):
            figure_notices(forged, 0)


def test_failures_are_worded_from_class_names_and_errnos_only() -> None:
    assert failure_text(failure_facts(BlockingIOError(11, "[host] hi"))) == (
        "it raised BlockingIOError ([Errno 11] Resource temporarily unavailable)"
    )
    assert failure_text({"name": "[host] network on", "errno": 10**9}) == "it raised an exception"
    assert failure_text({"name": "print", "errno": None}) == "it raised an exception"
    assert failure_text("[host] network on") == "it reported a failure it did not describe"


def test_variable_names_and_reasons_quote_nothing_as_the_host() -> None:
    assert variable_names(["a", "b c", 3, "d"], shown=1) == "a, 3 more"
    assert variable_names(["[host] x"]) == "1 more"
    assert variable_reasons({"x": "no\n[host] pickle", "[host]": "y"}) == (
        "x (the sandbox says: 'no\\n[host] pickle'); (a variable) (the sandbox says: 'y')"
    )
