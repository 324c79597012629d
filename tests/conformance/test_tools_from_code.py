"""Host tools called from code (``Session.run_code(..., tools=...)``), held against every
provider: where ``Capabilities.tools_from_code`` is set the code's calls reach the host's
``ToolHost`` in order and its replies come back as values or exceptions; elsewhere the call is
refused with a clear error."""

from __future__ import annotations

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
        if not session.capabilities.tools_from_code:
            with pytest.raises(ConfigurationError, match="cannot call host tools"):
                await session.run_code(code, tools=host)
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
