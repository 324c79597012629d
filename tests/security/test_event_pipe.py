"""Class 5: whatever sandboxed code writes on the worker's event pipe, the host stays sound.

The worker's event pipe is reachable from user code (its descriptor is in ``/proc/self/fd``).
Each kind of message has one outcome, pinned here: a malformed one ends the call with a result
that names it and replaces the worker; forged output never passes the per-call cap. The session
stays usable after each. Forged replies (for the running request, another one, a second
``done``) are class 14, test_forged_results.py.
"""

from __future__ import annotations

import asyncio

import pytest

from langchain_sandbox.errors import SandboxError
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession
from langchain_sandbox.results import ExecutionResult

_HANG = 120.0

# Finds the event pipe among the worker's descriptors (the only pipe open for writing that is
# not stdout or stderr) and writes ``PAYLOAD`` (bytes) on it.
_WRITE_ON_EVENT_PIPE = """
import os, stat
def _event_fds():
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2:
            continue
        try:
            info = os.fstat(fd)
            flags = __import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFL)
        except OSError:
            continue
        if stat.S_ISFIFO(info.st_mode) and flags & os.O_ACCMODE == os.O_WRONLY:
            yield fd
for _fd in _event_fds():
    # All of it: a pipe may take a large write in parts (gVisor's do).
    _view = memoryview(PAYLOAD)
    while _view:
        _view = _view[os.write(_fd, _view):]
"""


async def _attack(session: LocalSession, payload: bytes) -> object:
    code = f"PAYLOAD = {payload!r}\n" + _WRITE_ON_EVENT_PIPE
    try:
        return await asyncio.wait_for(session.run_code(code), _HANG)
    except SandboxError as error:
        return error


async def _still_usable(session: LocalSession) -> None:
    after = await asyncio.wait_for(session.run_code("6 * 7"), _HANG)
    assert after.value == "42", after.render()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000 + b"\n", id="deeply-nested-json"),
        pytest.param(b'{"ev": "out", "id": [1]}\n', id="unhashable-id"),
        pytest.param(b"[1, 2]\n", id="not-an-object"),
        pytest.param(b"\xff\xfe not json\n", id="garbage"),
    ],
)
async def test_a_malformed_message_ends_the_call_and_replaces_the_worker(
    provider: LocalProvider, payload: bytes
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    try:
        assert (await session.run_code("kept = 1")).ok
        outcome = await _attack(session, payload)
        # A result for the model, not an exception: the call failed because of what it sent.
        assert isinstance(outcome, ExecutionResult), outcome
        assert not outcome.ok
        assert outcome.error is not None
        assert "malformed message on its event pipe" in outcome.error.value
        assert any("malformed message" in notice for notice in outcome.notices), outcome.notices
        # The worker that read the pipe was replaced: its variables went with it.
        gone = await asyncio.wait_for(session.run_code("kept"), _HANG)
        assert gone.error is not None, gone.render()
        assert gone.error.name == "NameError", gone.render()
        await _still_usable(session)
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_a_nested_json_line_is_reported_and_the_worker_replaced(
    provider: LocalProvider,
) -> None:
    session = await provider.create(SessionSpec(limits=Limits(timeout=30.0)))
    try:
        outcome = await _attack(session, b"[" * 100_000 + b"\n")
        assert isinstance(outcome, ExecutionResult), outcome
        assert outcome.error is not None
        assert "malformed message" in outcome.error.value
        after = await session.run_code("'alive'")
        assert after.value == "'alive'"
    finally:
        await asyncio.wait_for(session.close(), _HANG)


async def test_forged_output_events_do_not_pass_the_output_cap(provider: LocalProvider) -> None:
    cap = 10_000
    session = await provider.create(SessionSpec(limits=Limits(timeout=60.0, max_output_bytes=cap)))
    received: dict[str, int] = {"stdout": 0, "stderr": 0}

    def on_output(stream: str, text: str) -> None:
        received[stream] += len(text)

    try:
        forge = (
            """
import sys, json
frame = sys._getframe()
while frame is not None and "request_id" not in frame.f_locals:
    frame = frame.f_back
chunk = "x" * 100_000
line = (json.dumps({"ev": "out", "id": frame.f_locals["request_id"], "stream": "stdout",
                    "data": chunk}) + "\\n").encode()
PAYLOAD = line * 200
"""
            + _WRITE_ON_EVENT_PIPE
        )
        result = await asyncio.wait_for(session.run_code(forge, on_output=on_output), _HANG)
        # 20 MB of forged stdout went on the pipe; the callback saw at most the cap.
        assert result.error is None, result.render()
        assert 0 < received["stdout"] <= cap
        assert len(result.stdout.encode()) <= cap + 200  # head, tail and the note between
        assert result.truncated
        await _still_usable(session)
    finally:
        await asyncio.wait_for(session.close(), _HANG)
