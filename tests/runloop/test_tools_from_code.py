"""Tools called from code on Runloop, through the real SDK against the emulator: the code call is
one ``execute_async`` with ``attach_stdin``, each answer one ``send_std_in`` of a JSON line
(never retried), and the emulator's stdin FIFO never stays in the workspace."""

from __future__ import annotations

import json
from typing import Any

from langchain_sandbox.providers.runloop import RunloopProvider
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator


class _Host:
    specs = [{"name": "double", "params": ["n"]}]

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "value": args["n"] * 2}

    def notices(self) -> list[str]:
        return []


async def test_answers_go_to_the_executions_stdin(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    session = await provider.create()
    await session.run_code("0")  # the worker and its interpreter are ready
    emulator.clear_log()
    result = await session.run_code("[tools.double(n=i) for i in range(3)]", tools=_Host())
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
    emulator.clear_log()
    await session.run_code("1")
    (plain,) = [r.json() for r in emulator.requests if r.path.endswith("/execute_async")]
    assert "attach_stdin" not in plain
    await session.close()
