"""Tools called from sandboxed code are durable across a crash: a host process SIGKILLed after
an inner call with a side effect, then resumed in a new process (SQLite and Postgres
checkpointers), does not repeat that call; the first call that had not returned runs for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_durable_sessions import HANG_GUARD, read_event

WORKER = Path(__file__).with_name("code_tools_worker.py")


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_sigkill_after_an_inner_call_then_resume_does_not_repeat_it(
    saver: tuple[str, str], blobs: str, tmp_path: Path, flavour: str
) -> None:
    ledger = tmp_path / "ledger.txt"
    base = [
        "--saver", saver[0], "--target", saver[1], "--blobs", blobs,
        "--thread", f"t-{uuid.uuid4().hex[:8]}", "--ledger", str(ledger),
        *(["--async"] if flavour == "async" else []),
    ]  # fmt: skip
    doomed = subprocess.Popen(
        [sys.executable, str(WORKER), *base, "--phase", "first"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_event(doomed, "blocked")
        assert ledger.read_text() == "1\n"  # bump(1) ran and returned before the kill
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=HANG_GUARD)
    finally:
        if doomed.poll() is None:
            doomed.kill()
        doomed.communicate()
    assert doomed.returncode == -signal.SIGKILL

    done = run_worker_at(WORKER, *base, "--phase", "resume")
    # The replayed bump(1) answered from the journal (it saw a ledger of 1 line), bump(2) ran.
    assert ledger.read_text() == "1\n2\n"
    assert "bumped 1 2" in done["output"]
    assert "1 tool call(s) from the code returned the result recorded" in done["output"]


def run_worker_at(worker: Path, *args: str) -> dict[str, Any]:
    """Run ``worker`` to the end; return its ``done`` event."""
    proc = subprocess.run(
        [sys.executable, str(worker), *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    done = [json.loads(line) for line in proc.stdout.splitlines() if '"done"' in line]
    if proc.returncode != 0 or not done:
        raise AssertionError(f"worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(done[-1])
