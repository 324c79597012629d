"""The four ways to use a sandbox from LangChain / LangGraph (issue #3), each on the real local
provider, sync and async: a tool with no graph, ``create_agent`` with ``SandboxExecTool``,
``create_agent`` with ``SandboxMiddleware`` and a checkpointer, and a hand-built ``StateGraph``
with ``SandboxToolNode`` over the toolkit."""

from __future__ import annotations

from typing import Any

import pytest
from agent_loop import agent_loop
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_sandbox.graph import SandboxMiddleware, SandboxToolNode
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call
from langchain_sandbox.tools import SandboxExecTool, SandboxToolkit


def tool_texts(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, ToolMessage)]


def config_for(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


async def run_agent(agent: Any, payload: Any, config: Any, mode: str) -> dict[str, Any]:
    """Run a compiled graph the way ``mode`` says and return its final state values."""
    if mode == "invoke":
        result: dict[str, Any] = agent.invoke(payload, config)
        return result
    if mode == "ainvoke":
        result = await agent.ainvoke(payload, config)
        return result
    if mode == "stream":
        for _ in agent.stream(payload, config, stream_mode="updates"):
            pass
    else:
        async for _ in agent.astream(payload, config, stream_mode="updates"):
            pass
    return dict(agent.get_state(config).values)


# -- 4. a tool with no graph -------------------------------------------------------------------


def test_tool_without_a_graph(runtime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=runtime)
    assert tool.invoke({"code": "print(1 + 1)"}).strip() == "stdout:\n2"
    tool.invoke({"code": "kept = 'across calls'"})
    assert "across calls" in tool.invoke({"code": "kept"})


async def test_tool_without_a_graph_async(runtime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=runtime)
    message = await tool.ainvoke(
        {"name": tool.name, "args": {"code": "6 * 7"}, "id": "call-1", "type": "tool_call"}
    )
    assert isinstance(message, ToolMessage)
    assert "42" in message.text
    assert message.artifact["result"]["value"] == "42"
    assert message.artifact["sandbox"]["exec_count"] == 1


# -- 1. create_agent with SandboxExecTool ------------------------------------------------------


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_create_agent_with_exec_tool(runtime: SandboxRuntime, thread: str, mode: str) -> None:
    model = ScriptedToolModel(
        script=[call("sandbox_exec", code="x = 21"), call("sandbox_exec", code="x * 2"), "42."]
    )
    agent = create_agent(model, tools=[SandboxExecTool(runtime=runtime)])
    state = await run_agent(
        agent, {"messages": [HumanMessage("double 21")]}, config_for(thread), mode
    )
    texts = tool_texts(state["messages"])
    assert texts[0] == "[no output]"
    assert texts[1].strip() == "value:\n42"
    assert state["messages"][-1].text == "42."


# -- 2. create_agent with SandboxMiddleware and a checkpointer ---------------------------------


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream", "astream"])
async def test_create_agent_with_middleware(
    runtime: SandboxRuntime, thread: str, mode: str
) -> None:
    model = ScriptedToolModel(
        script=[
            call("sandbox_write_file", path="data/n.txt", content="20"),
            call("sandbox_exec", code="n = int(open('data/n.txt').read()) + 1\nprint(n)"),
            "n is 21.",
            # second turn: the variable and the file are still there
            call("sandbox_exec", code="print(n * 2, open('data/n.txt').read())"),
            "twice n is 42.",
        ]
    )
    agent = create_agent(
        model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=InMemorySaver()
    )
    config = config_for(thread)
    state = await run_agent(agent, {"messages": [HumanMessage("go")]}, config, mode)
    assert tool_texts(state["messages"])[1].strip() == "stdout:\n21"
    record = state["sandbox"]
    assert record["revision"] == 2  # write + exec
    assert record["exec_count"] == 1
    assert record["session"]["provider"] == "local"
    assert record["snapshot"]

    state = await run_agent(agent, {"messages": [HumanMessage("again")]}, config, mode)
    assert tool_texts(state["messages"])[-1].strip() == "stdout:\n42 20"
    assert state["sandbox"]["revision"] == 3
    assert state["sandbox"]["exec_count"] == 2
    # both turns used the sandbox before_agent made for the thread
    sessions = {
        m.artifact["sandbox"]["session"]["session_id"]
        for m in state["messages"]
        if isinstance(m, ToolMessage)
    }
    assert sessions == {record["session"]["session_id"]} == {runtime.live_sessions()[thread]}


async def test_middleware_streams_output_and_messages(runtime: SandboxRuntime, thread: str) -> None:
    model = ScriptedToolModel(
        script=[call("sandbox_exec", code="for i in range(3):\n    print('line', i)"), "done"]
    )
    agent = create_agent(
        model, middleware=[SandboxMiddleware(runtime=runtime)], checkpointer=InMemorySaver()
    )
    custom: list[Any] = []
    chunks: list[Any] = []
    async for mode, event in agent.astream(
        {"messages": [HumanMessage("go")]},
        config_for(thread),
        stream_mode=["custom", "messages"],
    ):
        (custom if mode == "custom" else chunks).append(event)
    streamed = "".join(e["text"] for e in custom if e.get("type") == "sandbox_output")
    assert streamed == "line 0\nline 1\nline 2\n"
    tool_call_chunks = [c for m, _ in chunks for c in getattr(m, "tool_call_chunks", [])]
    assert [c["name"] for c in tool_call_chunks] == ["sandbox_exec"]


# -- 3. a hand-built StateGraph with SandboxToolNode over the toolkit ---------------------------


def build_graph(runtime: SandboxRuntime, model: ScriptedToolModel) -> Any:
    tools = SandboxToolkit(runtime=runtime).get_tools()
    return agent_loop(model, tools, tool_node=SandboxToolNode(tools)).compile(
        checkpointer=InMemorySaver()
    )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream", "astream"])
async def test_state_graph_with_sandbox_tool_node(
    runtime: SandboxRuntime, thread: str, mode: str
) -> None:
    model = ScriptedToolModel(
        script=[
            call("sandbox_exec", code="import os\npid = os.getpid()\ntotal = 10"),
            [  # two calls in one AI message: both see the state of the first step
                call("sandbox_exec", code="total += 1\nprint(os.getpid() == pid, total)"),
                call("sandbox_shell", command="mkdir -p out && echo hi > out/a.txt && ls out"),
            ],
            call("sandbox_read_file", path="out/a.txt"),
            "done",
        ]
    )
    graph = build_graph(runtime, model)
    state = await run_agent(graph, {"messages": [HumanMessage("go")]}, config_for(thread), mode)
    texts = tool_texts(state["messages"])
    assert texts[1].strip() == "stdout:\nTrue 11"
    assert texts[2].strip() == "stdout:\na.txt"
    assert "hi" in texts[3]
    record = state["sandbox"]
    assert record["revision"] == 3  # exec, exec, shell; reads do not change the sandbox
    assert record["exec_count"] == 3  # executions count, as deltas summed by the reducer


def test_tool_node_binds_its_runtime(tmp_path: Any, thread: str) -> None:
    """``SandboxToolNode(tools, runtime=...)`` makes tools without a runtime use that one."""
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

    own = SandboxRuntime("local", snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path)))
    try:
        model = ScriptedToolModel(script=[call("sandbox_exec", code="1 + 1"), "2"])
        tools = [SandboxExecTool()]
        graph = agent_loop(model, tools, runtime=own)
        state = graph.compile().invoke({"messages": [HumanMessage("go")]}, config_for(thread))
        assert "2" in tool_texts(state["messages"])[0]
        assert thread in own.live_sessions()
        assert tools[0].runtime is None  # the caller's tool was copied, not changed
    finally:
        own.close()


