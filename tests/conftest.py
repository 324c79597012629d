"""Suite-wide set-up: every test run keeps its sandboxes and blobs in a directory of its own."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_HOME = tempfile.mkdtemp(prefix="lcsbx-tests-")


def pytest_configure(config: pytest.Config) -> None:
    # Set before any test (and any subprocess a test starts) can reach the default locations, so
    # the suite never touches the user's own state directory.
    os.environ["LANGCHAIN_SANDBOX_HOME"] = _HOME


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)
