"""Capture and restore the globals of a Python interpreter, from inside the sandbox.

This module is stdlib-only and self-contained on purpose: the local worker imports it inside
bubblewrap, and the E2B and Runloop providers send its source to their kernels
(``inspect.getsource``), so there is one implementation of what "the variables" are.

What is captured, per global name (names starting with ``_`` are skipped):

* a module (``import numpy as np``): its name, re-imported on restore;
* a function or class defined by user code whose source is known (``linecache``): its source,
  executed again on restore;
* any other value that ``pickle`` accepts: its pickle;
* anything else: listed as *skipped*, so a restore can tell the model what was lost.
"""

from __future__ import annotations

import inspect
import linecache
import pickle
import re
import types
from typing import Any

FORMAT = 1


def _source_of(value: Any) -> str | None:
    """Source of a user-defined function or class, from the cells registered in ``linecache``."""
    if getattr(value, "__module__", None) not in ("__main__", "__sandbox__", None):
        return None
    if isinstance(value, types.FunctionType):
        try:
            return inspect.getsource(value)
        except (OSError, TypeError):
            return None
    if isinstance(value, type):
        # inspect.getsource(cls) looks in the module's file, which is not where a cell lives;
        # a method's code object names the cell, so search that cell for the class statement.
        for member in vars(value).values():
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if code is None:
                continue
            lines = linecache.getlines(code.co_filename)
            header = re.compile(rf"class\s+{re.escape(value.__name__)}\b")
            for index, line in enumerate(lines):
                if header.match(line):
                    return "".join(inspect.getblock(lines[index:]))
    return None


def dump_namespace(namespace: dict[str, Any]) -> tuple[bytes, list[str], list[str]]:
    """Return ``(blob, saved, skipped)`` for the user globals in ``namespace``."""
    modules: dict[str, str] = {}
    sources: dict[str, str] = {}
    values: dict[str, bytes] = {}
    skipped: list[str] = []
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in ("In", "Out", "exit", "quit", "get_ipython"):
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        source = _source_of(value)
        if source is not None:
            sources[name] = source
            continue
        try:
            values[name] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            skipped.append(name)
    blob = pickle.dumps(
        {"format": FORMAT, "modules": modules, "sources": sources, "values": values},
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    saved = sorted([*modules, *sources, *values])
    return blob, saved, sorted(skipped)


def load_namespace(namespace: dict[str, Any], blob: bytes) -> list[str]:
    """Restore a blob from :func:`dump_namespace` into ``namespace``; return names that failed.

    The blob comes from this package's own snapshot store (content-addressed, written only by the
    package), and it is unpickled *inside* the sandbox, so a hostile blob can do no more than the
    sandboxed code itself could.
    """
    state = pickle.loads(blob)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError("not a variables snapshot of a known format")
    failed: list[str] = []
    for name, module_name in state["modules"].items():
        try:
            namespace[name] = __import__(module_name, fromlist=["_"])
        except Exception:
            failed.append(name)
    for name, value in state["values"].items():
        try:
            namespace[name] = pickle.loads(value)
        except Exception:
            failed.append(name)
    for name, source in state["sources"].items():
        filename = f"<restored {name}>"
        lines = source.splitlines(keepends=True)
        linecache.cache[filename] = (len(source), None, lines, filename)
        try:
            exec(compile(source, filename, "exec"), namespace)
        except Exception:
            failed.append(name)
    return sorted(failed)
