"""Tools called from sandboxed code are durable across a crash: a host process SIGKILLed after
an inner call with a side effect, then resumed in a new process (SQLite and Postgres
checkpointers; the local provider, and E2B and Runloop on their emulators, whose sandbox outlives
the killed process), does not repeat that call; the first call that had not returned runs for
real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import forked_python
import pytest
from story_providers import running_provider
from test_durable_sessions import HANG_GUARD, read_event

WORKER = Path(__file__).with_name("code_tools_worker.py")


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_sigkill_after_an_inner_call_then_resume_does_not_repeat_it(
    saver: tuple[str, str], blobs: str, tmp_path: Path, flavour: str
) -> None:
    _story(saver, blobs, tmp_path, flavour, "local", None)


@pytest.mark.parametrize("provider", ["e2b", "runloop"])
def test_on_a_remote_provider_the_replay_returns_the_recorded_result(
    blobs: str, tmp_path: Path, provider: str
) -> None:
    """The inner calls travel over the provider's own channel (frames out; a file, or the
    execution's stdin, in); the journal on the host is the same.

    On E2B the graph keeps the sandbox's record (the middleware), so the resumed process
    attaches to the sandbox the killed one used: its kernel stopped the killed call when the
    stream closed, and runs the replay. The Runloop emulator runs a devbox's executions one at
    a time, so a replay there could not start beside the killed call's execution, which waits
    for its reply: its story makes a new devbox (the exec tool alone keeps no record), and
    ``tests/runloop/test_tools_from_code.py`` shows the orphan giving way to the next call."""
    saver = ("sqlite", str(tmp_path / "checkpoints.sqlite"))
    with running_provider(provider) as story_provider:
        _story(saver, blobs, tmp_path, "async", provider, story_provider.env)


def _story(
    saver: tuple[str, str],
    blobs: str,
    tmp_path: Path,
    flavour: str,
    provider: str,
    env: dict[str, str] | None,
) -> None:
    ledger = tmp_path / "ledger.txt"
    base = [
        "--saver", saver[0], "--target", saver[1], "--blobs", blobs,
        "--thread", f"t-{uuid.uuid4().hex[:8]}", "--ledger", str(ledger),
        "--provider", provider, *(["--async"] if flavour == "async" else []),
        *(["--middleware"] if provider == "e2b" else []),
    ]  # fmt: skip
    doomed = forked_python.popen(
        [sys.executable, str(WORKER), *base, "--phase", "first"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
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

    done = run_worker_at(WORKER, *base, "--phase", "resume", env=env)
    # The replayed bump(1) answered from the journal (it saw a ledger of 1 line), bump(2) ran.
    assert ledger.read_text() == "1\n2\n"
    assert "bumped 1 2" in done["output"]
    # E2B's sandbox outlived the killed process: the replay ran in it, attached.
    assert f"same sandbox {provider == 'e2b'}" in done["output"]
    assert "1 tool call(s) from the code returned the result recorded" in done["output"]


def run_worker_at(worker: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``worker`` to the end; return its ``done`` event."""
    proc = forked_python.run(
        [sys.executable, str(worker), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
    )
    done = [json.loads(line) for line in proc.stdout.splitlines() if '"done"' in line]
    if proc.returncode != 0 or not done:
        raise AssertionError(f"worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(done[-1])
