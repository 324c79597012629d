"""Tools called from code on Runloop, over the execution a code call already is; and how the
host reads an execution's live output (the answer line cut off, tool frames taken out).

A code call is one ``execute_async`` of the devbox worker's client, which hands the cell to the
interpreter and prints what it streams back. With host tools:

* **the request**: the interpreter hands the client a frame
  (`langchain_sandbox.providers.guest.tool_frames.tool_frame`), which it prints; the host follows
  the execution's stdout (SSE) and takes the frame out
  (`langchain_sandbox.providers.tool_channel.FrameFilter`);
* **the answer**: the execution is started with ``attach_stdin``, and the host writes the reply,
  one JSON line, with ``send_std_in``; the client passes it on to the interpreter.

Nothing listens in the devbox beyond what a code call already uses. ``send_std_in`` is sent once
(a retry could deliver a line twice); the interpreter skips a reply to another call anyway. The
host side (validation, the run's config, the journal, the limits) is the one every provider
shares: a `ToolHost` behind `ToolEvents`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, Literal

from langchain_sandbox.providers.base import OutputCallback
from langchain_sandbox.providers.tool_channel import FrameFilter, ToolEvents, ToolHost
from langchain_sandbox.providers.worker_session import AnswerCut
from langchain_sandbox.results import ExecutionResult

if TYPE_CHECKING:
    from langchain_sandbox.providers.runloop.session import RunloopSession

logger = logging.getLogger(__name__)


class StdinReplies:
    """The tool channel of one code execution: frames read from its stdout go to the
    `ToolEvents` of ``frames``, replies go to its stdin.

    Args:
        session: The devbox's session.
        specs: What the code's ``tools`` object is made of (`ToolHost.specs`).
    """

    def __init__(self, session: RunloopSession, specs: list[dict[str, Any]]) -> None:
        self._session = session
        self.specs = specs
        self.frames: FrameFilter | None = None
        self.execution_id: str | None = None

    async def answer(self, event: dict[str, Any], reply: dict[str, Any]) -> None:
        if self.execution_id is None:
            return  # no execution to answer (it was never started)
        session = self._session
        async with session._provider._errors("send_std_in"):
            await session._api().devboxes.executions.send_std_in(
                self.execution_id, devbox_id=session.devbox_id, text=json.dumps(reply) + "\n"
            )


async def follow(
    session: RunloopSession,
    execution_id: str,
    name: Literal["stdout", "stderr"],
    on_output: OutputCallback | None,
    tools: StdinReplies | None = None,
) -> None:
    """Follow one output stream of an execution (SSE) until the worker's answer line: pass its
    output to ``on_output`` and, on stdout, its tool frames to ``tools``."""
    executions = session._api().devboxes.executions
    opener = (
        executions.stream_stdout_updates if name == "stdout" else executions.stream_stderr_updates
    )
    answer = AnswerCut() if name == "stdout" else None
    frames = tools.frames if tools is not None and name == "stdout" else None
    try:
        updates = await opener(execution_id, devbox_id=session.devbox_id)
        async with updates:
            async for chunk in updates:
                # Frames first: the answer cut holds back a trailing newline, which ends a frame.
                text = frames.feed(chunk.output) if frames is not None else chunk.output
                text = answer.feed(text) if answer else text
                if text and on_output is not None:
                    on_output(name, text)
                if answer is not None and answer.done:
                    return
    except asyncio.CancelledError:
        raise
    except Exception:
        # Live output is a courtesy (the result carries all of it); a tool call that was not
        # seen leaves the code waiting until its timeout, which the result then tells.
        logger.debug("following %s of execution %s stopped", name, execution_id, exc_info=True)


async def run_code_with_tools(
    session: RunloopSession,
    code: str,
    *,
    timeout: float,
    env: dict[str, str],
    on_output: OutputCallback | None,
    tools: ToolHost,
) -> ExecutionResult:
    """``run_code`` whose code may call ``tools`` (see the module docstring)."""
    replies = StdinReplies(session, tools.specs)
    async with ToolEvents(tools, replies.answer) as events:
        replies.frames = FrameFilter(events.on_event)
        return await session._run_code(
            code, timeout=timeout, env=env, on_output=on_output, tools=replies
        )


__all__ = ["StdinReplies", "follow", "run_code_with_tools"]
