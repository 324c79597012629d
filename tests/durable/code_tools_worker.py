"""One process of the tools-from-code durability story: an agent whose single ``sandbox_exec``
call runs code that calls host tools with side effects, then exits (or is killed).

``--phase first`` runs the thread from its first message: the code calls ``bump(n=1)`` (a side
effect on the host: a line appended to ``--ledger``), then ``pause()``, which prints
``{"event": "blocked"}`` and hangs so the test can SIGKILL the process mid-call. ``--phase
resume`` resumes the thread from its checkpoint in a new process: the code runs again, ``bump(1)``
must come from the journal (no second line), ``pause()`` and ``bump(n=2)`` run for real. It prints
``{"event": "done", "output": <the tool's text>}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from agent_worker import async_saver, sync_saver
from langchain.agents import create_agent
from langchain_core.tools import tool

from langchain_sandbox import SandboxExecTool
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call

CODE = "a = tools.bump(n=1)\ntools.pause()\nb = tools.bump(n=2)\nprint('bumped', a, b)"


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def build(args: argparse.Namespace, saver: Any) -> tuple[Any, SandboxRuntime]:
    ledger = Path(args.ledger)

    @tool
    def bump(n: int) -> int:
        """Append n to the ledger (a side effect on the host); return the ledger's length."""
        with ledger.open("a") as handle:
            handle.write(f"{n}\n")
        return len(ledger.read_text().splitlines())

    @tool
    def pause() -> str:
        """In the first process: hang until killed."""
        if args.phase == "first":
            emit("blocked")
            time.sleep(3600)
        return "resumed"

    runtime = SandboxRuntime(snapshotter=Snapshotter(LocalDirectoryBlobStore(args.blobs)))
    model = ScriptedToolModel(script=[call("sandbox_exec", code=CODE), "Done."])
    exec_tool = SandboxExecTool(runtime=runtime, tools=[bump, pause])
    return create_agent(model, tools=[exec_tool], checkpointer=saver), runtime


def tool_output(result: dict[str, Any]) -> str:
    return str(next(m.content for m in result["messages"] if m.type == "tool"))


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--saver", "--target", "--blobs", "--thread", "--ledger", "--phase"):
        parser.add_argument(name, required=True)
    parser.add_argument("--async", dest="use_async", action="store_true")
    args = parser.parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    first = {"messages": [("user", "bump twice")]}
    payload = first if args.phase == "first" else None
    if args.use_async:

        async def run() -> dict[str, Any]:
            async with async_saver(args.saver, args.target) as saver:
                agent, runtime = build(args, saver)
                try:
                    return dict(await agent.ainvoke(payload, config))
                finally:
                    await runtime.aclose()

        result = asyncio.run(run())
    else:
        with sync_saver(args.saver, args.target) as saver:
            agent, runtime = build(args, saver)
            try:
                result = dict(agent.invoke(payload, config))
            finally:
                runtime.close()
    emit("done", output=tool_output(result))


if __name__ == "__main__":
    main()
