"""One worker process of the graph-shape durability tests: parallel calls, ``Send``, subgraphs.

Like ``agent_worker.py`` (whose savers, runtime and ``emit`` it shares), every run is a fresh
process, so what it finds came through the checkpointer and the snapshot store. Shapes
(``--shape``):

* ``parallel``: create_agent + SandboxMiddleware; one AI message with two sandbox calls (``A``
  sets ``x`` and writes ``a.txt``, ``B`` writes ``b.txt`` and reports what it found), then a call
  that prints everything. With ``--block-call B`` the process blocks call B, once call A's
  record is saved among the step's pending writes, and prints ``blocked``: the test SIGKILLs it;
* ``parallel3``: the same with three calls (``--block-call C`` once A and B are saved);
* ``sub-parallel``: ``parallel``'s agent as a subgraph of a parent that declares ``sandbox``;
* ``tasks``: the same two calls plus a human approval (``interrupt()``) in one message, in a
  plain ``ToolNode`` with the public ``SandboxToolCallWrapper``, so each sandbox call runs as a
  task whose result LangGraph saves; ``--block-call B`` blocks B once A's task result is saved;
* ``send-with`` / ``send-messages``: a hand-built graph whose planner fans each call of its AI
  message out to ``SandboxToolNode`` with its own ``Send``, the payload carrying the ``sandbox``
  record or messages only;
* ``sub-undeclared`` / ``sub-declared`` / ``sub-stateful``: the agent loop (model + SandboxToolNode)
  is a subgraph of a parent graph whose state lacks ``sandbox``, declares it, or lacks it while
  the subgraph is compiled with ``checkpointer=True``;
* ``sub2-*``: the agent loop two subgraphs deep (see ``SUBGRAPHS``).

Each human message (``--message``) is one turn; the model's calls name the turn, so every turn
writes files of its own and lists what it sees.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

# The tests directory, for the agent loop the graph tests share (this file runs as a script).
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from agent_loop import agent_loop
from agent_worker import async_saver, emit, sandbox_runtime, sync_saver
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, Send

from langchain_sandbox.graph import SandboxChannel, SandboxGraphState, SandboxToolNode
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, ToolCallSpec, call
from langchain_sandbox.tools import SandboxExecTool

LIST = "import os\nprint(sorted(f for f in os.listdir('.') if f.endswith('.txt') and f != 'shared.txt'))"


def _human_turn(messages: list[BaseMessage]) -> int:
    return sum(isinstance(m, HumanMessage) for m in messages)


STEP_CALLS = {
    # A sets x and writes a.txt; B writes b.txt and reports what it found.
    "parallel": {
        "A": "x = 1\nopen('a.txt', 'w').write('a')",
        "B": f"open('b.txt', 'w').write('b')\nprint('x' in globals())\n{LIST}",
    },
    # Three calls; C is the one re-run after A and B finished.
    "parallel3": {
        "A": "x = 1\nopen('a.txt', 'w').write('a')",
        "B": "y = 2\nopen('b.txt', 'w').write('b')",
        "C": f"open('c.txt', 'w').write('c')\nprint('x' in globals(), 'y' in globals())\n{LIST}",
    },
}
"""Per shape, the calls of the one AI message of turn 1, by call id."""

SHOW = "print('x =', globals().get('x'), 'y =', globals().get('y'))"


def parallel_script(shape: str) -> Any:
    """Turn 1: the step's calls in one message; then a call that shows the whole state."""

    def script(messages: list[BaseMessage]) -> Any:
        ai = sum(isinstance(m, AIMessage) for m in messages)
        if ai == 0:
            return [
                ToolCallSpec(name="sandbox_exec", args={"code": code}, id=call_id)
                for call_id, code in STEP_CALLS[shape].items()
            ]
        if ai == 1:
            return call("sandbox_exec", code=f"{SHOW}\n{LIST}")
        return "done"

    return script


SHARED = "print(open('shared.txt').read() if os.path.exists('shared.txt') else None)"


