"""One worker process of the thread-lock tests: one turn of a create_agent agent on a thread, with
a Postgres checkpointer, inside ``PostgresThreadLock.hold`` (or ``ahold`` with ``--async``).

The turn's one sandbox call appends ``--label`` to ``turns.txt``. It prints JSON lines:
``{"event": "acquiring"}``, ``{"event": "holding"}`` once the lock is held (with ``--pause`` it
then waits for a line on stdin before running the turn, so a test can start a second worker while
the first holds the thread, with no timing involved), then ``{"event": "done", "turns": ...,
"humans": [...]}`` (the file and the thread's human messages after the turn), or
``{"event": "busy", "message": ..., "type": ...}`` when another run holds the thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

from agent_worker import emit
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from langchain_sandbox import PostgresThreadLock, SandboxRuntime, ThreadBusyError
from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call


def script(messages: list[BaseMessage]) -> Any:
    if isinstance(messages[-1], ToolMessage):
        return "done"
    return call("sandbox_exec", code=f"open('turns.txt', 'a').write({messages[-1].text!r})")


def _held(pause: bool) -> None:
    emit("holding")
    if pause:
        sys.stdin.readline()


def _agent(runtime: SandboxRuntime, saver: Any) -> Any:
    return create_agent(
        ScriptedToolModel(script=script),
        middleware=[SandboxMiddleware(runtime=runtime, release_between_turns=True)],
        checkpointer=saver,
    )


def _report(runtime: SandboxRuntime, thread: str, values: dict[str, Any]) -> None:
    turns = runtime.read_files(thread, ["turns.txt"], record=values["sandbox"]).value
    humans = [m.text for m in values["messages"] if isinstance(m, HumanMessage)]
    emit("done", turns=turns["turns.txt"].decode(), humans=humans)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--blobs", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--pause", action="store_true")
    parser.add_argument("--wait", default="0", help="seconds, or 'forever'")
    parser.add_argument("--async", dest="use_async", action="store_true")
    args = parser.parse_args()
    wait = None if args.wait == "forever" else float(args.wait)
    lock = PostgresThreadLock(args.dsn, wait=wait)
    config: Any = {"configurable": {"thread_id": args.thread}}
    inputs = {"messages": [HumanMessage(args.label)]}
    snapshotter = Snapshotter(LocalDirectoryBlobStore(args.blobs))
    with SandboxRuntime("local", snapshotter=snapshotter) as runtime:
        emit("acquiring")
        try:
            if args.use_async:
                values = asyncio.run(_aturn(lock, runtime, args, inputs, config))
            else:
                with PostgresSaver.from_conn_string(args.dsn) as saver, lock.hold(args.thread):
                    saver.setup()
                    _held(args.pause)
                    values = _agent(runtime, saver).invoke(inputs, config)
        except ThreadBusyError as exc:
            emit("busy", message=str(exc), type=type(exc).__name__)
            return
        _report(runtime, args.thread, values)


async def _aturn(
    lock: PostgresThreadLock, runtime: SandboxRuntime, args: Any, inputs: Any, config: Any
) -> Any:
    async with contextlib.AsyncExitStack() as stack:
        saver = await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(args.dsn))
        await saver.setup()
        await stack.enter_async_context(lock.ahold(args.thread))
        await asyncio.to_thread(_held, args.pause)
        return await _agent(runtime, saver).ainvoke(inputs, config)


if __name__ == "__main__":
    main()
