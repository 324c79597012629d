"""The model's side: an agent (create_agent + SandboxMiddleware, a scripted model) writes a web
app, starts it with ``sandbox_shell(background=true)``, reads its output from an offset, exposes
its port and stops it with ``sandbox_process``; real local sandboxes."""

from __future__ import annotations

import re
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from process_helpers import SERVER, http_get

from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call
from langchain_sandbox.tools import SandboxProcessTool, SandboxShellTool, SandboxToolkit


def _tool_texts(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, ToolMessage)]


def _url(text: str) -> str:
    found = re.search(r"http://127\.0\.0\.1:\d+", text)
    assert found, text
    return found.group(0)


def _expose_then_poll(messages: list[BaseMessage]) -> Any:
    """After the server is up: read its output from the offset the start reply named."""
    started = _tool_texts(messages)[-1]
    since = int(re.search(r"since=(\d+)", started).group(1))  # type: ignore[union-attr]
    return [
        call("sandbox_process", action="expose", port=8000),
        call("sandbox_process", action="output", name="web", since=since),
    ]


def test_an_agent_runs_a_web_server_in_the_background_and_reaches_it(
    runtime: SandboxRuntime,
) -> None:
    script: list[Any] = [
        call("sandbox_write_file", path="app/index.html", content="<h1>made by the agent</h1>"),
        call("sandbox_shell", command=SERVER, cwd="app", background=True, name="web"),
        _expose_then_poll,
        call("sandbox_process", action="list"),
        "serving",
    ]
    agent = create_agent(
        ScriptedToolModel(script=script),
        middleware=[SandboxMiddleware(runtime=runtime)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "web-thread"}}
    state = agent.invoke({"messages": [HumanMessage("build and serve")]}, config)
    texts = _tool_texts(state["messages"])
    assert texts[1].startswith("Started in the background: web (running)"), texts[1]
    assert "sandbox_process action='output' name='web'" in texts[1]
    url = _url(texts[2])
    assert texts[2].startswith(f"Port 8000 is served at {url}")
    assert "next_offset=" in texts[3], texts[3]
    assert "process web: running" in texts[3], texts[3]
    assert "web (running)" in texts[4]
    assert http_get(url + "/index.html") == "<h1>made by the agent</h1>"
    # The record in the graph's state names the service, so a restore brings it back.
    assert state["sandbox"]["services"]["ports"] == [8000]
    assert [p["name"] for p in state["sandbox"]["services"]["processes"]] == ["web"]

    tool = SandboxProcessTool(runtime=runtime)
    reply = tool.invoke({"action": "stop", "name": "web"}, config)
    assert reply.startswith("Stopped. web (stopped"), reply
    # The process is no service any more; the port stays exposed (a later server may use it).
    services = (runtime.thread_record("web-thread") or {}).get("services")
    assert services == {"processes": [], "ports": [8000]}


def test_a_model_mistake_is_a_message_and_the_session_stays_usable(runtime: SandboxRuntime) -> None:
    tool = SandboxProcessTool(runtime=runtime)
    reply = tool.invoke({"action": "output"})
    assert "needs the name of the process" in reply
    reply = tool.invoke({"action": "stop", "name": "nobody"})
    assert reply.startswith("sandbox_process failed:"), reply
    assert tool.invoke({"action": "list"}) == "No background processes."
    shell = SandboxShellTool(runtime=runtime)
    assert "ok" in shell.invoke({"command": "echo ok"})


def test_the_toolkit_and_the_middleware_give_the_model_the_process_tool(
    runtime: SandboxRuntime,
) -> None:
    names = [t.name for t in SandboxToolkit(runtime=runtime).get_tools()]
    assert "sandbox_process" in names
    assert "sandbox_process" in [t.name for t in SandboxMiddleware(runtime=runtime).tools]
    shell = SandboxShellTool(runtime=runtime)
    assert "background" in shell.args
    assert "sandbox_process" in shell.description
    described = SandboxProcessTool(runtime=runtime).description
    assert "background=true" in described
    assert "next_offset" in described
    assert "URL" in described


def test_parallel_calls_of_one_step_keep_the_service_in_the_merged_record(
    runtime: SandboxRuntime,
) -> None:
    """Each parallel call returns a record; the reducer keeps the highest revision's, which
    saw the service whichever call started it."""
    script: list[Any] = [
        [
            call("sandbox_shell", command="sleep 300", background=True, name="svc"),
            call("sandbox_write_file", path="a.txt", content="a"),
            call("sandbox_exec", code="print('side by side')"),
        ],
        "done",
    ]
    agent = create_agent(
        ScriptedToolModel(script=script),
        middleware=[SandboxMiddleware(runtime=runtime)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "parallel"}}
    state = agent.invoke({"messages": [HumanMessage("go")]}, config)
    assert state["sandbox"]["revision"] == 3
    assert [p["name"] for p in state["sandbox"]["services"]["processes"]] == ["svc"]
