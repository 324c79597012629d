"""Where the package keeps its own files on this machine: session directories and snapshot blobs.

``$LANGCHAIN_SANDBOX_HOME`` puts both under one directory (what tests and containers want);
otherwise they follow the XDG base directories: live sessions are *state*, snapshot blobs *data*.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "LANGCHAIN_SANDBOX_HOME"
"""Environment variable naming the one directory under which the package keeps its files."""

ENVIRONMENTS_ENV = "LANGCHAIN_SANDBOX_ENVIRONMENTS"
"""Environment variable naming the directory of the local provider's built sandbox environments."""


def _xdg_dir(variable: str, *fallback: str) -> Path:
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get(variable) or os.path.join(os.path.expanduser("~"), *fallback)
    return Path(base).expanduser() / "langchain-sandbox"


def state_dir() -> Path:
    """``$LANGCHAIN_SANDBOX_HOME``, else ``$XDG_STATE_HOME/langchain-sandbox``
    (``~/.local/state/langchain-sandbox``): the local provider's session directories."""
    return _xdg_dir("XDG_STATE_HOME", ".local", "state")


def data_dir() -> Path:
    """``$LANGCHAIN_SANDBOX_HOME``, else ``$XDG_DATA_HOME/langchain-sandbox``
    (``~/.local/share/langchain-sandbox``): the default snapshot blob store lives below it."""
    return _xdg_dir("XDG_DATA_HOME", ".local", "share")


def environments_dir() -> Path:
    """``$LANGCHAIN_SANDBOX_ENVIRONMENTS``, else ``<state_dir()>/environments``: the local
    provider's sandbox environments, built once per machine and shared by every process."""
    configured = os.environ.get(ENVIRONMENTS_ENV)
    if configured:
        return Path(configured).expanduser()
    return state_dir() / "environments"


__all__ = ["ENVIRONMENTS_ENV", "HOME_ENV", "data_dir", "environments_dir", "state_dir"]
