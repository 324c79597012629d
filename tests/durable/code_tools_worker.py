"""One process of the tools-from-code durability story: an agent whose single ``sandbox_exec``
call runs code that calls host tools with side effects, then exits (or is killed).

``--phase first`` runs the thread from its first message: the code calls ``bump(n=1)`` (a side
effect on the host: a line appended to ``--ledger``), then ``pause()``, which prints
``{"event": "blocked"}`` and hangs so the test can SIGKILL the process mid-call. ``--phase
resume`` resumes the thread from its checkpoint in a new process: the code runs again, ``bump(1)``
must come from the journal (no second line), ``pause()`` and ``bump(n=2)`` run for real. It prints
``{"event": "done", "output": <the tool's text>}``. ``--provider e2b|runloop`` runs the sandbox on
that provider (its SDK's environment settings point it at the test's emulator).
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

from langchain_sandbox import SandboxExecTool, SandboxMiddleware
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call

FIRST = "open('/tmp/made-by-the-first-call', 'w').close()"  # /tmp: in no snapshot
CODE = (
    "import os\n"
    "print('same sandbox', os.path.exists('/tmp/made-by-the-first-call'))\n"
    "a = tools.bump(n=1)\ntools.pause()\nb = tools.bump(n=2)\nprint('bumped', a, b)"
)


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

    snapshotter = Snapshotter(LocalDirectoryBlobStore(args.blobs))
    runtime = SandboxRuntime(args.provider, snapshotter=snapshotter)
    # A first call puts the sandbox in a checkpoint: the resumed process attaches to it (a remote
    # one outlives the kill, its interpreter still in the killed call) instead of making one.
    script = [call("sandbox_exec", code=FIRST), call("sandbox_exec", code=CODE), "Done."]
    model = ScriptedToolModel(script=script)
    if args.middleware:
        # The sandbox's record goes into the graph's state: a resume attaches to it.
        middleware = SandboxMiddleware(runtime=runtime, code_tools=[bump, pause])
        return create_agent(model, middleware=[middleware], checkpointer=saver), runtime
    exec_tool = SandboxExecTool(runtime=runtime, tools=[bump, pause])
    return create_agent(model, tools=[exec_tool], checkpointer=saver), runtime


def tool_output(result: dict[str, Any]) -> str:
    return str([m.content for m in result["messages"] if m.type == "tool"][-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--saver", "--target", "--blobs", "--thread", "--ledger", "--phase"):
        parser.add_argument(name, required=True)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--provider", default="local", help="local, e2b or runloop")
    parser.add_argument("--middleware", action="store_true", help="SandboxMiddleware(code_tools=)")
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
