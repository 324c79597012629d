"""What a session needs to let sandboxed code call host tools, whatever carries the messages.

The code calls ``tools.name(**args)`` (`langchain_sandbox.providers.guest.Tools`); the provider's
channel carries a *tool event* ``{"seq", "name", "args"}`` to the host and the host's reply back.
The session hands each event to a [`ToolHost`][langchain_sandbox.providers.tool_channel.ToolHost]
(`langchain_sandbox.tools.from_code.ToolBridge` is the one the tools build) and sends its reply,
tagged with the event's ``seq``. The sandbox is not trusted: an event is checked here, and a
malformed one is answered with an error instead of reaching a tool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ToolHost(Protocol):
    """The host side of tools called from code, for one ``run_code`` call."""

    @property
    def specs(self) -> list[dict[str, Any]]:
        """What the guest's ``tools`` object is built from: ``{"name", "params"}`` per tool."""
        ...

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run tool ``name``; the reply is ``{"ok": True, "value"}`` or
        ``{"ok": False, "kind", "error"}``, JSON-safe, and never raises for the tool's faults."""
        ...

    def notices(self) -> list[str]:
        """Notices for the call's result (a limit that stopped inner calls), once it ended."""
        ...


def error_reply(kind: str, message: str) -> dict[str, Any]:
    """A reply that raises in the code: ``kind`` ``"limit"`` raises ``ToolLimitError``, any
    other ``ToolError`` with ``message``."""
    return {"ok": False, "kind": kind, "error": message}


class ToolEvents:
    """Runs the tool events of one request while it is in flight, and drops what is left when
    it ends (``async with``): a result can never reach a later request.

    Args:
        host: Runs the tools.
        answer: Sends a reply (with its ``seq``) to the sandbox: ``answer(event, reply)``.
    """

    def __init__(
        self, host: ToolHost, answer: Callable[[dict[str, Any], dict[str, Any]], None]
    ) -> None:
        self._host = host
        self._answer = answer
        self._tasks: set[asyncio.Task[None]] = set()

    def on_event(self, event: dict[str, Any]) -> None:
        """Take one ``tool`` event (called on the loop that reads the channel)."""
        task = asyncio.get_running_loop().create_task(self._run(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, event: dict[str, Any]) -> None:
        seq, name, args = event.get("seq"), event.get("name"), event.get("args")
        if type(seq) is not int:
            return  # nothing to answer to: no code waits for an unnumbered call
        if not isinstance(name, str) or not isinstance(args, dict):
            reply = error_reply("invalid", "a tool call needs a tool name and keyword arguments")
        else:
            reply = await self._host.call(name, args)
        self._answer(event, {**reply, "seq": seq})

    async def __aenter__(self) -> ToolEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


__all__ = ["ToolEvents", "ToolHost", "error_reply"]
