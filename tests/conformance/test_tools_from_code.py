"""Host tools called from code (``Session.run_code(..., tools=...)``), held against every
provider: where ``Capabilities.tools_from_code`` is set the code's calls reach the host's
``ToolHost`` in order and its replies come back as values or exceptions; elsewhere the call is
refused with a clear error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from langchain_sandbox.errors import ConfigurationError
from langchain_sandbox.providers.base import Provider
from langchain_sandbox.providers.tool_channel import error_reply


class _EchoHost:
    """A ToolHost that answers ``echo`` with its arguments and fails ``fail``."""

    specs = [{"name": "echo", "params": ["text"]}, {"name": "fail", "params": []}]

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, args))
        if name == "echo":
            return {"ok": True, "value": {"got": args}}
        return error_reply("tool", "it failed on purpose")

    def notices(self) -> list[str]:
        return ["host notice"]


async def test_code_calls_the_hosts_tools(provider: Provider) -> None:
    host = _EchoHost()
    async with await provider.create() as session:
        code = (
            "a = tools.echo('hi')\n"
            "b = tools.echo(text=[1, 2.5, None])\n"
            "try:\n    tools.fail()\nexcept tools.ToolError as exc:\n    c = str(exc)\n"
            "(a, b, c)"
        )
        if await _refused(session, code, host):
            return
        result = await session.run_code(code, tools=host)
        assert result.ok, result.render()
        assert result.value == (
            "({'got': {'text': 'hi'}}, {'got': {'text': [1, 2.5, None]}}, 'it failed on purpose')"
        )
        assert host.calls == [
            ("echo", {"text": "hi"}),
            ("echo", {"text": [1, 2.5, None]}),
            ("fail", {}),
        ]
        assert "host notice" in result.notices
        # The tools object belonged to that call: the next call without tools has none.
        after = await session.run_code("try:\n    tools\nexcept NameError:\n    r = 'gone'\nr")
        assert after.ok, after.render()
        assert after.value == "'gone'"


async def _refused(session: Any, code: str, host: _EchoHost) -> bool:
    """Whether ``session``'s provider lacks ``tools_from_code``; there, checks the clear refusal."""
    if session.capabilities.tools_from_code:
        return False
    with pytest.raises(ConfigurationError, match="cannot call host tools"):
        await session.run_code(code, tools=host)
    assert host.calls == []
    return True


class _SlowHost(_EchoHost):
    """``echo`` answers a large value; ``hang`` never answers within the call's timeout."""

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, args))
        if name == "hang":
            await asyncio.sleep(3600)
        return {"ok": True, "value": "x" * 300_000}

    specs = [{"name": "echo", "params": ["text"]}, {"name": "hang", "params": []}]


async def test_tool_frames_never_reach_the_output_and_large_replies_arrive_whole(
    provider: Provider,
) -> None:
    host = _SlowHost()
    seen: list[tuple[str, str]] = []
    async with await provider.create() as session:
        code = (
            "import asyncio, sys\n"
            "print('before', end='')\n"
            "a = tools.echo('one')\n"
            "print('after')\n"
            "b = asyncio.run(tools.aecho(text='two'))\n"
            "print('err', file=sys.stderr)\n"
            "(len(a), len(b))"
        )
        if await _refused(session, code, host):
            return
        result = await session.run_code(
            code, tools=host, on_output=lambda stream, text: seen.append((stream, text))
        )
        assert result.ok, result.render()
        assert result.value == "(300000, 300000)"
        assert result.stdout == "beforeafter\n"
        assert result.stderr == "err\n"
        assert "".join(text for stream, text in seen if stream == "stdout") == "beforeafter\n"
        assert [name for name, _ in host.calls] == ["echo", "echo"]


async def test_a_tool_that_outlives_the_timeout_stops_the_call_not_the_session(
    provider: Provider,
) -> None:
    host = _SlowHost()
    async with await provider.create() as session:
        if await _refused(session, "tools.hang()", host):
            return
        await session.run_code("kept = 41")
        result = await session.run_code("tools.hang()", tools=host, timeout=3)
        assert result.timed_out, result.render()
        again = await session.run_code("len(tools.echo('x')) + kept", tools=host)
        assert again.ok, again.render()
        assert again.value == "300041"
