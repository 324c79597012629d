"""The emulated code interpreter's kernel, driven over its JSON-lines pipe with no sandbox around
it: where an interrupt lands relative to its cell decides nothing but which cell it stops.

On a loaded machine the emulator's interrupt can reach the kernel before the kernel has started
the timed-out cell, or just after that cell ended; both orders are forced here by the order of
the lines on the kernel's stdin, so no timing is involved."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from langchain_sandbox.testing._e2b_machine import _worker_program


class _Kernel:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        assert self.event()["type"] == "ready"

    def send(self, *messages: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        self.proc.stdin.flush()

    def event(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the kernel exited"
        return dict(json.loads(line))

    def cell(self) -> list[dict[str, Any]]:
        """The events of one cell, up to its end."""
        events = []
        while (event := self.event())["type"] != "end":
            events.append(event)
        return events


@pytest.fixture
def kernel() -> Iterator[_Kernel]:
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", _worker_program()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield _Kernel(proc)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(60)
def test_an_interrupt_that_arrives_before_its_cell_starts_still_stops_it(kernel: _Kernel) -> None:
    kernel.send({"code": "kept = 41", "id": 1})
    assert kernel.cell() == []
    kernel.send({"interrupt": 2}, {"code": "while True:\n    pass", "id": 2})
    (error,) = kernel.cell()
    assert (error["type"], error["name"]) == ("error", "KeyboardInterrupt")
    # The kernel lived through it: the variables are still there.
    kernel.send({"code": "kept + 1", "id": 3})
    assert kernel.cell() == [{"type": "value", "text": "42"}]


@pytest.mark.timeout(60)
def test_an_interrupt_that_arrives_after_its_cell_ended_stops_nothing(kernel: _Kernel) -> None:
    kernel.send({"code": "kept = 41", "id": 1})
    assert kernel.cell() == []
    kernel.send({"interrupt": 1}, {"code": "import time\ntime.sleep(0.3)\nkept + 1", "id": 2})
    # One end for the cell, with its value: the late interrupt neither stopped it nor ended it twice.
    assert kernel.cell() == [{"type": "value", "text": "42"}]
    kernel.send({"code": "print('alive')", "id": 3})
    assert kernel.cell() == [{"type": "stdout", "text": "alive\n"}]