def fan_out_script(messages: list[BaseMessage]) -> Any:
    """Per human turn: two calls (``t<turn>_1``, ``t<turn>_2``) that each show what they find,
    write a file of their own and the same ``shared.txt`` (their id in it); then a listing."""
    turn = _human_turn(messages)
    if isinstance(messages[-1], HumanMessage):
        writes = "open('{0}.txt', 'w').write('x')\nopen('shared.txt', 'w').write('{0}')"
        return [
            ToolCallSpec(
                name="sandbox_exec",
                args={"code": f"{LIST}\n{SHARED}\n{writes.format(f't{turn}_{i}')}\n{LIST}"},
                id=f"t{turn}_{i}",
            )
            for i in (1, 2)
        ]
    if sum(isinstance(m, ToolMessage) for m in messages) % 3 == 2:
        return call("sandbox_exec", code=f"{LIST}\n{SHARED}")
    return f"turn {turn} done"


def _wait_for_saved_writes(
    saver: Any, request: ToolCallRequest, channel: str, count: int = 1
) -> None:
    """Wait until the step's checkpoint holds ``count`` pending writes to ``channel`` (other
    calls' records, or tasks' results): they finished and LangGraph saved what they did."""
    configurable = request.runtime.config["configurable"]
    graph_ns = configurable["checkpoint_ns"].rpartition("|")[0]  # a subgraph's, or ""
    config = {
        "configurable": {
            "thread_id": configurable["thread_id"],
            "checkpoint_ns": graph_ns,
            "checkpoint_id": configurable["checkpoint_map"][graph_ns],
        }
    }
    while True:
        # From a worker thread, the async savers' get_tuple runs on their own loop.
        checkpoint = saver.get_tuple(config)
        writes = checkpoint.pending_writes or [] if checkpoint is not None else []
        if sum(written == channel for _, written, _ in writes) >= count:
            return
        time.sleep(0.05)


class _BlockCall:
    """Stops call ``call_id`` once ``count`` other calls of its step have saved a write to
    ``channel`` (their record, or their task's result), and hangs there so the test can SIGKILL
    the process mid-step. ``wrap`` / ``awrap`` go outside the sandbox wrapper; ``middleware`` is
    the same for create_agent (outside SandboxMiddleware)."""

    def __init__(
        self,
        call_id: str,
        saver: Any,
        channel: str = "sandbox",
        count: int = 1,
        runtime: SandboxRuntime | None = None,
    ) -> None:
        self.call_id, self.saver, self.channel, self.count = call_id, saver, channel, count
        self.runtime = runtime

    def _saved(self, request: ToolCallRequest) -> None:
        """Wait for the other calls' saved writes, and for their snapshots written behind."""
        _wait_for_saved_writes(self.saver, request, self.channel, self.count)
        if self.runtime is not None:
            self.runtime.flush()

    def wrap(self, request: ToolCallRequest, handler: Any) -> Any:
        if request.tool_call["id"] == self.call_id:
            self._saved(request)
            emit("blocked", call=self.call_id)
            time.sleep(3600)
        return handler(request)

    async def awrap(self, request: ToolCallRequest, handler: Any) -> Any:
        if request.tool_call["id"] == self.call_id:
            await asyncio.to_thread(self._saved, request)
            emit("blocked", call=self.call_id)
            await asyncio.sleep(3600)
        return await handler(request)

    def around(self, inner: Any) -> tuple[Any, Any]:
        """``wrap_tool_call`` and ``awrap_tool_call`` of a ToolNode: this, then ``inner``."""

        def wrap(request: ToolCallRequest, handler: Any) -> Any:
            return self.wrap(request, lambda r: inner.wrap(r, handler))

        async def awrap(request: ToolCallRequest, handler: Any) -> Any:
            return await self.awrap(request, lambda r: inner.awrap(r, handler))

        return wrap, awrap

    def middleware(self) -> Any:
        from langchain.agents.middleware import AgentMiddleware

        hooks = {"wrap_tool_call": self.wrap, "awrap_tool_call": self.awrap}
        return type("BlockCall", (AgentMiddleware,), hooks)()


