"""The named operations E2B's kernel runs for the host (stdlib only, Python >= 3.8).

E2B's kernel has no API of ours: the host sends code. Rather than a program written as a string
per operation, this module is shipped into the kernel as source once per kernel (by
`langchain_sandbox.providers.e2b._kernel`, like `kernel_state` and `guest_changes`), and each
operation (a variables dump or load, a change listing, the `tools` object of a call with host
tools) is one call of one of its functions, from a function the kernel runs, which passes the
user's globals and the guest modules the operation needs (``ks``: `kernel_state`; ``changes``:
`guest_changes`). Every function prints its answer as lines behind `MARKER`, which the host
picks out of the execution's stdout; the last line is the answer, in JSON.
"""

from __future__ import annotations

import base64
import json
from typing import Any

MARKER = "__langchain_sandbox_kernel_state__"
"""The prefix of every line of an answer (the rest of the cell's output is not ours)."""


def _say(text: str) -> None:
    print(MARKER + text)


def _dump(ks: Any, namespace: dict[str, Any], limit: int, chunk_bytes: int) -> dict[str, Any]:
    """Print the dump of ``namespace`` as base64 lines of ``chunk_bytes``; return its
    description, which the host checks the lines against."""
    blob, saved, skipped = ks.dump_namespace(namespace, limit)
    for start in range(0, len(blob), chunk_bytes):
        _say(base64.b64encode(blob[start : start + chunk_bytes]).decode())
    return {"size": len(blob), "saved": saved, "skipped": skipped}


def dump_variables(ks: Any, namespace: dict[str, Any], limit: int, chunk_bytes: int) -> None:
    """The dump's chunks, then its description."""
    _say(json.dumps(_dump(ks, namespace, limit, chunk_bytes)))


def add_chunk(ks: Any, chunk: str) -> None:
    """Keep one base64 ``chunk`` of a dump being loaded (a large dump comes in several calls)."""
    ks.incoming = getattr(ks, "incoming", b"") + base64.b64decode(chunk)
    _say("ok")


def load_variables(ks: Any, namespace: dict[str, Any], last: str) -> None:
    """Load the dump (the chunks kept, then ``last``) into ``namespace``; answer the names that
    failed and why."""
    blob = getattr(ks, "incoming", b"") + base64.b64decode(last)
    ks.incoming = b""
    _say(json.dumps(ks.load_namespace(namespace, blob)))


def list_changes(
    changes: Any,
    request: dict[str, Any],
    ks: Any = None,
    namespace: dict[str, Any] | None = None,
    limit: int = 0,
    chunk_bytes: int = 1,
) -> None:
    """`guest_changes.answer_changes` with the last listing kept on the module (it lives as
    long as the kernel): each carried file on a line of its own (a ``[path, base64]`` pair, so no
    line is over a file's cap), with ``ks`` the dump's chunks, then the answer (with the dump's
    description under ``variables``)."""
    answer = changes.answer_changes(
        request,
        lambda: getattr(changes, "last_answered", None),
        lambda last: setattr(changes, "last_answered", last),
    )
    for path, data in answer.pop("contents", {}).items():
        _say(json.dumps([path, data]))
    if ks is not None and namespace is not None and "changed" in answer:
        answer["variables"] = _dump(ks, namespace, limit, chunk_bytes)
    _say(json.dumps(answer))


def install_tools(cells: Any, frames: Any, specs: str, answers: str, seconds: float) -> None:
    """Make one call's ``tools`` object (``cells.Tools`` over ``frames.FramedToolCalls``, which
    writes its requests to stdout and polls ``answers`` files for ``seconds`` at most). It lives
    in ``builtins``, not in the user's globals, so a variables dump never holds it."""
    import builtins
    import sys

    calls = frames.FramedToolCalls(sys.stdout, answers, seconds)
    builtins.tools = cells.Tools(json.loads(specs), calls)  # type: ignore[attr-defined]


def remove_tools() -> None:
    """Take the ``tools`` object away after the call (a no-op when it is not there)."""
    import builtins

    builtins.__dict__.pop("tools", None)
