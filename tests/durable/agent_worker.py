"""One worker process of the durable-session tests: runs a thread of an agent, then exits (or dies).

The tests start this file with ``python agent_worker.py ...`` so that every story crosses real
process boundaries: the sandbox of one process is gone in the next, and only the checkpointer and
the snapshot store connect them. It prints one JSON object per line on stdout:

* ``{"event": "blocked", "turn": n}``: the model reached the turn given by ``--block-at-turn``
  and hangs there, so the test can SIGKILL the process mid-run;
* ``{"event": "done", ...}``: the run ended (or stopped at an interrupt), with the tool outputs,
  the sandbox record and the checkpoint ids the test needs;
* with ``--serve``: one reply per command line read on stdin (alternating workers; a turn may
  name a ``checkpoint_id`` to fork from; ``flush`` waits for the snapshots written behind).

Stories (``--story``):

* ``attach``: a variable that cannot be pickled (a lock), to tell an attach from a restore;
* ``crash``: stateful steps with a file, a variable and two parallel calls (create_agent +
  SandboxMiddleware);
* ``fork``: two steps that each change a variable and a file, then a step per new human message
  that prints both and writes the message into the file, so every branch shows what it sees;
* ``approval``: a hand-built graph whose model asks, in one message, for a sandbox side effect and
  for a human's approval (a tool that calls ``interrupt()``), then reads the side effect back;
* ``approval-agent``: the same script in create_agent + SandboxMiddleware (each call a ``Send``);
* ``hitl``: create_agent with HumanInTheLoopMiddleware gating ``sandbox_exec``;
* ``count``: every human message increments a counter variable and appends to a file (the
  message ``ask`` pauses the thread at an ``interrupt()`` instead, until a ``resume``);
* ``code``: every human message is Python code the model runs as it is;
* ``tools``: every human message is a JSON tool call ``{"tool": name, "args": {...}}`` the model
  makes as it is (background processes and ports, through ``sandbox_shell`` and
  ``sandbox_process``);
* ``behind``: two steps that change a variable and a file (the second also makes a lock, to tell an
  attach from a restore), then a step that prints them (snapshots written behind, on E2B).

``--fork-in-flight`` (with the ``fork`` story): run the first two steps, then, while the second
step's snapshot is still being written behind, fork from the first step's checkpoint, then continue
the original branch; the ``done`` event carries what each branch printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

# The tests directory, for the agent loop the graph tests share (this file runs as a script).
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command, interrupt

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.snapshots import _knowledge as snapshotter
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


def _turn(messages: list[BaseMessage]) -> int:
    return sum(isinstance(m, AIMessage) for m in messages)


def _blocking(steps: list[Any], block_at: int | None) -> Callable[[list[BaseMessage]], Any]:
    """Steps by turn; at ``block_at`` the model hangs (the test kills the process there)."""

    def script(messages: list[BaseMessage]) -> Any:
        turn = _turn(messages)
        if turn == block_at:
            emit("blocked", turn=turn)
            time.sleep(3600)
        return steps[turn]

    return script


CRASH_STEPS: list[Any] = [
    call("sandbox_exec", code="x = 41\nopen('notes.txt', 'w').write('first')"),
    [  # two calls in one message: merged into one record
        call("sandbox_write_file", path="data/table.csv", content="a,b\n1,2\n"),
        call("sandbox_exec", code="y = [x, 'kept']"),
    ],
    call("sandbox_exec", code="x += 1\nopen('notes.txt', 'a').write(' second')"),
    call(
        "sandbox_exec",
        code="print(x, y, open('notes.txt').read(), open('data/table.csv').read().split())",
    ),
    "done",
]

ATTACH_STEPS: list[Any] = [
    call(
        "sandbox_exec",
        code="import threading\nlock = threading.Lock()\ncount = 1\n_ = open('a.txt', 'w').write('kept')",
    ),
    call("sandbox_exec", code="print(type(lock).__name__, count, open('a.txt').read())"),
    "done",
]

BEHIND_STEPS: list[Any] = [
    call("sandbox_exec", code="x = 1\n_ = open('a.txt', 'w').write('one')"),
    call(
        "sandbox_exec",
        code="import threading\nlock = threading.Lock()\nx = 2\n_ = open('a.txt', 'w').write('two')",
    ),
    call("sandbox_exec", code="print(x, open('a.txt').read())\nprint(type(lock).__name__)"),
    "done",
]

FORK_STEPS: list[Any] = [
    call("sandbox_exec", code="v = 1\nopen('f.txt', 'w').write('one')"),
    call(
        "sandbox_exec",
        code="print('before', v, open('f.txt').read())\nv = 2\nopen('f.txt', 'w').write('two')",
    ),
    "done",
]


def fork_script(messages: list[BaseMessage]) -> Any:
    """Fixed first steps; then, per human message, print the state and write the message."""
    last = messages[-1]
    if isinstance(last, HumanMessage) and _turn(messages) > 0:
        code = f"print('now', v, open('f.txt').read())\nv += 10\nopen('f.txt', 'w').write({last.text!r})"
        return call("sandbox_exec", code=code)
    if isinstance(last, ToolMessage) and _turn(messages) >= len(FORK_STEPS):
        return "ok"
    return FORK_STEPS[_turn(messages)]


def count_script(messages: list[BaseMessage]) -> Any:
    if isinstance(messages[-1], ToolMessage):
        return "counted"
    if messages[-1].text == "ask":  # pause the thread for a human (interrupt()) first
        return call("ask_approval", question="Go on counting?")
    code = (
        "import os\nn = globals().get('n', 0) + 1\n"
        "open('log.txt', 'a').write(f'{n}:{os.getpid()}\\n')\nprint(n, open('log.txt').read().split())"
    )
    return call("sandbox_exec", code=code)


def code_script(messages: list[BaseMessage]) -> Any:
    if isinstance(messages[-1], ToolMessage):
        return "ran"
    return call("sandbox_exec", code=messages[-1].text)


def tools_script(messages: list[BaseMessage]) -> Any:
    if isinstance(messages[-1], ToolMessage):
        return "ran"
    asked = json.loads(messages[-1].text)
    return call(asked["tool"], **asked["args"])


APPROVAL_STEPS: list[Any] = [
    [
        call("sandbox_exec", code="open('effects.txt', 'a').write('effect\\n')\nz = 'set once'"),
        call("ask_approval", question="Publish the report?"),
    ],
    call("sandbox_exec", code="print(repr(open('effects.txt').read()), z)"),
    "approved and done",
]

HITL_STEPS: list[Any] = [
    call("sandbox_exec", code="open('effects.txt', 'a').write('effect\\n')\nprint('wrote')"),
    call("sandbox_exec", code="print(repr(open('effects.txt').read()))"),
    "done",
]


@tool
def ask_approval(question: str) -> str:
    """Ask a human to approve and return their answer."""
    return str(interrupt({"question": question}))


@contextlib.contextmanager
def sync_saver(kind: str, target: str) -> Iterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(target) as saver:
            yield saver
    elif kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target) as saver:
            saver.setup()
            yield saver
    else:
        raise SystemExit(f"no sync saver {kind!r}")


@contextlib.asynccontextmanager
async def async_saver(kind: str, target: str) -> AsyncIterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(target) as saver:
            yield saver
    elif kind == "postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(target) as saver:
            await saver.setup()
            yield saver
    else:
        raise SystemExit(f"no async saver {kind!r}")


@contextlib.contextmanager
def sandbox_runtime(args: argparse.Namespace) -> Iterator[SandboxRuntime]:
    """The runtime, with its snapshot blobs in a shared directory or in a Postgres store."""
    if args.blobs.startswith("postgres"):
        from langgraph.store.postgres import PostgresStore

        from langchain_sandbox.snapshots import LangGraphStoreBlobStore

        with PostgresStore.from_conn_string(args.blobs) as store:
            store.setup()
            runtime = SandboxRuntime(
                args.provider, snapshotter=Snapshotter(LangGraphStoreBlobStore(store))
            )
            try:
                yield runtime
            finally:
                runtime.close()
        return
    runtime = SandboxRuntime(
        args.provider, snapshotter=Snapshotter(LocalDirectoryBlobStore(Path(args.blobs)))
    )
    try:
        yield runtime
    finally:
        runtime.close()


def build(args: argparse.Namespace, runtime: SandboxRuntime, saver: Any) -> Any:
    from langchain_sandbox.graph import SandboxMiddleware

    if args.story == "approval":
        return _approval_graph(runtime, saver)
    middleware: list[Any] = []
    if args.story == "hitl":
        from langchain.agents.middleware import HumanInTheLoopMiddleware

        middleware.append(HumanInTheLoopMiddleware(interrupt_on={"sandbox_exec": True}))
    middleware.append(
        SandboxMiddleware(runtime=runtime, release_between_turns=args.release_between_turns)
    )
    script: Any = {
        "approval-agent": APPROVAL_STEPS,
        "crash": _blocking(CRASH_STEPS, args.block_at_turn),
        "attach": _blocking(ATTACH_STEPS, args.block_at_turn),
        "behind": _blocking(BEHIND_STEPS, args.block_at_turn),
        "fork": fork_script,
        "count": count_script,
        "code": code_script,
        "tools": tools_script,
        "hitl": HITL_STEPS,
    }[args.story]
    from langchain.agents import create_agent

    tools = [ask_approval] if args.story in ("approval-agent", "count") else []
    return create_agent(
        ScriptedToolModel(script=script), tools=tools, middleware=middleware, checkpointer=saver
    )


def _approval_graph(runtime: SandboxRuntime, saver: Any) -> Any:
    from agent_loop import agent_loop

    from langchain_sandbox.tools import SandboxExecTool

    model = ScriptedToolModel(script=APPROVAL_STEPS)
    graph = agent_loop(model, [SandboxExecTool(), ask_approval], runtime=runtime)
    return graph.compile(checkpointer=saver)


def payload(args: argparse.Namespace) -> Any:
    if args.resume is not None:
        return Command(resume=json.loads(args.resume))
    if args.message is not None:
        return {"messages": [HumanMessage(args.message)]}
    return None


def run_config(args: argparse.Namespace) -> Any:
    configurable = {"thread_id": args.thread}
    if args.checkpoint_id:
        configurable["checkpoint_id"] = args.checkpoint_id
        configurable["checkpoint_ns"] = ""
    return {"configurable": configurable}


def history_row(snapshot: Any) -> dict[str, Any]:
    """What the tests need to know about one checkpoint of the thread."""
    return {
        "id": snapshot.config["configurable"]["checkpoint_id"],
        "next": list(snapshot.next),
        "tools": sum(isinstance(m, ToolMessage) for m in snapshot.values.get("messages", [])),
        "revision": (snapshot.values.get("sandbox") or {}).get("revision"),
    }


def emit_done(
    result: Any, values: dict[str, Any], history: list[dict[str, Any]], runtime: SandboxRuntime
) -> None:
    values = result or values
    emit(
        "done",
        tools=[m.text for m in values.get("messages", []) if isinstance(m, ToolMessage)],
        last=values["messages"][-1].text,
        sandbox=values.get("sandbox"),
        interrupted=bool((result or {}).get("__interrupt__")),
        history=history,
        live=runtime.live_sessions(),
    )


def serve(graph: Any, args: argparse.Namespace, runtime: SandboxRuntime) -> None:
    """Answer one command per stdin line: a turn (``{"message": ...}``, with ``"checkpoint_id"``
    to continue from that checkpoint and ``"thread"`` for another thread than ``--thread``;
    ``{"resume": value}`` answers the thread's interrupt),
    ``{"live": true}`` or ``{"flush": true}`` (wait until the snapshots written behind are
    complete, or failed)."""
    emit("ready")
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("live"):
            emit("live", live=runtime.live_sessions())
            continue
        if command.get("flush"):
            runtime.flush()
            emit("flushed")
            continue
        thread_id = command.get("thread", args.thread)
        thread = {"configurable": {"thread_id": thread_id}}
        configurable = {"thread_id": thread_id}
        if command.get("checkpoint_id"):  # a fork from that checkpoint, in this live process
            configurable.update(checkpoint_id=command["checkpoint_id"], checkpoint_ns="")
        result = graph.invoke(
            Command(resume=command["resume"])
            if "resume" in command
            else {"messages": [HumanMessage(command["message"])]},
            {"configurable": configurable},
            durability="sync",
        )
        tools = [m.text for m in result["messages"] if isinstance(m, ToolMessage)]
        emit(
            "turn",
            tools=tools,
            interrupted=bool(result.get("__interrupt__")),
            sandbox=result.get("sandbox"),
            live=runtime.live_sessions(),
            history=[history_row(s) for s in graph.get_state_history(thread)],
        )


async def run_async(args: argparse.Namespace) -> None:
    with sandbox_runtime(args) as runtime:
        async with async_saver(args.saver, args.target) as saver:
            graph = build(args, runtime, saver)
            result = await graph.ainvoke(payload(args), run_config(args), durability="sync")
            thread = {"configurable": {"thread_id": args.thread}}
            state = await graph.aget_state(thread)
            history = [history_row(s) async for s in graph.aget_state_history(thread)]
            emit_done(result, state.values, history, runtime)


def fork_in_flight(graph: Any, args: argparse.Namespace, runtime: SandboxRuntime) -> None:
    """See the module docstring: a fork while the latest snapshot is still being written."""
    thread = {"configurable": {"thread_id": args.thread}}
    graph.invoke({"messages": [HumanMessage("go")]}, thread, durability="sync")
    pending = runtime.pending_snapshots()
    history = [history_row(s) for s in graph.get_state_history(thread)]
    original = _checkpoint_id(history, tools=2, next_node=[])
    forked = graph.update_state(
        {
            "configurable": {
                **thread["configurable"],
                "checkpoint_id": _checkpoint_id(history, tools=1, next_node=["model"]),
                "checkpoint_ns": "",
            }
        },
        {"messages": [HumanMessage("fork")]},
        as_node="tools",
    )
    fork = graph.invoke(None, forked, durability="sync")
    main_config = {"configurable": {**thread["configurable"], "checkpoint_id": original}}
    main = graph.invoke({"messages": [HumanMessage("main")]}, main_config, durability="sync")
    emit(
        "done",
        pending=pending,
        fork=[m.text for m in fork["messages"] if isinstance(m, ToolMessage)][-1],
        main=[m.text for m in main["messages"] if isinstance(m, ToolMessage)][-1],
    )


def _checkpoint_id(history: list[dict[str, Any]], *, tools: int, next_node: list[str]) -> str:
    return next(h["id"] for h in history if h["tools"] == tools and h["next"] == next_node)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--story", required=True)
    parser.add_argument("--saver", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--target", required=True, help="SQLite file or Postgres DSN")
    parser.add_argument("--blobs", required=True, help="blob directory, or a Postgres DSN")
    parser.add_argument("--thread", required=True)
    parser.add_argument(
        "--provider",
        default="local",
        help="local, e2b, runloop or kubernetes (a remote one from its SDK's env settings)",
    )
    parser.add_argument("--message")
    parser.add_argument("--resume", help="JSON value for Command(resume=...)")
    parser.add_argument("--checkpoint-id")
    parser.add_argument("--update-message", help="update_state with this message, then continue")
    parser.add_argument("--block-at-turn", type=int)
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--release-between-turns", action="store_true")
    parser.add_argument("--fork-in-flight", action="store_true")
    parser.add_argument(
        "--store-recheck-seconds",
        type=float,
        help="how long the snapshotter trusts the store without checking (0: every capture)",
    )
    args = parser.parse_args()
    if args.store_recheck_seconds is not None:
        snapshotter.STORE_RECHECK_SECONDS = args.store_recheck_seconds
    if args.use_async:
        asyncio.run(run_async(args))
        return
    with sandbox_runtime(args) as runtime, sync_saver(args.saver, args.target) as saver:
        graph = build(args, runtime, saver)
        if args.serve:
            serve(graph, args, runtime)
            return
        if args.fork_in_flight:
            fork_in_flight(graph, args, runtime)
            return
        config = run_config(args)
        if args.update_message is not None:
            update = {"messages": [HumanMessage(args.update_message)]}
            config = graph.update_state(config, update, as_node="tools")
        result = graph.invoke(payload(args), config, durability="sync")
        thread = {"configurable": {"thread_id": args.thread}}
        history = [history_row(s) for s in graph.get_state_history(thread)]
        emit_done(result, graph.get_state(thread).values, history, runtime)


if __name__ == "__main__":
    main()