def _blocker(
    args: argparse.Namespace,
    saver: Any,
    channel: str = "sandbox",
    runtime: SandboxRuntime | None = None,
) -> _BlockCall:
    """``--block-call``'s call, blocked once the calls before it in its message have saved
    (and, given ``runtime``, their snapshots are complete)."""
    calls = list(STEP_CALLS.get(args.shape, STEP_CALLS["parallel"]))
    # A fan-out's second call (``t<turn>_2``) waits for its first.
    count = calls.index(args.block_call) if args.block_call in calls else 1
    return _BlockCall(args.block_call, saver, channel, count, runtime)


def tasks_script(messages: list[BaseMessage]) -> Any:
    """Calls A and B with a human approval in one message (so each sandbox call runs as a
    task), then a call that shows the whole state."""
    script = parallel_script("parallel")
    if not any(isinstance(m, AIMessage) for m in messages):
        return [*script(messages), call("ask_approval", question="Go on?")]
    return script(messages)


def tasks_graph(args: argparse.Namespace, runtime: SandboxRuntime, saver: Any) -> Any:
    """A plain ToolNode with the public SandboxToolCallWrapper, and a wrapper outside it that
    can block call B once call A's task result is saved (``--block-call B``)."""
    from agent_worker import ask_approval

    from langchain_sandbox.graph import SandboxToolCallWrapper

    tools = [SandboxExecTool(), ask_approval]
    inner = SandboxToolCallWrapper(runtime=runtime, ordered_tools=["sandbox_exec"])
    wrap, _ = _blocker(args, saver, "__return__").around(inner)
    node = ToolNode(tools, wrap_tool_call=wrap, handle_tool_errors=True)
    graph = agent_loop(ScriptedToolModel(script=tasks_script), tools, tool_node=node)
    return graph.compile(checkpointer=saver)


def parallel_agent(args: argparse.Namespace, runtime: SandboxRuntime, saver: Any) -> Any:
    from langchain.agents import create_agent

    from langchain_sandbox.graph import SandboxMiddleware

    middleware: list[Any] = []
    if args.block_call:
        middleware.append(_blocker(args, saver, runtime=runtime).middleware())
    middleware.append(SandboxMiddleware(runtime=runtime, tools=[SandboxExecTool()]))
    model = ScriptedToolModel(script=parallel_script(args.shape.removeprefix("sub-")))
    if args.shape != "sub-parallel":
        return create_agent(model, middleware=middleware, checkpointer=saver)
    agent = create_agent(model, middleware=middleware)
    return _one_node(agent, declares=True).compile(checkpointer=saver)


def _tool_node(
    args: argparse.Namespace, runtime: SandboxRuntime, saver: Any, tools: list[Any]
) -> ToolNode:
    """SandboxToolNode; with ``--block-call``, the same wrapper in a ToolNode behind a
    ``_BlockCall`` (SandboxToolNode takes no wrapper of its own)."""
    if not args.block_call:
        return SandboxToolNode(tools, runtime=runtime)
    from langchain_sandbox.graph import SandboxToolCallWrapper

    inner = SandboxToolCallWrapper(runtime=runtime, ordered_tools=[t.name for t in tools])
    wrap, awrap = _blocker(args, saver).around(inner)
    return ToolNode(tools, wrap_tool_call=wrap, awrap_tool_call=awrap, handle_tool_errors=True)


