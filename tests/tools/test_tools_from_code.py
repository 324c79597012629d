"""Host tools called from sandboxed code (``SandboxExecTool(tools=[...])``), on the real local
provider: results come back as Python values, arguments are validated by the tool's schema, errors
are exceptions the code catches, the limits stop a runaway loop, an interrupted wait leaves the
session usable, and each inner call is a child run of the sandbox call in ``astream_events``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode

from langchain_sandbox.graph.channel import SandboxGraphState
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.tools import SandboxExecTool
from tests.tools.conftest import make_local_runtime

CALLS: list[Any] = []


@tool
def fetch(record_id: int, verbose: bool = False) -> dict[str, Any]:
    """Fetch one record by its id."""
    CALLS.append(record_id)
    return {"id": record_id, "tags": ["even" if record_id % 2 == 0 else "odd"]}


@tool
def refuse(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ValueError(f"refused: {reason}")


@tool
def slow(seconds: float) -> str:
    """Sleeps."""
    time.sleep(seconds)
    return "slept"


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.clear()


def _text(output: Any) -> str:
    content = output[0] if isinstance(output, tuple) else output
    return content if isinstance(content, str) else str(content)


def test_inner_calls_return_python_values(runtime: SandboxRuntime) -> None:
    exec_tool = SandboxExecTool(runtime=runtime, tools=[fetch])
    code = (
        "records = [tools.fetch(record_id=i) for i in range(5)]\n"
        "positional = tools.fetch(7)\n"
        "[r['id'] for r in records if 'even' in r['tags']], positional['tags'], type(records[0])"
    )
    result = exec_tool.invoke({"code": code})
    assert "([0, 2, 4], ['odd'], <class 'dict'>)" in result
    assert CALLS == [0, 1, 2, 3, 4, 7]
    # The tools object is the call's, not a variable the session keeps.
    assert "False" in SandboxExecTool(runtime=runtime).invoke({"code": "'tools' in globals()"})


def test_validation_and_tool_errors_are_exceptions_the_code_catches(
    runtime: SandboxRuntime,
) -> None:
    exec_tool = SandboxExecTool(runtime=runtime, tools=[fetch, refuse])
    code = (
        "caught = []\n"
        "for call in (lambda: tools.fetch(record_id='x'), lambda: tools.fetch(),\n"
        "             lambda: tools.refuse(reason='no'), lambda: tools.missing()):\n"
        "    try:\n"
        "        call()\n"
        "    except tools.ToolError as exc:\n"
        "        caught.append((exc.tool, str(exc)))\n"
        "    except AttributeError as exc:\n"
        "        caught.append(('attr', str(exc)))\n"
        "for item in caught:\n"
        "    print(item)\n"
        "tools.fetch(record_id=3)['id']"
    )
    text = exec_tool.invoke({"code": code})
    assert (
        "('fetch', 'invalid arguments for fetch: record_id: Input should be a valid integer" in text
    )
    assert "record_id: Field required" in text
    assert "('refuse', 'refused: no')" in text
    assert "no tool named 'missing'; the tools are: fetch, refuse" in text
    assert "value:\n3" in text
    assert CALLS == [3]  # an invalid call never reaches the tool


def test_async_code_awaits_the_coroutine_twin(runtime: SandboxRuntime) -> None:
    exec_tool = SandboxExecTool(runtime=runtime, tools=[fetch])
    code = (
        "import asyncio\n"
        "async def main():\n"
        "    return [(await tools.afetch(record_id=i))['id'] for i in range(3)]\n"
        "asyncio.run(main())"
    )
    assert "[0, 1, 2]" in exec_tool.invoke({"code": code})


def test_the_call_cap_stops_a_runaway_loop(tmp_path: Path) -> None:
    runtime = make_local_runtime(tmp_path, spec=SessionSpec(limits=Limits(max_tool_calls=4)))
    try:
        exec_tool = SandboxExecTool(runtime=runtime, tools=[fetch])
        # ToolLimitError is not an Exception: a loop that swallows errors still stops.
        code = "n = 0\nwhile True:\n    try:\n        tools.fetch(record_id=n)\n    except Exception:\n        pass\n    n += 1"
        text = exec_tool.invoke({"code": code})
        assert "ToolLimitError" in text
        assert "reached the limit of 4 calls" in text
        assert CALLS == [0, 1, 2, 3]
        assert "value:\n4" in exec_tool.invoke({"code": "n"})  # the session goes on
    finally:
        runtime.close()


def test_the_time_budget_stops_inner_calls(tmp_path: Path) -> None:
    limits = Limits(tool_calls_seconds=0.5)
    runtime = make_local_runtime(tmp_path, spec=SessionSpec(limits=limits))
    try:
        exec_tool = SandboxExecTool(runtime=runtime, tools=[slow])
        text = exec_tool.invoke({"code": "for _ in range(10):\n    tools.slow(seconds=0.3)"})
        assert "ToolLimitError" in text
        assert "took more than 0.5 s in all" in text
    finally:
        runtime.close()


def test_a_timeout_while_waiting_for_a_tool_leaves_the_session_usable(
    runtime: SandboxRuntime,
) -> None:
    exec_tool = SandboxExecTool(runtime=runtime, tools=[slow, fetch])
    result = exec_tool.invoke({"code": "x = 5\ntools.slow(seconds=3)", "timeout": 1})
    assert "KeyboardInterrupt" in result or "timed out" in result.lower()
    time.sleep(2.5)  # the late result of slow() arrives and must be dropped by the worker
    after = exec_tool.invoke({"code": "x + tools.fetch(record_id=1)['id']"})
    assert "value:\n6" in after
    assert "restarted" not in after


def test_tool_names_must_be_identifiers(runtime: SandboxRuntime) -> None:
    @tool("get-weather")
    def weather(city: str) -> str:
        """Weather."""
        return city

    with pytest.raises(ValueError, match="must be a Python identifier"):
        SandboxExecTool(runtime=runtime, tools=[weather])


def test_the_description_lists_the_tools(runtime: SandboxRuntime) -> None:
    described = SandboxExecTool(runtime=runtime, tools=[fetch, refuse]).description
    assert (
        "tools.fetch(record_id: integer, verbose: boolean = false): Fetch one record" in described
    )
    assert "tools.refuse(reason: string): Always fails" in described
    assert "tools.fetch" not in SandboxExecTool(runtime=runtime).description


async def test_inner_calls_are_child_runs_in_astream_events(aruntime: SandboxRuntime) -> None:
    exec_tool = SandboxExecTool(runtime=aruntime, tools=[fetch])
    builder = StateGraph(SandboxGraphState)
    builder.add_node("tools", ToolNode([exec_tool]))
    builder.add_edge(START, "tools")
    graph = builder.compile()
    call = {
        "name": exec_tool.name,
        "args": {"code": "[tools.fetch(record_id=i)['id'] for i in range(2)]"},
        "id": "call-1",
        "type": "tool_call",
    }
    events = [
        event
        async for event in graph.astream_events(
            {"messages": [AIMessage(content="", tool_calls=[call])]},
            {"configurable": {"thread_id": "events"}},
            version="v2",
        )
    ]
    outer = next(e for e in events if e["event"] == "on_tool_start" and e["name"] == "sandbox_exec")
    inner = [e for e in events if e["event"] == "on_tool_end" and e["name"] == "fetch"]
    assert [e["data"]["output"]["id"] for e in inner] == [0, 1]
    assert all(outer["run_id"] in e["parent_ids"] for e in inner)
    # The inner runs ran on the caller's loop while the sandbox call was open.
    kinds = [(e["event"], e["name"]) for e in events]
    assert kinds.index(("on_tool_end", "sandbox_exec")) > events.index(inner[-1])
    await asyncio.sleep(0)


def test_the_middleware_gives_sandbox_exec_the_code_tools(runtime: SandboxRuntime) -> None:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox import SandboxMiddleware
    from langchain_sandbox.testing import ScriptedToolModel, call

    code = "sum(tools.fetch(record_id=i)['id'] for i in range(4))"
    model = ScriptedToolModel(script=[call("sandbox_exec", code=code), "Done."])
    middleware = SandboxMiddleware(runtime=runtime, code_tools=[fetch])
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    out = agent.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "mw"}})
    assert "value:\n6" in out["messages"][-2].content
    assert CALLS == [0, 1, 2, 3]
    exec_tool = next(t for t in middleware.tools if t.name == "sandbox_exec")
    assert "tools.fetch(record_id: integer" in exec_tool.description


@tool
def ask_human(question: str) -> str:
    """Asks a human (pauses the graph)."""
    from langgraph.types import interrupt

    return str(interrupt(question))


def test_an_inner_tool_that_interrupts_is_refused_and_the_graph_goes_on(
    runtime: SandboxRuntime,
) -> None:
    """The graph cannot pause inside sandboxed code: the inner ``interrupt()`` becomes a
    ``ToolError`` the code catches, the run does not stop at an interrupt, the session goes on."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox import SandboxMiddleware
    from langchain_sandbox.testing import ScriptedToolModel, call

    code = (
        "kept = 7\n"
        "try:\n    tools.ask_human(question='ok?')\n"
        "except tools.ToolError as exc:\n    print('refused:', exc)"
    )
    model = ScriptedToolModel(
        script=[call("sandbox_exec", code=code), call("sandbox_exec", code="kept * 6"), "Done."]
    )
    middleware = SandboxMiddleware(runtime=runtime, code_tools=[ask_human])
    agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "asks"}}
    out = agent.invoke({"messages": [("user", "go")]}, config)
    assert "__interrupt__" not in out
    assert not agent.get_state(config).interrupts
    first, second = (m.content for m in out["messages"] if m.type == "tool")
    assert "refused:" in first
    assert "interrupt()" in first
    assert "value:\n42" in second


def test_malformed_calls_from_the_sandbox_are_refused_not_run(runtime: SandboxRuntime) -> None:
    # The sandbox is not trusted: code that drives the transport itself (an unknown tool, or
    # arguments that are not keyword arguments) gets an error, and no tool runs.
    exec_tool = SandboxExecTool(runtime=runtime, tools=[fetch])
    code = (
        "print(tools._call('os_system', {'cmd': 'id'}))\n"
        "print(tools._call('fetch', ['not', 'a', 'dict']))\n"
        "tools.fetch(record_id=1)['id']"
    )
    text = exec_tool.invoke({"code": code})
    assert "no tool named 'os_system'; tools: fetch" in text
    assert "a tool call needs a tool name and keyword arguments" in text
    assert "value:\n1" in text
    assert CALLS == [1]
