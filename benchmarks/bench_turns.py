"""What a sandbox tool adds to an agent's turn as the conversation grows. Prints a table; asserts
nothing.

    .venv/bin/python benchmarks/bench_turns.py [--rounds 40]

One turn of ``create_agent`` (a scripted model: one tool call, then an answer) on a conversation
of 30 and of 300 messages, interleaved in one run:

* a trivial ``@tool``;
* ``SandboxExecTool`` under ``SandboxMiddleware`` on the real local provider;
* the same tool with its ``runtime`` argument typed as before issue 26 (``Annotated[Any,
  SkipJsonSchema()]``, which LangChain does not take for injected): ``on_tool_start`` then
  renders the whole ``ToolRuntime``, state and every message, into the tool-input string.

Goal: the sandbox's extra cost over the trivial tool does not grow with the conversation, and its
turn is at most 3x the trivial tool's. Everything runs under a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from _timing import header, interleaved_ms, row
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from pydantic.json_schema import SkipJsonSchema

from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call
from langchain_sandbox.tools import SandboxExecTool
from langchain_sandbox.tools.exec import SandboxExecArgs

_WIDTH = 50


@tool
def trivial(code: str) -> str:
    """Echo the code."""
    return code


class _OldArgs(SandboxExecArgs):
    runtime: Annotated[Any, SkipJsonSchema()] = None


class _OldTypedExecTool(SandboxExecTool):
    """``sandbox_exec`` with ``runtime`` typed as on main before issue 26."""

    args_schema: type[_OldArgs] = _OldArgs


class _ToolStarts(BaseCallbackHandler):
    """A callback handler that reads what ``on_tool_start`` is given, as a tracer would."""

    def __init__(self) -> None:
        self.chars = 0

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        self.chars = len(input_str)


def _conversation(messages: int) -> list[BaseMessage]:
    """``messages`` earlier messages: questions, answers, tool calls and their results."""
    out: list[BaseMessage] = []
    for i in range(messages // 4):
        tool_call = {"name": "trivial", "args": {"code": f"x{i} = {i}"}, "id": f"old-{i}"}
        out += [
            HumanMessage(f"Question {i}: what does the data say about item {i}? " * 3),
            AIMessage("", tool_calls=[{**tool_call, "type": "tool_call"}]),
            ToolMessage(f"result {i}: " + "0123456789" * 20, tool_call_id=f"old-{i}"),
            AIMessage(f"Item {i} looks fine; the numbers add up. " * 3),
        ]
    return out


def _agent(name: str, tools: list[BaseTool], runtime: SandboxRuntime | None) -> Any:
    def _step(messages: list[BaseMessage]) -> Any:
        return "done" if isinstance(messages[-1], ToolMessage) else call(name, code="n = 1")

    model = ScriptedToolModel(script=_step)
    if runtime is None:
        return create_agent(model, tools=tools)
    return create_agent(model, middleware=[SandboxMiddleware(runtime=runtime, tools=tools)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, local provider (bubblewrap)")
    with tempfile.TemporaryDirectory(prefix="bench-turns-") as tmp:
        root = Path(tmp)
        os.environ["LANGCHAIN_SANDBOX_HOME"] = str(root / "home")
        runtime = SandboxRuntime(
            "local",
            provider_options={"base_dir": root / "sessions"},
            snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        )
        agents = {
            "trivial @tool": _agent("trivial", [trivial], None),
            "sandbox_exec + SandboxMiddleware": _agent(
                "sandbox_exec", [SandboxExecTool()], runtime
            ),
            "  same, runtime typed as before": _agent(
                "sandbox_exec", [_OldTypedExecTool()], runtime
            ),
        }
        handler = _ToolStarts()
        calls: dict[str, Callable[[], object]] = {}
        chars: dict[str, int] = {}
        for size in (30, 300):
            history = _conversation(size)
            for kind, agent in agents.items():
                name = f"{kind}, {size} messages"
                config = {"configurable": {"thread_id": f"{kind}-{size}"}, "callbacks": [handler]}

                record: dict[str, Any] = {}

                def _turn(
                    agent: Any = agent,
                    config: Any = config,
                    history: Any = history,
                    last: Any = record,
                ) -> None:
                    # The conversation goes on in the same sandbox: the input carries the record
                    # the previous turn returned (without it, a run starts a new sandbox).
                    inputs = {"messages": [*history, HumanMessage("go")], **last}
                    state = agent.invoke(inputs, config)
                    assert state["messages"][-1].text == "done"
                    last.update({"sandbox": state["sandbox"]} if "sandbox" in state else {})

                _turn()
                chars[name] = handler.chars
                calls[name] = _turn
        times = interleaved_ms(calls, args.rounds, warmup=3)
        runtime.close()
    header(f"Agent turn, one tool call ({args.rounds} rounds, interleaved)", _WIDTH)
    for name, samples in times.items():
        print(f"{row(name, samples, _WIDTH)}   on_tool_start input: {chars[name]:,} chars")
    med = {name: statistics.median(samples) for name, samples in times.items()}
    print()
    for size in (30, 300):
        base = med[f"trivial @tool, {size} messages"]
        for kind in list(agents)[1:]:
            turn = med[f"{kind}, {size} messages"]
            print(
                f"  {size:>3} messages, {kind.strip():<34} extra {turn - base:6.2f} ms, "
                f"{turn / base:4.2f}x the trivial tool's turn"
            )


if __name__ == "__main__":
    main()
