"""The one process-group killer both guest workers use (``providers/guest/process_groups.py``)."""

from __future__ import annotations

import os
import subprocess
import time

from langchain_sandbox.providers.guest.process_groups import end_group, start_group, terminate_group


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


def _command_with_a_stubborn_child() -> tuple[subprocess.Popen[bytes], int]:
    """A bash that exits on SIGTERM, with a child in its group that ignores SIGTERM."""
    process = subprocess.Popen(
        ["bash", "-c", "bash -c 'trap \"\" TERM; echo $$; while :; do sleep 0.05; done' & wait"],
        stdout=subprocess.PIPE,
        **start_group(),
    )
    assert process.stdout is not None
    child = int(process.stdout.readline())
    return process, child


def test_a_timeout_ends_children_that_outlive_their_leader() -> None:
    process, child = _command_with_a_stubborn_child()
    assert os.getpgid(child) == process.pid
    terminate_group(process, grace=2.0)
    assert process.returncode is not None
    assert _wait_gone(child), "a child that ignored SIGTERM outlived the timeout"


def test_end_group_with_wait_returns_once_the_group_is_gone() -> None:
    process, child = _command_with_a_stubborn_child()
    end_group(process.pid)
    process.wait()
    end_group(process.pid, wait=2.0)
    assert _wait_gone(child, 0.5)
