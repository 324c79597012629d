"""How the graph glue behaves under the things agents do: parallel calls, several threads, human
approval, time travel in one process, and code that times out, kills its worker or attacks the
host. Real local sandboxes, real checkpointers."""

from __future__ import annotations

from typing import Any

import pytest
from agent_loop import agent_loop
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def agent_with(runtime: SandboxRuntime, script: Any, *extra: Any) -> Any:
    return create_agent(
        ScriptedToolModel(script=script),
        middleware=[*extra, SandboxMiddleware(runtime=runtime)],
        checkpointer=InMemorySaver(),
    )


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


async def test_parallel_calls_share_one_sandbox_and_merge(
    runtime: SandboxRuntime, thread: str
) -> None:
    agent = agent_with(
        runtime,
        [
            call("sandbox_exec", code="import os\npid = os.getpid()\nbase = 100"),
            [
                call("sandbox_exec", code="print(os.getpid() == pid, base + 1)"),
                call("sandbox_exec", code="print(os.getpid() == pid, base + 2)"),
                call("sandbox_write_file", path="p.txt", content="parallel"),
            ],
            call("sandbox_exec", code="print(open('p.txt').read())"),
            "done",
        ],
    )
    state = await agent.ainvoke({"messages": [HumanMessage("go")]}, cfg(thread))
    texts = sorted(m.text.strip() for m in tool_messages(state["messages"])[1:4])
    assert texts == ["Wrote 8 bytes to /home/user/p.txt.", "stdout:\nTrue 101", "stdout:\nTrue 102"]
    assert "parallel" in tool_messages(state["messages"])[-1].text
    assert state["sandbox"]["revision"] == 5
    assert state["sandbox"]["exec_count"] == 4
    sessions = {
        m.artifact["sandbox"]["session"]["session_id"] for m in tool_messages(state["messages"])
    }
    assert sessions == {runtime.live_sessions()[thread]}  # one sandbox served every call


def test_two_threads_get_two_sandboxes_that_cannot_see_each_other(
    runtime: SandboxRuntime, thread: str
) -> None:
    other = thread + "-other"
    writer = agent_with(
        runtime,
        [call("sandbox_write_file", path="secret.txt", content="thread A only"), "ok"],
    )
    reader = agent_with(
        runtime,
        [
            call("sandbox_exec", code="import os\nprint(sorted(os.listdir('.')))"),
            call("sandbox_read_file", path="secret.txt"),
            "ok",
        ],
    )
    writer.invoke({"messages": [HumanMessage("write")]}, cfg(thread))
    state = reader.invoke({"messages": [HumanMessage("read")]}, cfg(other))
    listing, read = tool_messages(state["messages"])
    assert "secret.txt" not in listing.text
    assert read.status == "error"
    assert "thread A only" not in read.text
    live = runtime.live_sessions()
    assert live[thread] != live[other]


def test_human_in_the_loop_approval_composes_with_the_middleware(
    runtime: SandboxRuntime, thread: str
) -> None:
    agent = agent_with(
        runtime,
        [call("sandbox_exec", code="ran = globals().get('ran', 0) + 1\nprint('ran', ran)"), "ok"],
        HumanInTheLoopMiddleware(interrupt_on={"sandbox_exec": True}),
    )
    paused = agent.invoke({"messages": [HumanMessage("go")]}, cfg(thread))
    assert paused["__interrupt__"]
    assert tool_messages(paused["messages"]) == []
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg(thread))
    assert [m.text.strip() for m in tool_messages(done["messages"])] == ["stdout:\nran 1"]
    assert done["sandbox"]["exec_count"] == 1


def test_time_travel_in_one_process_restores_the_older_workspace(
    runtime: SandboxRuntime, thread: str
) -> None:
    """The live sandbox has moved on; replaying from an older checkpoint restores that
    checkpoint's files and variables (copy-on-divergence), and the newer branch keeps its own."""
    script = [
        call("sandbox_exec", code="v = 1\nopen('f.txt', 'w').write('one')"),
        call(
            "sandbox_exec",
            code="print('saw', v, open('f.txt').read())\nv = 2\nopen('f.txt', 'w').write('two')",
        ),
        "done",
        call("sandbox_exec", code="print('now', v, open('f.txt').read())"),
        "done again",
    ]
    agent = agent_with(runtime, script)
    agent.invoke({"messages": [HumanMessage("go")]}, cfg(thread))
    history = list(agent.get_state_history(cfg(thread)))
    newest = history[0].config
    older = next(
        s.config
        for s in history
        if s.next == ("model",) and len(tool_messages(s.values["messages"])) == 1
    )

    fork = agent.invoke(None, older)
    assert "saw 1 one" in tool_messages(fork["messages"])[-1].text
    back = agent.invoke({"messages": [HumanMessage("again")]}, newest)
    assert "now 2 two" in tool_messages(back["messages"])[-1].text