def test_scripted_model_is_deterministic() -> None:
    model = ScriptedToolModel(script=[call("t", a=1), "end"], check_tool_names=False)
    first = model.invoke([HumanMessage("x")])
    again = model.invoke([HumanMessage("x")])
    assert isinstance(first, AIMessage)
    assert first.tool_calls == again.tool_calls
    assert first.tool_calls[0]["id"] == "call_0_0"
    assert model.invoke([HumanMessage("x"), first]).text == "end"
    with pytest.raises(TypeError, match="list of steps"):
        ScriptedToolModel(script=42)
    with pytest.raises(ValueError, match="3 steps"):
        ScriptedToolModel(script=["a", "b", "c"]).invoke([HumanMessage("x"), *[AIMessage("")] * 3])
    with pytest.raises(ValueError, match="bound tools"):
        ScriptedToolModel(script=[call("missing")]).bind_tools([SandboxExecTool()]).invoke("x")


async def test_middleware_finds_the_runtime_in_the_run_context(
    runtime: SandboxRuntime, thread: str
) -> None:
    """No runtime given to the middleware: it and its tools use the one in ``context=``."""
    from dataclasses import dataclass

    @dataclass
    class Context:
        sandbox_runtime: SandboxRuntime

    model = ScriptedToolModel(script=[call("sandbox_exec", code="'from context'"), "ok"])
    agent = create_agent(
        model,
        middleware=[SandboxMiddleware()],
        context_schema=Context,
        checkpointer=InMemorySaver(),
    )
    state = await agent.ainvoke(
        {"messages": [HumanMessage("go")]}, config_for(thread), context=Context(runtime)
    )
    assert "'from context'" in tool_texts(state["messages"])[0]
    assert state["sandbox"]["session"]["session_id"] == runtime.live_sessions()[thread]
