"""The local provider's isolation levels, as the test suites run them."""

from __future__ import annotations

import os
import platform
import sys

import pytest

from langchain_sandbox.errors import IsolationUnavailableError

ISOLATION_LEVELS = ("bubblewrap", "gvisor")
"""The local provider's isolation levels: the security and conformance suites run on each."""


def require_gvisor() -> None:
    """Fail, saying what to do, when this machine should run gVisor sandboxes and cannot.

    Only where runsc cannot run at all (not Linux on x86-64 or arm64, or a host process that is
    not root) are the gVisor-level tests skipped, with that reason in the summary: a missing or
    broken runsc on a machine that could have it is a failure, never a quiet pass.
    """
    from langchain_sandbox.providers.local._gvisor import find_runsc, try_runsc

    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(f"gVisor does not run on {sys.platform}/{platform.machine()}")
    if os.geteuid() != 0:
        pytest.skip("gVisor sandboxes need a root host process (runsc); these tests run as a user")
    try:
        runsc = find_runsc()
    except IsolationUnavailableError as exc:
        pytest.fail(f"{exc} (.ci/bootstrap installs it where apt can; its log says if it could)")
    problem = try_runsc(runsc)
    if problem:
        pytest.fail(problem)
