"""What the per-thread turn lease adds to an agent's turn. Prints a table; asserts nothing.

    .venv/bin/python benchmarks/bench_thread_lease.py [--rounds 40]

One turn of ``create_agent`` (a scripted model: one ``sandbox_exec`` call, then an answer) under
``SandboxMiddleware`` on the real local provider, with the lease (``busy="fail"``, the default)
and without it (``busy="off"``), rows interleaved:

* a SQLite checkpointer with a local blob store: the lease is an ``flock`` beside the blobs;
* a Postgres checkpointer (a server the script starts with the test suite's helper, when
  PostgreSQL is installed): the lease is an advisory lock on a connection of its own.

A turn with one tool call takes the lease twice (``before_agent``, then the tool call after the
model gave it back, see ``langchain_sandbox.graph.turn_lease``). Everything runs under a
temporary directory. A second table times one take and give-back of a lease on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _timing import header, interleaved_ms, row, timings_ms
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from langchain_sandbox.checkpointing.thread_lease import acquire, lease_backend, release
from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call

_WIDTH = 34


def _script(messages: list[BaseMessage]) -> Any:
    if isinstance(messages[-1], ToolMessage):
        return "done"
    return call("sandbox_exec", code="x = 1")


class _Owner:
    """A lease owner for the take-and-give-back rows."""


def _take_and_give_back(saver: Any, store: Any) -> Callable[[], object]:
    backend = lease_backend(saver, store)
    assert backend is not None
    owner = _Owner()

    def once() -> None:
        acquire(backend, "bench-lease", owner)
        release(backend, "bench-lease", owner)

    return once


def _turns(runtime: SandboxRuntime, saver: Any, busy: str, name: str) -> Callable[[], object]:
    agent = create_agent(
        ScriptedToolModel(script=_script),
        middleware=[SandboxMiddleware(runtime=runtime, busy=busy)],  # type: ignore[arg-type]
        checkpointer=saver,
    )
    config: Any = {"configurable": {"thread_id": f"{name}-{busy}"}}
    return lambda: agent.invoke({"messages": [HumanMessage("go")]}, config)


@contextlib.contextmanager
def _postgres() -> Iterator[Any]:
    """A Postgres saver on a server started for the run, or ``None`` without PostgreSQL."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "durable"))
    from postgres_server import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        yield None
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    server = PostgresServer.start(bindir)
    try:
        with PostgresSaver.from_conn_string(server.dsn) as saver:
            saver.setup()
            yield saver
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        SandboxRuntime(
            "local", snapshotter=Snapshotter(LocalDirectoryBlobStore(Path(tmp) / "blobs"))
        ) as runtime,
        SqliteSaver.from_conn_string(str(Path(tmp) / "checkpoints.sqlite")) as sqlite,
        _postgres() as postgres,
    ):
        savers = {"sqlite": sqlite, **({"postgres": postgres} if postgres else {})}
        calls = {
            f"{name}, {busy}": _turns(runtime, saver, busy, name)
            for name, saver in savers.items()
            for busy in ("off", "fail")
        }
        samples = interleaved_ms(calls, args.rounds)
        store = runtime.snapshotter.store  # type: ignore[attr-defined]
        takes = {
            name: timings_ms(_take_and_give_back(saver, store), 200)
            for name, saver in savers.items()
        }
    header(f"one agent turn, {args.rounds} rounds", _WIDTH)
    for name, values in samples.items():
        print(row(name, values, _WIDTH))
    print()
    for name in savers:
        off = statistics.median(samples[f"{name}, off"])
        leased = statistics.median(samples[f"{name}, fail"])
        print(f"{name}: lease adds {leased - off:+.2f} ms per turn, ratio {leased / off:.3f}")
    header("one take and give-back of a lease, 200 times", _WIDTH)
    for name, values in takes.items():
        print(row(name, values, _WIDTH, digits=3))
    if postgres is None:
        print("(no PostgreSQL installed: the Postgres rows are left out)")


if __name__ == "__main__":
    main()
