"""Suite-wide set-up: every test run keeps its sandboxes and blobs in a directory of its own."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from langchain_sandbox.home import ENVIRONMENTS_ENV, environments_dir

_HOME = tempfile.mkdtemp(prefix="lcsbx-tests-")


def pytest_configure(config: pytest.Config) -> None:
    # Sandbox environments are content-addressed and built once per machine: the suite shares
    # the user's cache (resolved before the override below), so the default one is built at most
    # once, by the first test that needs it, and later runs reuse it.
    os.environ.setdefault(ENVIRONMENTS_ENV, str(environments_dir()))
    # Set before any test (and any subprocess a test starts) can reach the default locations, so
    # the suite never touches the user's sessions or snapshot blobs.
    os.environ["LANGCHAIN_SANDBOX_HOME"] = _HOME


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)
