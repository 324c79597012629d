"""What the install tests build, made once per test run and shared by its xdist workers.

A wheel, a venv made by a user's ``pip install``: each takes minutes, and several workers
building the same one at once would race (pip builds a source tree in place, writing ``build/``
and ``*.egg-info`` into it). So each is built once per run, by the first worker that needs it,
under an ``fcntl.flock`` the other workers wait on, each from a copy of the checkout of its own
(the checkout itself is never written to). Serial runs (no xdist) take the same path with nobody waiting.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_NOT_SOURCE = (".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", "site")
_DONE = ".built"


def run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this test run that every xdist worker of the run sees: the parent of the
    workers' own base directories (``pytest-N/popen-gwK``), or the base directory itself when
    the run is serial."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The directory ``name`` of this run, filled by ``build(directory)`` the first time any
    worker asks; later callers (other workers included) wait for that build and reuse it.

    A build that raised leaves no mark, so the next caller builds again and fails with its own
    error rather than reusing a half-made directory.
    """
    root = run_directory(tmp_path_factory)
    directory = root / name
    with open(root / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (directory / _DONE).exists():
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir()
                build(directory)
                (directory / _DONE).touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return directory


def source_tree(into: Path) -> Path:
    """A copy of the checkout (without its venv, caches and build leftovers) in ``into``, for
    one build of its own: pip writes into the tree it builds, so two builds never share one."""
    tree = into / "source"
    shutil.copytree(REPO, tree, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    return tree
