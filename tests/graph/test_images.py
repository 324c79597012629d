"""Where tool-result images go per model: the rewrite of the messages sent to the model."""

from __future__ import annotations

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
    anthropic = ChatAnthropic(model="claude-sonnet-4-5", api_key="sk-ant-test")  # type: ignore[call-arg]
    assert image_placement(openai) == "user_message"
    assert image_placement(openai.bind_tools([])) == "user_message"
    assert image_placement(anthropic) == "tool_result"
    assert image_placement(openai, "tool_result") == "tool_result"
    history = [_ai("a"), _tool("a", _png(1))]
    assert messages_for_model(history, anthropic) == history
    with pytest.raises(ValueError, match="image_policy"):
        image_placement(openai, "inline")  # type: ignore[arg-type]
