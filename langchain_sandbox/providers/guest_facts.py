"""What a worker inside a sandbox may report besides data, checked and worded by the host.

Sandboxed code runs in the worker's process, so whatever the worker sends, the code could have
sent (see docs/isolation.md, "The worker channel"). The values, errors, streams and figures of a
reply are the sandbox's data, and the host shows them as such. Everything a model reads as the
host's own words (notices, failures, how much output was cut) is written here, from typed facts
the host validates: numbers clamped to what can be true, names checked against a known set, and
never a sentence taken from the sandbox.
"""

from __future__ import annotations

import builtins
import errno as errno_names
import os
from collections.abc import Mapping
from typing import Any

from langchain_sandbox.providers.guest.cells import MAX_FIGURE_BYTES

MAX_REPORTED_BYTES = 1 << 50
"""The largest byte count a sandbox may report (a petabyte): past it the count is a lie, and the
host shows this bound instead. Below it the count is what the sandbox measured and says so."""

_MAX_FIGURE_NUMBER = 1 << 31


class MalformedFact(ValueError):
    """A fact of the wrong type or out of its range: the reply was forged."""


def checked_count(value: Any, what: str) -> int:
    """A byte count the sandbox measured (``None``: 0), clamped at `MAX_REPORTED_BYTES`."""
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        raise MalformedFact(f"{what!r} must be a count of 0 or more")
    return min(value, MAX_REPORTED_BYTES)


def checked_dropped(dropped: Any) -> dict[str, int]:
    """The worker's count of bytes it dropped per stream (``{"stdout": n, "stderr": m}``)."""
    if dropped is None:
        return {}
    if not isinstance(dropped, dict) or not all(name in ("stdout", "stderr") for name in dropped):
        raise MalformedFact("'dropped' must map stdout/stderr to byte counts of 0 or more")
    return {name: checked_count(count, "dropped") for name, count in dropped.items()}


def figure_notices(failed: Any, left_out: Any) -> list[str]:
    """The notices for figures the worker could not return: the numbers of those that could
    not be drawn (the cell's stderr says why) and of the first one left out at the size cap."""
    failed = [] if failed is None else failed
    left_out = 0 if left_out is None else left_out
    numbers = [*failed, left_out] if isinstance(failed, list) else None
    if numbers is None or not all(type(n) is int and 0 <= n < _MAX_FIGURE_NUMBER for n in numbers):
        raise MalformedFact("figure numbers must be small counts")
    notices = [f"figure {number} could not be drawn (stderr says why)" for number in failed[:20]]
    if len(failed) > 20:
        notices.append(f"{len(failed) - 20} more figures could not be drawn")
    if left_out:
        notices.append(
            f"figure {left_out} and later ones were left out: figures are capped at "
            f"{MAX_FIGURE_BYTES} bytes per call"
        )
    return notices


def variable_names(names: Any, *, shown: int = 20) -> str:
    """Names of Python variables the sandbox reports, for a notice: Python identifiers only (a
    name that is not one, as ``globals()`` allows, is counted, not quoted), at most ``shown``."""
    if not isinstance(names, list):
        raise MalformedFact("variable names must be a list")
    valid = [name for name in names if isinstance(name, str) and name.isidentifier()]
    text = ", ".join(valid[:shown])
    rest = len(names) - min(len(valid), shown)
    if rest:
        text += f"{', ' if text else ''}{rest} more"
    return text


_REASON_CHARS = 200


def variable_reasons(reasons: Mapping[str, str]) -> str:
    """Variables and why the sandbox says each was not kept, for a notice: the names checked as
    in `variable_names`, each reason quoted as the sandbox's words (``repr``: one line),
    cut at 200 characters. The reason is worth keeping (a generator cannot be pickled, a
    variable is too large) but only the sandbox can tell it, and user code can raise any text
    from a ``__reduce__``."""
    parts = []
    for name, why in reasons.items():
        shown = name if isinstance(name, str) and name.isidentifier() else "(a variable)"
        parts.append(f"{shown} (the sandbox says: {str(why)[:_REASON_CHARS]!r})")
    return "; ".join(parts)


def failure_text(failure: Any) -> str:
    """The host's sentence for a `failure_facts`: a built-in exception's name and the
    host's own text for its errno; anything else is named only as a failure."""
    if not isinstance(failure, dict):
        return "it reported a failure it did not describe"
    name, errno = failure.get("name"), failure.get("errno")
    kind = getattr(builtins, name, None) if isinstance(name, str) else None
    text = kind.__name__ if isinstance(kind, type) and issubclass(kind, BaseException) else ""
    text = text or "an exception"
    if type(errno) is int and errno in errno_names.errorcode:
        text += f" ([Errno {errno}] {os.strerror(errno)})"
    return f"it raised {text}"


__all__ = [
    "MAX_REPORTED_BYTES",
    "MalformedFact",
    "checked_count",
    "checked_dropped",
    "failure_text",
    "figure_notices",
    "variable_names",
    "variable_reasons",
]
