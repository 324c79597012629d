"""Tools called from code vs classic tool calls, on one scripted task (issue 25). Prints a table;
asserts nothing.

    .venv/bin/python benchmarks/bench_tools_from_code.py [--rounds 10] [--records 20]

The task: fetch N records (a ``@tool`` returning a ~400-character record) and keep the ids of
those whose country is ``FR``. Three agents (``create_agent``, a scripted model, the real local
provider), interleaved in one run:

* **classic, sequential**: one ``fetch`` call per model turn, as a model does when it reads each
  result before the next call (N + 1 turns);
* **classic, parallel**: the N ``fetch`` calls in one model message (2 turns);
* **from code**: one ``sandbox_exec`` call whose code loops over ``tools.fetch(...)`` and returns
  the ids (2 turns).

Per agent: model turns, the tokens sent to the model over the whole task (every turn sends the
conversation so far and the tool schemas; counted as characters / 4, the usual rough rate) and
the wall time of the task with the model's own latency at zero (a real model adds its latency per
turn). Everything runs under a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _timing import header, interleaved_ms, row
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, ToolCallSpec, call
from langchain_sandbox.tools import SandboxExecTool

_WIDTH = 28
_PADDING = "lorem ipsum dolor sit amet " * 12


@tool
def fetch(record_id: int) -> dict[str, Any]:
    """Fetch one customer record by its id."""
    country = "FR" if record_id % 4 == 0 else "DE"
    return {"id": record_id, "country": country, "notes": _PADDING}


class _SentToModel(BaseCallbackHandler):
    """Counts the turns and the characters each model call is sent (messages and tool schemas)."""

    def __init__(self) -> None:
        self.turns = 0
        self.chars = 0

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.turns += 1
        tools = (kwargs.get("invocation_params") or {}).get("tools") or []
        self.chars += len(json.dumps(tools))
        for message in messages[0]:
            self.chars += len(str(message.content))
            self.chars += len(json.dumps(getattr(message, "tool_calls", None) or []))


def _answer(messages: list[BaseMessage]) -> str:
    return f"The FR records are listed above ({len(messages)} messages)."


def _agents(runtime: SandboxRuntime, records: int) -> dict[str, Any]:
    ids = list(range(records))
    sequential: list[Any] = [call("fetch", record_id=i) for i in ids]
    parallel: list[Any] = [[ToolCallSpec(name="fetch", args={"record_id": i}) for i in ids]]
    code = (
        f"records = [tools.fetch(record_id=i) for i in range({records})]\n"
        "[r['id'] for r in records if r['country'] == 'FR']"
    )
    from_code: list[Any] = [call("sandbox_exec", code=code)]
    exec_tool = SandboxExecTool(runtime=runtime, tools=[fetch])
    return {
        "classic, sequential": create_agent(
            ScriptedToolModel(script=[*sequential, _answer]), tools=[fetch]
        ),
        "classic, parallel": create_agent(
            ScriptedToolModel(script=[*parallel, _answer]), tools=[fetch]
        ),
        "from code": create_agent(
            ScriptedToolModel(script=[*from_code, _answer]), tools=[exec_tool]
        ),
    }


def _task(agent: Any, callbacks: list[Any] | None = None) -> Callable[[], object]:
    def run() -> object:
        config: dict[str, Any] = {"configurable": {"thread_id": "bench"}}
        if callbacks:
            config["callbacks"] = callbacks
        return agent.invoke({"messages": [("user", "Which records are FR?")]}, config)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--records", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["LANGCHAIN_SANDBOX_HOME"] = str(Path(scratch) / "home")
        runtime = SandboxRuntime(
            "local",
            provider_options={"base_dir": Path(scratch) / "sessions"},
            snapshotter=Snapshotter(LocalDirectoryBlobStore(Path(scratch) / "blobs")),
        )
        try:
            agents = _agents(runtime, args.records)
            counts = {}
            for name, agent in agents.items():
                counter = _SentToModel()
                _task(agent, [counter])()
                counts[name] = counter
            times = interleaved_ms(
                {name: _task(agent) for name, agent in agents.items()}, args.rounds, warmup=2
            )
        finally:
            runtime.close()
    print(f"\nThe task: {args.records} records fetched, the FR ones kept ({sys.platform}).")
    print(f"{'':<{_WIDTH}} {'turns':>7} {'tokens sent':>12}")
    for name, counter in counts.items():
        print(f"{name:<{_WIDTH}} {counter.turns:>7} {counter.chars // 4:>12,}")
    header("Wall time of the task, model latency zero", _WIDTH)
    for name, samples in times.items():
        print(row(name, samples, _WIDTH))
    base = statistics.median(times["from code"])
    for name in ("classic, sequential", "classic, parallel"):
        ratio = statistics.median(times[name]) / base
        tokens = counts[name].chars / max(counts["from code"].chars, 1)
        print(f"{name} / from code: {ratio:.2f}x the time, {tokens:.1f}x the tokens")


if __name__ == "__main__":
    main()
