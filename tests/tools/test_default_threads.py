"""Calls that carry no ``thread_id`` get a sandbox private to their owner (a tool instance, a
toolkit, a middleware), never one process-wide sandbox every agent shares; sharing is asked for by
name. Run on the process-wide default runtime (the local provider, for real), which is what a user
gets with no set-up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage

from langchain_sandbox import runtime as runtime_module
from langchain_sandbox.graph import SandboxMiddleware
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call
from langchain_sandbox.tools import SandboxExecTool, SandboxShellTool, SandboxToolkit


@pytest.fixture(autouse=True)
def _fresh_default_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(runtime_module, "_default_runtime", None)
    yield
    made = runtime_module._default_runtime
    if made is not None:
        made.close()


def _tool_texts(state: dict[str, Any]) -> list[str]:
    messages = state["messages"]
    return [m.text.strip() for m in messages if isinstance(m, ToolMessage)]


def test_two_tools_without_a_thread_id_see_nothing_of_each_other() -> None:
    first, second = SandboxExecTool(), SandboxExecTool()
    first.invoke({"code": "secret = 's3cr3t'\nopen('token.txt', 'w').write(secret)"})

    # One tool instance keeps its own state across calls...
    assert "s3cr3t" in first.invoke({"code": "print(secret, open('token.txt').read())"})
    # ...and another instance sees neither its variables nor its files.
    assert "NameError" in second.invoke({"code": "secret"})
    assert "FileNotFoundError" in second.invoke({"code": "open('token.txt').read()"})
    assert len(runtime_module.get_default_runtime().live_sessions()) == 2


def test_two_agents_without_a_thread_id_do_not_share_a_sandbox() -> None:
    def _agent(code: str) -> Any:
        model = ScriptedToolModel(script=[call("sandbox_exec", code=code), "done"])
        return create_agent(model, tools=[SandboxExecTool()])

    setter = _agent("api_key = 'sk-agent-one'\nprint('set')")
    reader = _agent("print(globals().get('api_key', 'not visible'))")
    assert _tool_texts(setter.invoke({"messages": [HumanMessage("set it")]})) == ["stdout:\nset"]
    state = reader.invoke({"messages": [HumanMessage("read it")]})
    assert _tool_texts(state) == ["stdout:\nnot visible"]


def test_two_middleware_agents_without_a_thread_id_do_not_share_a_sandbox() -> None:
    setter_middleware, reader_middleware = SandboxMiddleware(), SandboxMiddleware()
    setter = create_agent(
        ScriptedToolModel(
            script=[call("sandbox_shell", command="echo classified > secret.txt"), "done"]
        ),
        middleware=[setter_middleware],
    )
    reader = create_agent(
        ScriptedToolModel(
            script=[call("sandbox_shell", command="cat secret.txt || echo absent"), "done"]
        ),
        middleware=[reader_middleware],
    )
    setter.invoke({"messages": [HumanMessage("write it")]})
    texts = _tool_texts(reader.invoke({"messages": [HumanMessage("read it")]}))
    assert "absent" in texts[0]
    assert "classified" not in texts[0]
    # Each middleware's sandbox is its own, prepared by before_agent and used by its tools.
    live = runtime_module.get_default_runtime().live_sessions()
    assert set(live) == {setter_middleware.default_thread_id, reader_middleware.default_thread_id}
    assert len(set(live.values())) == 2


def test_a_toolkit_shares_one_private_sandbox_among_its_own_tools() -> None:
    shell, python = (
        next(t for t in tools if t.name == name)
        for tools, name in (
            (SandboxToolkit().get_tools(), "sandbox_shell"),
            (SandboxToolkit().get_tools(), "sandbox_exec"),
        )
    )
    shell.invoke({"command": "echo mine > kit.txt"})
    assert "FileNotFoundError" in python.invoke({"code": "open('kit.txt').read()"})

    tools = {t.name: t for t in SandboxToolkit().get_tools()}
    tools["sandbox_shell"].invoke({"command": "echo shared > kit.txt"})
    assert "shared" in tools["sandbox_exec"].invoke({"code": "print(open('kit.txt').read())"})


def test_sharing_without_a_thread_id_is_asked_for_by_name() -> None:
    writer = SandboxShellTool(default_thread_id="team")
    reader = SandboxExecTool(default_thread_id="team")
    writer.invoke({"command": "echo together > team.txt"})
    assert "together" in reader.invoke({"code": "print(open('team.txt').read())"})
    assert "FileNotFoundError" in SandboxExecTool().invoke({"code": "open('team.txt')"})

    # A thread id in the config names the sandbox whatever the tool's own default.
    config: Any = {"configurable": {"thread_id": "conversation-1"}}
    SandboxExecTool().invoke({"code": "answer = 42"}, config)
    assert "42" in reader.invoke({"code": "answer"}, config)
