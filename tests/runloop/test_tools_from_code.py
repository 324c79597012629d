"""Tools called from code on Runloop, through the real SDK against the emulator: the code call is
one ``execute_async`` with ``attach_stdin``, each answer one ``send_std_in`` of a JSON line
(never retried), and the emulator's stdin FIFO never stays in the workspace."""

from __future__ import annotations

import asyncio
import base64
import json
import shlex

from tool_hosts import DoublingHost

from langchain_sandbox.processes import ProcessSpec
from langchain_sandbox.providers.guest.tool_frames import TOOL_FRAME
from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator


async def test_answers_go_to_the_executions_stdin(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    session = await provider.create()
    await session.run_code("0")  # the worker and its interpreter are ready
    emulator.clear_requests()
    result = await session.run_code("[tools.double(n=i) for i in range(3)]", tools=DoublingHost())
    assert result.ok, result.render()
    assert result.value == "[0, 2, 4]"
    calls = [(r.method, r.path.rsplit("/", 1)[-1], r.json()) for r in emulator.requests]
    (started,) = [body for _, name, body in calls if name == "execute_async"]
    assert started["attach_stdin"] is True
    sent = [body for _, name, body in calls if name == "send_std_in"]
    assert [json.loads(body["text"]) for body in sent] == [
        {"ok": True, "value": n * 2, "seq": n + 1} for n in range(3)
    ]
    assert all(body["text"].endswith("\n") and body["text"].count("\n") == 1 for body in sent)
    listed = await session.list_files(".", recursive=True)
    assert not [info.path for info in listed if "runloop-emulator-stdin" in info.path]
    # Without tools, stdin is not attached.
    emulator.clear_requests()
    await session.run_code("1")
    (plain,) = [r.json() for r in emulator.requests if r.path.endswith("/execute_async")]
    assert "attach_stdin" not in plain
    await session.close()


async def test_a_call_whose_host_died_gives_way_to_the_next_one(provider: RunloopProvider) -> None:
    """A killed host leaves its execution waiting for a tool reply that never comes (the devbox
    outlives the host). The next client to connect is the replayed call of a new host: the
    waiting code stops with ``ToolLimitError`` and the new call runs at once, variables kept.

    (The emulator runs a devbox's executions one at a time, so the orphan is started here as a
    background process, which does not hold the devbox the way an execution does.)"""
    session = await provider.create()
    await session.run_code("kept = 41")
    request = {
        "code": "try:\n    tools.double(n=1)\nexcept tools.ToolLimitError as exc:\n    print(exc)",
        "timeout": 120,
        "env": {},
        "max_output_bytes": 100_000,
        "tools": DoublingHost.specs,
    }
    argument = base64.b64encode(json.dumps(request).encode()).decode()
    launcher = shlex.quote(provider.shipped_worker.launcher)
    orphan = ProcessSpec(name="orphan", command=f"python3 -c {launcher} code {argument}")
    await session.start_process(orphan)
    for _ in range(100):  # until its frame is out: it waits for the reply
        if TOOL_FRAME in (await session.process_output("orphan")).text:
            break
        await asyncio.sleep(0.1)
    result = await session.run_code("kept + 1", timeout=30)
    assert not result.timed_out, result.render()
    assert result.ok, result.render()
    assert result.value == "42"
    output = (await session.process_output("orphan")).text
    assert '"stdout": "the host of this call is gone\\n"' in output
    await session.close()


async def test_a_tool_call_after_the_stream_was_held_past_its_limit(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    """Runloop ends an output stream that has been held open too long (an SSE ``408`` error
    frame); the SDK reconnects from the last offset, so a call made later is still seen."""
    emulator.max_hold = 1.0
    session = await provider.create()
    code = "import time\ntime.sleep(2.5)\ntools.double(n=21)"
    result = await session.run_code(code, tools=DoublingHost(), timeout=30)
    assert result.ok, result.render()
    assert result.value == "42"
    streams = [r for r in emulator.requests if r.path.endswith("/stream_stdout_updates")]
    assert len(streams) >= 2  # reconnected
    await session.close()
