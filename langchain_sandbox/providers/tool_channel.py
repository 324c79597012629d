"""What a session needs to let sandboxed code call host tools, whatever carries the messages.

The code calls ``tools.name(**args)`` (`langchain_sandbox.providers.guest.Tools`); the provider's
channel carries a *tool event* ``{"seq", "name", "args"}`` to the host and the host's reply back.
The session hands each event to a [`ToolHost`][langchain_sandbox.providers.tool_channel.ToolHost]
(`langchain_sandbox.tools.from_code.ToolBridge` is the one the tools build) and sends its reply,
tagged with the event's ``seq``. The sandbox is not trusted: an event is checked here, and a
malformed one is answered with an error instead of reaching a tool.

Where the channel is an output stream the host already reads (E2B's kernel stdout, the Runloop
worker's), the events travel as frames inside it (`langchain_sandbox.providers.guest.tool_frames`):
`FrameFilter` takes them out, so the caller's output never shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from langchain_sandbox.providers.guest.tool_frames import TOOL_FRAME

logger = logging.getLogger(__name__)

MAX_FRAME_CHARS = 64 * 1024 * 1024
"""A frame longer than this is not one (no call's arguments are that large): it is output."""


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
        answer: Sends a reply (with its ``seq``) to the sandbox: ``answer(event, reply)``; a
            coroutine function where sending is I/O (a file or a command's stdin).
    """

    def __init__(
        self,
        host: ToolHost,
        answer: Callable[[dict[str, Any], dict[str, Any]], Awaitable[None] | None],
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
        try:
            sent = self._answer(event, {**reply, "seq": seq})
            if inspect.isawaitable(sent):
                await sent
        except Exception:
            # The code waits for this reply until the call's timeout, which its result tells.
            logger.warning("the reply to tool call %s could not be sent", seq, exc_info=True)

    async def __aenter__(self) -> ToolEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def held_back(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` could begin ``marker``: a stream is read in
    chunks, and a marker may be split across two."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class FrameFilter:
    """Takes tool frames out of a stream of output, chunk by chunk, and hands each one's event
    to ``on_event`` (a frame that is not a JSON object gives an empty event, which
    `ToolEvents` leaves unanswered: no call waits for it).

    User code writes to the same stream, so it can write a frame too: that is one more tool
    call it could have made anyway, checked like any other.
    """

    def __init__(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        self._on_event = on_event
        self._pending = ""

    def feed(self, text: str) -> str:
        """The output in ``text`` (and in what earlier chunks held back), frames taken out."""
        pending = self._pending + text
        passed: list[str] = []
        while (start := pending.find(TOOL_FRAME)) >= 0:
            end = pending.find("\n", start)
            if end < 0:
                if len(pending) - start > MAX_FRAME_CHARS:
                    break  # output that merely starts like a frame
                passed.append(pending[:start])
                self._pending = pending[start:]
                return "".join(passed)
            passed.append(pending[:start])
            self._frame(pending[start + len(TOOL_FRAME) : end])
            pending = pending[end + 1 :]
        keep = held_back(pending, TOOL_FRAME)
        passed.append(pending[: len(pending) - keep])
        self._pending = pending[len(pending) - keep :]
        return "".join(passed)

    def finish(self) -> str:
        """What was held back when the stream ended: output, not a frame."""
        rest, self._pending = self._pending, ""
        return rest

    def _frame(self, body: str) -> None:
        try:
            event = json.loads(body)
        except ValueError:
            event = None
        self._on_event(event if isinstance(event, dict) else {})


__all__ = ["FrameFilter", "ToolEvents", "ToolHost", "error_reply", "held_back"]
