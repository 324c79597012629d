"""The one way guest code travels into a sandbox, for every provider (host side).

Every provider ships the same guest modules (`cells`, `variables` with cloudpickle, `changes`,
`tool_frames`, the `supervisor`, a worker); only the transport differs: the local provider copies
files into the sandbox (`source_path`), the Runloop and Kubernetes workers carry the modules
inside one `standalone` script, E2B's kernel builds each module once from its `packed_source`
under a `versioned_name`. So a sandbox never runs code of another version than the host's, and
no sandbox needs cloudpickle installed (a sandbox environment's virtualenv, an E2B template or a
Runloop blueprint may have none, or another version): the package's pinned version is the one
every dump is made and loaded with.

Sources are read from files the first time and kept (`functools.cache`): callers on an event
loop read them once in a worker thread.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import inspect
import zlib
from pathlib import Path
from types import ModuleType

SHIPPED_MARKER = "\n# <shipped>\n"
"""A guest module whose top is host-only (`changes`) ships only what is below this line."""

_PACKAGE_IMPORTS = ("# <package-imports>", "# </package-imports>")


def source_path(name: str) -> Path:
    """The file of the guest module ``name`` (``"cells"``, ``"supervisor"``...), as the local
    provider copies it into a sandbox; read without importing it."""
    return Path(__file__).with_name(f"{name}.py")


@functools.cache
def module_source(module: ModuleType) -> str:
    """The whole source of a guest module."""
    return inspect.getsource(module)


@functools.cache
def shipped_part(module: ModuleType) -> str:
    """What of ``module`` runs in a sandbox: below its `SHIPPED_MARKER` (the whole module if it
    has none), to inline into a script that starts with its own ``__future__`` import."""
    source = module_source(module)
    if SHIPPED_MARKER not in source:
        return source
    return source[source.index(SHIPPED_MARKER) + len(SHIPPED_MARKER) :]


def packed_source(source: str) -> str:
    """``source`` compressed and base64-encoded: it travels in command lines and kernel
    requests, whose length is bounded."""
    return base64.b64encode(zlib.compress(source.encode(), 9)).decode("ascii")


def versioned_name(name: str, *sources: str) -> str:
    """A module name for ``name`` that changes with its ``sources``: a sandbox that outlives
    the host's upgrade builds the new version instead of reusing the old one."""
    digest = hashlib.sha256("\0".join(sources).encode()).hexdigest()[:12]
    return f"_langchain_sandbox_{name}_{digest}"


@functools.cache
def shipped_module(module: ModuleType, name: str | None = None) -> tuple[str, str]:
    """``(versioned name, packed source)`` of a guest module as a sandbox builds it on its own;
    ``name`` (default: the module's own) is what the versioned name starts with, so a sandbox's
    ``sys.modules`` says which guest module it is. A part cut below its marker gets the
    ``__future__`` import back: its annotations name types the sandbox never imports."""
    source = shipped_part(module)
    if source != module_source(module):
        source = "from __future__ import annotations\n" + source
    shown = name or module.__name__.rpartition(".")[2]
    return versioned_name(shown, source), packed_source(source)


def standalone(module: ModuleType, inlined: str) -> str:
    """``module``'s source with its ``<package-imports>`` block replaced by ``inlined``: a
    script that runs without the package (the worker shipped into a devbox or pod)."""
    source = module_source(module)
    start, end = _PACKAGE_IMPORTS
    return source[: source.index(start)] + inlined + source[source.index(end) + len(end) :]


@functools.cache
def cloudpickle_path() -> Path:
    """The installed ``cloudpickle/cloudpickle.py`` (the whole library), found without importing
    it."""
    spec = importlib.util.find_spec("cloudpickle")
    if spec is None or spec.origin is None:
        raise ImportError("cloudpickle is not installed (it is a dependency of langchain-sandbox)")
    return Path(spec.origin).with_name("cloudpickle.py")


@functools.cache
def cloudpickle_source() -> str:
    """The text of `cloudpickle_path`, shipped with `variables`."""
    return cloudpickle_path().read_text(encoding="utf-8")


__all__ = [
    "SHIPPED_MARKER",
    "cloudpickle_path",
    "cloudpickle_source",
    "module_source",
    "packed_source",
    "shipped_module",
    "shipped_part",
    "source_path",
    "standalone",
    "versioned_name",
]
