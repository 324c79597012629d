"""Chart images reach OpenAI and Anthropic in the form each API accepts, through their real clients.

The agent is ``create_agent`` with ``SandboxMiddleware`` and the real ``langchain-openai`` /
``langchain-anthropic`` chat models, pointed at small loopback stand-ins of the two HTTP APIs.
A stand-in records each request body the client sends and answers in the API's real response
format: first a tool call that makes a matplotlib chart in the local sandbox, then a final
answer. The assertions are on the second request, the one that carries the chart:

* OpenAI Chat Completions rejects image parts in ``role: "tool"`` messages, so the tool message
  keeps text only and the PNG follows as an ``image_url`` part of a ``role: "user"`` message;
* Anthropic's Messages API takes images inside ``tool_result``, so the PNG is there, and no other
  message carries it;
* ``image_policy=`` overrides the choice.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI

from langchain_sandbox import (
    LocalDirectoryBlobStore,
    SandboxExecTool,
    SandboxMiddleware,
    SandboxRuntime,
    Snapshotter,
)

CHART = (
    "import matplotlib.pyplot as plt\n"
    "plt.bar(['a', 'b'], [3, 5])\n"
    "plt.title('sales')\n"
    "plt.show()\n"
    "'drawn'"
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _openai_reply(turn: int) -> dict[str, Any]:
    if turn == 0:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_chart",
                    "type": "function",
                    "function": {"name": "sandbox_exec", "arguments": json.dumps({"code": CHART})},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "b sold more."}, "stop"
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _anthropic_reply(turn: int) -> dict[str, Any]:
    if turn == 0:
        content: list[dict[str, Any]] = [
            {
                "type": "tool_use",
                "id": "toolu_chart",
                "name": "sandbox_exec",
                "input": {"code": CHART},
            }
        ]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": "b sold more."}], "end_turn"
    return {
        "id": f"msg_{turn}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


class StandIn:
    """A loopback HTTP server answering ``path`` with ``reply(turn)`` and recording the bodies."""

    def __init__(self, path: str, reply: Callable[[int], dict[str, Any]]) -> None:
        self.bodies: list[dict[str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                if self.path.split("?")[0] != path or body.get("stream"):
                    # Neither client streams under ``invoke``; anything else is a test failure.
                    self.send_error(
                        400, f"unexpected request {self.path} stream={body.get('stream')}"
                    )
                    return
                stand_in.bodies.append(body)
                data = json.dumps(reply(len(stand_in.bodies) - 1)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[SandboxRuntime]:
    made = SandboxRuntime(snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")))
    yield made
    made.close()


def _run(model: Any, runtime: SandboxRuntime, **middleware: Any) -> None:
    agent = create_agent(
        model,
        middleware=[SandboxMiddleware(runtime=runtime, tools=[SandboxExecTool()], **middleware)],
    )
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "Chart the sales."}]},
        {"configurable": {"thread_id": "wire"}},
    )
    assert result["messages"][-1].text == "b sold more."


def _png(data: str) -> bytes:
    png = base64.b64decode(data)
    assert png.startswith(PNG_MAGIC)
    return png


def _openai(stand_in: StandIn) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4o-mini", base_url=f"{stand_in.url}/v1", api_key="sk-test", max_retries=0
    )


def test_openai_gets_the_chart_as_a_user_image_after_the_tool_message(
    runtime: SandboxRuntime,
) -> None:
    with StandIn("/v1/chat/completions", _openai_reply) as stand_in:
        _run(_openai(stand_in), runtime)
    assert len(stand_in.bodies) == 2
    messages = stand_in.bodies[1]["messages"]
    roles = [m["role"] for m in messages]
    assert roles[-3:] == ["assistant", "tool", "user"]
    tool, user = messages[-2], messages[-1]
    assert tool["tool_call_id"] == "call_chart"
    parts = tool["content"] if isinstance(tool["content"], list) else [tool["content"]]
    assert "image_url" not in json.dumps(parts)
    assert "[artifact] figure-1.png (image/png)" in json.dumps(parts)
    assert "attached in the next user message" in json.dumps(parts)
    images = [p for p in user["content"] if p["type"] == "image_url"]
    assert len(images) == 1
    prefix = "data:image/png;base64,"
    assert images[0]["image_url"]["url"].startswith(prefix)
    _png(images[0]["image_url"]["url"][len(prefix) :])
    # No image anywhere but in that user message.
    assert sum(json.dumps(m).count('"type": "image_url"') for m in messages) == 1


def _anthropic(stand_in: StandIn) -> ChatAnthropic:
    return ChatAnthropic(  # type: ignore[call-arg]
        model="claude-sonnet-5-5", base_url=stand_in.url, api_key="sk-ant-test", max_retries=0
    )


def _tool_result(messages: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [
        block
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    ]
    return found


def test_anthropic_gets_the_chart_inside_the_tool_result(runtime: SandboxRuntime) -> None:
    with StandIn("/v1/messages", _anthropic_reply) as stand_in:
        _run(_anthropic(stand_in), runtime)
    assert len(stand_in.bodies) == 2
    messages = stand_in.bodies[1]["messages"]
    result = _tool_result(messages)
    assert result["tool_use_id"] == "toolu_chart"
    images = [b for b in result["content"] if b["type"] == "image"]
    assert len(images) == 1
    assert images[0]["source"]["type"] == "base64"
    assert images[0]["source"]["media_type"] == "image/png"
    _png(images[0]["source"]["data"])
    assert json.dumps(messages).count('"type": "image"') == 1


def test_image_policy_overrides_the_choice(runtime: SandboxRuntime) -> None:
    """``image_policy="user_message"`` on Anthropic: the tool result keeps text, the chart
    follows in the user turn; ``"tool_result"`` on OpenAI sends what that API rejects, which is
    why ``"auto"`` does not."""
    with StandIn("/v1/messages", _anthropic_reply) as stand_in:
        _run(_anthropic(stand_in), runtime, image_policy="user_message")
    messages = stand_in.bodies[1]["messages"]
    result = _tool_result(messages)
    assert all(b["type"] != "image" for b in result["content"])
    assert json.dumps(messages).count('"type": "image"') == 1

    with StandIn("/v1/chat/completions", _openai_reply) as stand_in:
        _run(_openai(stand_in), runtime, image_policy="tool_result")
    tool = stand_in.bodies[1]["messages"][-1]
    assert tool["role"] == "tool"
    assert "image_url" in json.dumps(tool["content"])
    with pytest.raises(ValueError, match="image_policy"):
        SandboxMiddleware(image_policy="inline")  # type: ignore[arg-type]


def _run_plain(model: Any, runtime: SandboxRuntime) -> list[Any]:
    """The headline one-liner: ``create_agent(model, tools=[SandboxExecTool()])``, no middleware."""
    agent = create_agent(model, tools=[SandboxExecTool(runtime=runtime)])
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "Chart the sales."}]},
        {"configurable": {"thread_id": "plain"}},
    )
    assert result["messages"][-1].text == "b sold more."
    return list(result["messages"])


def test_openai_without_middleware_gets_a_text_only_tool_message(runtime: SandboxRuntime) -> None:
    """Chat Completions rejects image parts in a ``tool`` message; without the middleware to
    move them, the tool itself (told by the calling message that OpenAI made the call) keeps
    the chart out of its content, in the artifact, and says so."""
    with StandIn("/v1/chat/completions", _openai_reply) as stand_in:
        state = _run_plain(_openai(stand_in), runtime)
    messages = stand_in.bodies[1]["messages"]
    (tool,) = [m for m in messages if m["role"] == "tool"]
    sent = json.dumps(tool["content"])
    assert "[artifact] figure-1.png (image/png)" in sent
    assert "1 image not shown in this tool result" in sent
    assert "image_url" not in json.dumps(messages)
    assert "base64" not in json.dumps(messages)
    (message,) = [m for m in state if m.type == "tool"]
    (image,) = message.artifact["result"]["images"]
    _png(image["base64"])


def test_anthropic_without_middleware_gets_the_chart_in_the_tool_result(
    runtime: SandboxRuntime,
) -> None:
    with StandIn("/v1/messages", _anthropic_reply) as stand_in:
        state = _run_plain(_anthropic(stand_in), runtime)
    messages = stand_in.bodies[1]["messages"]
    result = _tool_result(messages)
    images = [b for b in result["content"] if b["type"] == "image"]
    assert len(images) == 1
    _png(images[0]["source"]["data"])
    assert json.dumps(messages).count('"type": "image"') == 1
    (message,) = [m for m in state if m.type == "tool"]
    assert "images" not in message.artifact["result"]  # stored once, in the content