async def test_timeout_leaves_the_thread_usable(runtime: SandboxRuntime, thread: str) -> None:
    agent = agent_with(
        runtime,
        [
            call("sandbox_exec", code="kept = 'still here'"),
            call("sandbox_exec", code="import time\ntime.sleep(60)", timeout=1),
            call("sandbox_exec", code="print(kept)"),
            "ok",
        ],
    )
    state = await agent.ainvoke({"messages": [HumanMessage("go")]}, cfg(thread))
    _, slow, after = tool_messages(state["messages"])
    assert "[timed out" in slow.text
    assert after.text.strip() == "stdout:\nstill here"


def test_a_worker_crash_leaves_the_thread_usable(runtime: SandboxRuntime, thread: str) -> None:
    agent = agent_with(
        runtime,
        [
            call(
                "sandbox_exec", code="open('saved.txt', 'w').write('before the crash')\nsaved = 7"
            ),
            call("sandbox_exec", code="import os\nos.kill(os.getpid(), 9)"),
            call("sandbox_exec", code="print(open('saved.txt').read())\nagain = 8\nagain"),
            "ok",
        ],
    )
    state = agent.invoke({"messages": [HumanMessage("go")]}, cfg(thread))
    _, crash, after = tool_messages(state["messages"])
    # a crash of user code's process is a result the model reads, not a failure of the agent
    assert "[error] SandboxWorkerDied" in crash.text
    assert "variables were lost" in crash.text
    assert "before the crash" in after.text  # the workspace survived
    assert after.text.rstrip().endswith("value:\n8")  # and Python works again


def test_hostile_input_leaves_the_thread_usable(runtime: SandboxRuntime, thread: str) -> None:
    agent = agent_with(
        runtime,
        [
            call("sandbox_exec", code="mine = 'fine'"),
            [
                call("sandbox_read_file", path="../../../etc/shadow"),
                call("sandbox_write_file", path="/etc/evil", content="x"),
                call("sandbox_install_packages", packages=["--index-url=http://evil"]),
            ],
            call("sandbox_exec", code="print('x' * 3_000_000)\nprint(mine)"),
            "ok",
        ],
    )
    state = agent.invoke({"messages": [HumanMessage("go")]}, cfg(thread))
    messages = tool_messages(state["messages"])
    refused = messages[1:4]
    assert all(m.status == "error" for m in refused), [m.text for m in refused]
    assert "outside the workspace" in refused[0].text or "'..'" in refused[0].text
    big = messages[-1].text
    assert "fine" in big
    assert "output truncated at the source" in big
    assert len(big) < 20_000  # the model sees head and tail, not 3 MB


def test_tool_node_replays_parallel_sandbox_calls_after_an_interrupt(
    runtime: SandboxRuntime, thread: str
) -> None:
    """Three sandbox calls and an approval in one AI message, in one ToolNode run. The approval
    interrupts the node; on resume the node runs again, and each sandbox call's result is
    replayed (to its own call) instead of being executed a second time."""
    from langchain_core.tools import tool
    from langgraph.types import interrupt

    from langchain_sandbox.tools import SandboxExecTool

    @tool
    def ask_approval(question: str) -> str:
        """Ask a human."""
        return str(interrupt(question))

    tools = [SandboxExecTool(), ask_approval]
    appends = [
        call("sandbox_exec", code=f"open('log.txt', 'a').write('{c}')\nprint('{c}')") for c in "abc"
    ]
    model = ScriptedToolModel(
        script=[
            [*appends, call("ask_approval", question="ok?")],
            call("sandbox_exec", code="print(open('log.txt').read())"),
            "done",
        ]
    )
    app = agent_loop(model, tools, runtime=runtime).compile(checkpointer=InMemorySaver())

    assert app.invoke({"messages": [HumanMessage("go")]}, cfg(thread))["__interrupt__"]
    state = app.invoke(Command(resume="yes"), cfg(thread))
    by_call = {m.tool_call_id: m.text for m in tool_messages(state["messages"])}
    assert [by_call[f"call_0_{i}"].strip() for i in range(3)] == [
        "stdout:\na",
        "stdout:\nb",
        "stdout:\nc",
    ]
    assert by_call["call_0_3"] == "yes"
    final = by_call["call_1_0"]
    assert sorted(final.split("stdout:\n", 1)[1].strip()) == ["a", "b", "c"]  # each ran once
    assert state["sandbox"]["exec_count"] == 4


