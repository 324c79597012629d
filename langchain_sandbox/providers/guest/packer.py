"""cloudpickle as source, for `kernel_state` in every sandbox.

cloudpickle is pure Python: every provider sends this text into its sandboxes with
``kernel_state``, which loads it under a private module name (``kernel_state.prepare``). A
sandbox therefore never needs cloudpickle installed (a sandbox environment's virtualenv, an E2B
template or a Runloop blueprint may have none, or another version), and the package's pinned
version is the one every dump is made and loaded with.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


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
    """The text of `cloudpickle_path`."""
    return cloudpickle_path().read_text(encoding="utf-8")


__all__ = ["cloudpickle_path", "cloudpickle_source"]
