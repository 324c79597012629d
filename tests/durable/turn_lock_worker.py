"""One worker process of the thread-lease tests: one turn of a create_agent agent on a thread,
with a SQLite (``--saver sqlite``, and a local blob store: a file lease) or Postgres checkpointer.

Nothing here takes a lock: ``SandboxMiddleware`` leases the thread itself. ``--wait SECONDS``
(or ``forever``) waits for a busy thread with ``runtime.hold_thread`` around the turn;
``--explicit-lock`` turns the middleware's lease off and holds ``PostgresThreadLock`` instead.
The turn's one sandbox call appends ``--label`` to ``turns.txt``. It prints JSON lines:
``{"event": "started"}``; ``{"event": "holding"}`` from the first model call, when the lease is
held (with ``--pause`` it then waits for a line on stdin, so a test can start a second worker
while the first holds the thread, with no timing involved); ``{"event": "waiting"}`` when the
lease is busy and the worker waits for it; then ``{"event": "done", "turns": ..., "humans": [...]}``
(the file and the thread's human messages after the turn), ``{"event": "busy", "message": ...,
"type": ...}`` when another run holds the thread, ``{"event": "interrupted"}`` (``--hitl``: the
turn stopped for an approval; ``--resume`` approves it) or ``{"event": "failed"}`` (``--fail``:
the model raises). With ``--linger`` the worker then waits for a line on stdin before it exits,
so a test can check that a turn that ended this way left the thread free while its process lives.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from typing import Any

from agent_worker import emit
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from langchain_sandbox import PostgresThreadLock, SandboxRuntime, ThreadBusyError
from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing import ScriptedToolModel, call


class _Waiting(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if "waiting" in record.getMessage():
            emit("waiting")


def _script(args: Any) -> Any:
    held = []

    def script(messages: list[BaseMessage]) -> Any:
        if not held:
            held.append(True)
            emit("holding")
            if args.pause:
                sys.stdin.readline()
        if args.fail:
            raise RuntimeError("the model failed")
        if isinstance(messages[-1], ToolMessage):
            return "done"
        return call("sandbox_exec", code=f"open('turns.txt', 'a').write({args.label!r})")

    return script


def _agent(args: Any, runtime: SandboxRuntime, saver: Any) -> Any:
    middleware: list[Any] = [
        SandboxMiddleware(
            runtime=runtime,
            release_between_turns=True,
            busy="off" if args.explicit_lock else "fail",
        )
    ]
    if args.hitl or args.resume:
        middleware.append(HumanInTheLoopMiddleware({"sandbox_exec": True}))
    return create_agent(
        ScriptedToolModel(script=_script(args)), middleware=middleware, checkpointer=saver
    )


def _report(runtime: SandboxRuntime, thread: str, values: dict[str, Any]) -> None:
    if values.get("__interrupt__"):
        emit("interrupted")
        return
    turns = runtime.read_files(thread, ["turns.txt"], record=values["sandbox"]).value
    humans = [m.text for m in values["messages"] if isinstance(m, HumanMessage)]
    emit("done", turns=turns["turns.txt"].decode(), humans=humans)


def _saver(args: Any) -> Any:
    if args.saver == "sqlite":
        if args.use_async:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            return AsyncSqliteSaver.from_conn_string(args.target)
        from langgraph.checkpoint.sqlite import SqliteSaver

        return SqliteSaver.from_conn_string(args.target)
    if args.use_async:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        return AsyncPostgresSaver.from_conn_string(args.target)
    from langgraph.checkpoint.postgres import PostgresSaver

    return PostgresSaver.from_conn_string(args.target)


def _inputs(args: Any) -> Any:
    if args.resume:
        return Command(resume={"decisions": [{"type": "approve"}]})
    return {"messages": [HumanMessage(args.label)]}


def _wait(args: Any) -> float | None:
    return None if args.wait == "forever" else float(args.wait or 0)


def _turn(args: Any, runtime: SandboxRuntime, config: Any) -> Any:
    with _saver(args) as saver, contextlib.ExitStack() as stack:
        saver.setup()
        if args.explicit_lock:
            stack.enter_context(PostgresThreadLock(args.target).hold(args.thread))
        if args.wait:
            hold = runtime.hold_thread(args.thread, checkpointer=saver, wait=_wait(args))
            stack.enter_context(hold)
        return _agent(args, runtime, saver).invoke(_inputs(args), config)


async def _aturn(args: Any, runtime: SandboxRuntime, config: Any) -> Any:
    async with _saver(args) as saver, contextlib.AsyncExitStack() as stack:
        await saver.setup()
        if args.explicit_lock:
            await stack.enter_async_context(PostgresThreadLock(args.target).ahold(args.thread))
        if args.wait:
            hold = runtime.ahold_thread(args.thread, checkpointer=saver, wait=_wait(args))
            await stack.enter_async_context(hold)
        return await _agent(args, runtime, saver).ainvoke(_inputs(args), config)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saver", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--target", required=True, help="the SQLite file or the Postgres DSN")
    parser.add_argument("--blobs", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--pause", action="store_true")
    parser.add_argument("--wait", help="seconds, or 'forever'")
    parser.add_argument("--hitl", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--linger", action="store_true")
    parser.add_argument("--explicit-lock", action="store_true")
    parser.add_argument("--async", dest="use_async", action="store_true")
    args = parser.parse_args()
    lease_log = logging.getLogger("langchain_sandbox.checkpointing.thread_lease")
    lease_log.addHandler(_Waiting())
    lease_log.setLevel(logging.INFO)
    config: Any = {"configurable": {"thread_id": args.thread}}
    snapshotter = Snapshotter(LocalDirectoryBlobStore(args.blobs))
    with SandboxRuntime("local", snapshotter=snapshotter) as runtime:
        emit("started")
        try:
            if args.use_async:
                values = asyncio.run(_aturn(args, runtime, config))
            else:
                values = _turn(args, runtime, config)
        except ThreadBusyError as exc:
            emit("busy", message=str(exc), type=type(exc).__name__)
            values = None
        except RuntimeError as exc:
            emit("failed", message=str(exc))
            values = None
        if values is not None:
            _report(runtime, args.thread, values)
        if args.linger:
            sys.stdin.readline()


if __name__ == "__main__":
    main()