def test_a_provider_that_rejects_the_key_fails_the_run_for_the_developer(thread: str) -> None:
    """E2B rejects the key (the E2B emulator, through the real SDK): the model can do nothing
    about that, so the run raises it to the developer before the model is called, instead of
    handing the model a tool error."""
    import uuid

    from langchain_sandbox.errors import AuthenticationError
    from langchain_sandbox.providers.e2b import E2BProvider
    from langchain_sandbox.testing.e2b_emulator import E2BEmulator

    seen: list[list[Any]] = []

    def script(messages: list[Any]) -> Any:
        seen.append(messages)
        return call("sandbox_exec", code="1 + 1")

    with E2BEmulator(api_key="e2b_" + uuid.uuid4().hex) as emulator:
        provider = E2BProvider(
            api_key="e2b_" + "0" * 40, api_url=emulator.url, sandbox_url=emulator.url
        )
        refused = SandboxRuntime(provider, persist="never")
        try:
            agent = agent_with(refused, script)
            with pytest.raises(AuthenticationError, match="Invalid API key"):
                agent.invoke({"messages": [HumanMessage("compute")]}, cfg(thread))
        finally:
            refused.close()
    assert seen == []


def _updates(stream: Any) -> list[dict[str, Any]]:
    return [chunk for chunk in stream if isinstance(chunk, dict)]


def _assert_tool_node_shape(updates: list[dict[str, Any]], tool_messages: int) -> None:
    """Each update is {node: {channel: value}} (or, for a node that wrote a channel more than
    once, as parallel calls returning ``Command``s do, LangGraph's list of one-channel dicts),
    and every tool message arrives once, in the ``tools`` updates that carry the sandbox record:
    what a plain ``ToolNode`` streams."""
    nodes = [node for update in updates for node in update]
    assert "sandbox_tool_call" not in nodes
    writes = [
        (node, write)
        for update in updates
        for node, value in update.items()
        for write in (value if isinstance(value, list) else [value])
    ]
    assert all(isinstance(write, dict | None) for _, write in writes), writes
    tools = [write for node, write in writes if node == "tools"]
    assert any("sandbox" in write for write in tools)
    messages = [m for write in tools for m in write.get("messages", [])]
    assert [m.type for m in messages] == ["tool"] * tool_messages


async def test_updates_stream_like_a_plain_tool_node(runtime: SandboxRuntime, thread: str) -> None:
    """``stream_mode="updates"`` with the middleware (sync and async) and with SandboxToolNode
    (parallel sandbox calls in one message): no extra ``sandbox_tool_call`` update."""
    from langchain_sandbox.tools import SandboxExecTool

    script = [
        call("sandbox_exec", code="x = 1"),
        [call("sandbox_exec", code="x + 1"), call("sandbox_exec", code="x + 2")],
        "done",
    ]
    agent = agent_with(runtime, script)
    first = _updates(
        agent.stream({"messages": [HumanMessage("go")]}, cfg(thread), stream_mode="updates")
    )
    _assert_tool_node_shape(first, tool_messages=3)
    second = [
        u
        async for u in agent_with(runtime, script).astream(
            {"messages": [HumanMessage("go")]}, cfg(thread + "-a"), stream_mode="updates"
        )
    ]
    _assert_tool_node_shape(second, tool_messages=3)

    loop = agent_loop(ScriptedToolModel(script=script), [SandboxExecTool()], runtime=runtime)
    app = loop.compile(checkpointer=InMemorySaver())
    hand_built = _updates(
        app.stream({"messages": [HumanMessage("go")]}, cfg(thread + "-g"), stream_mode="updates")
    )
    _assert_tool_node_shape(hand_built, tool_messages=3)