def send_graph(args: argparse.Namespace, runtime: SandboxRuntime, saver: Any) -> Any:
    tools = [SandboxExecTool()]
    model = ScriptedToolModel(script=fan_out_script).bind_tools(tools)
    with_record = args.shape == "send-with"

    def fan_out(state: dict[str, Any]) -> Any:
        last = state["messages"][-1]
        if not getattr(last, "tool_calls", None):
            return END
        sends = []
        for tool_call in last.tool_calls:
            payload: dict[str, Any] = {
                "messages": [AIMessage("", tool_calls=[tool_call], id=last.id)]
            }
            if with_record:
                payload["sandbox"] = state.get("sandbox")
            sends.append(Send("tools", payload))
        return sends

    graph = StateGraph(SandboxGraphState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", _tool_node(args, runtime, saver, tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", fan_out, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


class ParentWithout(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class ParentWith(ParentWithout):
    sandbox: NotRequired[SandboxChannel]


SUBGRAPHS: dict[str, list[tuple[bool, bool]]] = {
    "sub-undeclared": [(False, False), (True, False)],
    "sub-declared": [(True, False), (True, False)],
    "sub-stateful": [(False, False), (True, True)],
    "sub2-mid-only": [(False, False), (True, False), (True, False)],
    "sub2-declared": [(True, False), (True, False), (True, False)],
    "sub2-mid-stateful": [(False, False), (True, True), (True, False)],
}
"""Per subgraph shape, from the root graph down to the agent loop: whether each graph's state
declares ``sandbox``, and whether it is compiled with ``checkpointer=True`` (a subgraph)."""


def subgraph_parent(args: argparse.Namespace, runtime: SandboxRuntime, saver: Any) -> Any:
    """The agent loop, nested in graphs of one node each as ``SUBGRAPHS`` says."""
    (root_declares, _), *levels = SUBGRAPHS[args.shape]
    declares, stateful = levels.pop()
    model = ScriptedToolModel(script=fan_out_script)
    schema = SandboxGraphState if declares else ParentWithout
    graph = agent_loop(model, [SandboxExecTool()], runtime=runtime, schema=schema)
    nested = graph.compile(checkpointer=True if stateful else None)
    for declares, stateful in reversed(levels):
        nested = _one_node(nested, declares).compile(checkpointer=True if stateful else None)
    return _one_node(nested, root_declares).compile(checkpointer=saver)


def _one_node(node: Any, declares: bool) -> StateGraph[Any]:
    graph = StateGraph(ParentWith if declares else ParentWithout)
    graph.add_node("assistant", node)
    graph.add_edge(START, "assistant")
    graph.add_edge("assistant", END)
    return graph


BUILDERS = {
    "parallel": parallel_agent,
    "parallel3": parallel_agent,
    "sub-parallel": parallel_agent,
    "tasks": tasks_graph,
    "send-with": send_graph,
    "send-messages": send_graph,
    **dict.fromkeys(SUBGRAPHS, subgraph_parent),
}


def emit_done(result: dict[str, Any]) -> None:
    emit(
        "done",
        tools=[m.text for m in result.get("messages", []) if isinstance(m, ToolMessage)],
        last=result["messages"][-1].text,
        interrupted=bool(result.get("__interrupt__")),
        sandbox=result.get("sandbox"),
    )


def payload(args: argparse.Namespace) -> Any:
    if args.resume is not None:
        return Command(resume=args.resume)
    return {"messages": [HumanMessage(args.message)]} if args.message is not None else None


async def run_async(args: argparse.Namespace) -> None:
    with sandbox_runtime(args) as runtime:
        async with async_saver(args.saver, args.target) as saver:
            graph = BUILDERS[args.shape](args, runtime, saver)
            config = {"configurable": {"thread_id": args.thread}}
            run = graph.ainvoke(payload(args), config, durability=args.durability)
            emit_done(await run)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(BUILDERS), required=True)
    parser.add_argument("--saver", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--target", required=True, help="SQLite file or Postgres DSN")
    parser.add_argument("--blobs", required=True, help="blob directory, or a Postgres DSN")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--provider", default="local")
    parser.add_argument("--message")
    parser.add_argument("--block-call")
    parser.add_argument("--resume", help="Command(resume=...) with this answer")
    parser.add_argument("--async", dest="use_async", action="store_true")
    parser.add_argument("--durability", choices=["sync", "async", "exit"], default="sync")
    parser.add_argument("--update-message", help="update_state with this message, then continue")
    args = parser.parse_args()
    if args.use_async:
        asyncio.run(run_async(args))
        return
    with sandbox_runtime(args) as runtime, sync_saver(args.saver, args.target) as saver:
        graph = BUILDERS[args.shape](args, runtime, saver)
        config: Any = {"configurable": {"thread_id": args.thread}}
        if args.update_message is not None:
            config = graph.update_state(config, {"messages": [HumanMessage(args.update_message)]})
        emit_done(graph.invoke(payload(args), config, durability=args.durability))


if __name__ == "__main__":
    main()
