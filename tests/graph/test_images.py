"""Where tool-result images go per model: the rewrite of the messages sent to the model."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langchain_sandbox import image_placement, messages_for_model


def _png(n: int) -> dict[str, str]:
    return {"type": "image", "base64": f"img{n}", "mime_type": "image/png"}


def _tool(call_id: str, *images: dict[str, str]) -> ToolMessage:
    return ToolMessage([{"type": "text", "text": f"ran {call_id}"}, *images], tool_call_id=call_id)


def _ai(*ids: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "sandbox_exec", "args": {}, "id": i} for i in ids])


def test_images_follow_each_step_in_one_user_message_and_state_is_untouched() -> None:
    history = [
        HumanMessage("go"),
        _ai("a", "b", "c"),
        _tool("a", _png(1)),
        _tool("b"),
        _tool("c", _png(2), _png(3)),
        _ai("d"),
        _tool("d", _png(4)),
    ]
    before = [m.model_copy(deep=True) for m in history]
    sent = messages_for_model(history, object(), policy="user_message")
    assert [m.type for m in sent] == [
        "human",
        "ai",
        "tool",
        "tool",
        "tool",
        "human",
        "ai",
        "tool",
        "human",
    ]
    assert sent[5].content[1:] == [_png(1), _png(2), _png(3)]
    assert "a, c" in sent[5].content[0]["text"]
    assert sent[8].content[1:] == [_png(4)]
    assert sent[4].content[-1]["text"] == "[2 images attached in the next user message]"
    assert sent[3] is history[3]  # a tool message without images is passed as is
    assert history == before


def test_auto_picks_by_model_and_bad_policies_are_refused() -> None:
    from langchain_anthropic import ChatAnthropic
    from langchain_openai import ChatOpenAI

    openai = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test")
    anthropic = ChatAnthropic(model="claude-sonnet-5-5", api_key="sk-ant-test")  # type: ignore[call-arg]
    assert image_placement(openai) == "user_message"
    assert image_placement(openai.bind_tools([])) == "user_message"
    assert image_placement(anthropic) == "tool_result"
    assert image_placement(openai, "tool_result") == "tool_result"
    history = [_ai("a"), _tool("a", _png(1))]
    assert messages_for_model(history, anthropic) == history
    with pytest.raises(ValueError, match="image_policy"):
        image_placement(openai, "inline")  # type: ignore[arg-type]


def test_a_chart_is_stored_once_and_displays_in_notebooks(runtime: Any, thread: str) -> None:
    """The chart's PNG is in the tool message once: the scripted model does not say which API
    it speaks, so in the artifact's ``images``, with a note in the content, and not a second
    time in the result's artifacts; ``execution_result`` rebuilds the full result, which
    Jupyter draws through ``_repr_mimebundle_``."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox import SandboxExecTool, SandboxMiddleware, execution_result
    from langchain_sandbox.testing import ScriptedToolModel, call

    chart = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\n'ok'"
    saver = InMemorySaver()
    agent = create_agent(
        ScriptedToolModel(script=[call("sandbox_exec", code=chart), "done"]),
        middleware=[SandboxMiddleware(runtime=runtime, tools=[SandboxExecTool()])],
        checkpointer=saver,
    )
    config = {"configurable": {"thread_id": thread}}
    state = agent.invoke({"messages": [HumanMessage("chart")]}, config)
    message = next(m for m in state["messages"] if m.type == "tool")
    assert isinstance(message.content, str)
    assert "1 image not shown in this tool result" in message.content
    (image,) = message.artifact["result"]["images"]
    checkpoint = saver.get_tuple(config).checkpoint  # type: ignore[union-attr]
    _, stored = saver.serde.dumps_typed(checkpoint)
    assert stored.count(image["base64"][64:128].encode()) == 1
    assert "data" not in message.artifact["result"]["artifacts"][0]

    result = execution_result(message)
    figure = result.artifacts[0]
    assert figure.to_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert figure.data == image["base64"]
    assert result.value == "'ok'"
    bundle = result._repr_mimebundle_()
    assert bundle["text/plain"] == result.render()
    assert f'<img src="data:image/png;base64,{image["base64"]}"' in bundle["text/html"]
    assert bundle["image/png"] == image["base64"]
    assert figure._repr_mimebundle_()["image/png"] == image["base64"]
    with pytest.raises(ValueError, match="sandbox_exec"):
        execution_result(HumanMessage("not a tool reply"))


def _kept(call_id: str, *images: dict[str, str]) -> ToolMessage:
    """A tool message whose tool kept its images in the artifact (the caller was unknown)."""
    return ToolMessage(
        f"ran {call_id}\n[note]",
        tool_call_id=call_id,
        artifact={"result": {"images": list(images)}, "sandbox": {}},
    )


def test_images_kept_in_the_artifact_reach_the_model_in_its_form() -> None:
    """A tool that could not tell its caller kept the chart in the artifact; the middleware's
    rewrite brings it back: a user message for OpenAI, the tool result for the others."""
    history = [HumanMessage("go"), _ai("a"), _kept("a", _png(1)), _ai("b"), _tool("b", _png(2))]
    sent = messages_for_model(history, object(), policy="user_message")
    assert [m.type for m in sent] == ["human", "ai", "tool", "human", "ai", "tool", "human"]
    assert sent[3].content[1:] == [_png(1)]
    assert sent[2].content == [
        {"type": "text", "text": "ran a\n[note]"},
        {"type": "text", "text": "[1 image attached in the next user message]"},
    ]
    assert sent[6].content[1:] == [_png(2)]
    inline = messages_for_model(history, object(), policy="tool_result")
    assert inline[2].content == [{"type": "text", "text": "ran a\n[note]"}, _png(1)]
    assert inline[4] is history[4]
    assert history[2].content == "ran a\n[note]"  # the state keeps the message as it was
