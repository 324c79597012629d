"""Tools called from code on E2B, over the channels a code call already has.

E2B's kernel speaks only through the ``/execute`` stream the SDK reads (and envd's file API), so:

* **the request** is a frame (`langchain_sandbox.providers.guest.tool_frames.tool_frame`) the code writes to
  its stdout, which the host reads as it streams and takes out of the output
  (`langchain_sandbox.providers.tool_channel.FrameFilter`);
* **the answer** is a file the host writes through envd (``POST /files``), named by a token of
  this call and the call's sequence number, under ``/tmp`` (never the workspace: no snapshot or
  listing sees it); the code polls it and deletes it
  (`langchain_sandbox.providers.guest.tool_frames.FramedToolCalls`).

Nothing listens in the sandbox. The ``tools`` object is made by a kernel call before the user's
code and removed by one after it; it lives in ``builtins``, not in the user's globals, so a
variables dump never holds it, and one left behind (the host died in between) refuses calls
once the call's timeout has passed. The host side (validation, the run's config, the journal,
the limits) is the one every provider shares: a `ToolHost` behind `ToolEvents`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import TYPE_CHECKING, Any

from langchain_sandbox.errors import SandboxError
from langchain_sandbox.providers.base import OutputCallback
from langchain_sandbox.providers.guest import cells as guest
from langchain_sandbox.providers.guest import packer
from langchain_sandbox.providers.guest import tool_frames as guest_tool_frames
from langchain_sandbox.providers.tool_channel import FrameFilter, ToolEvents, ToolHost
from langchain_sandbox.results import ExecutionResult

if TYPE_CHECKING:
    from langchain_sandbox.providers.e2b.session import E2BSession

ANSWERS_PREFIX = "/tmp/.langchain_sandbox-tool-"
"""Answer files are ``{ANSWERS_PREFIX}{token}-{seq}.json``."""

_REMOVE = "    ops.remove_tools()\n"


def _install(specs: list[dict[str, Any]], answers: str, seconds: float) -> str:
    """Kernel lines that make the ``tools`` object of one call (run by ``_kernel_call``, which
    has the named operations in scope as ``ops``): the guest modules it needs, then one call."""
    return (
        "    g = module({!r}, {!r})\n".format(*packer.shipped_module(guest))
        + "    f = module({!r}, {!r})\n".format(*packer.shipped_module(guest_tool_frames))
        + f"    ops.install_tools(g, f, {json.dumps(specs)!r}, {answers!r}, {seconds!r})\n"
    )


async def run_code_with_tools(
    session: E2BSession,
    code: str,
    *,
    timeout: float,
    env: dict[str, str],
    on_output: OutputCallback | None,
    tools: ToolHost,
) -> ExecutionResult:
    """``run_code`` whose code may call ``tools`` (see the module docstring)."""
    answers = ANSWERS_PREFIX + uuid.uuid4().hex
    # The guest modules' sources are read from files the first time: off the event loop.
    install = await asyncio.to_thread(_install, tools.specs, answers, timeout)
    await _kernel(session, install, "make the tools callable")

    async def answer(event: dict[str, Any], reply: dict[str, Any]) -> None:
        path, data = f"{answers}-{reply['seq']}.json", json.dumps(reply).encode()
        await session._provider._retry(
            # A raw body: a multipart one would have httpx guess a type (mimetypes reads
            # the system's tables, blocking, the first time).
            "answer a tool call",
            lambda: session._sandbox.files.write(path, data, use_octet_stream=True),
        )

    try:
        async with ToolEvents(tools, answer) as events:
            return await session._run_code(
                code,
                timeout=timeout,
                env=env,
                on_output=on_output,
                frames=FrameFilter(events.on_event),
            )
    finally:
        with contextlib.suppress(SandboxError):
            await _kernel(session, _REMOVE, "remove the tools")


async def _kernel(session: E2BSession, body: str, what: str) -> None:
    from langchain_sandbox.providers.e2b._kernel import _MARKER

    await session._kernel_call(f"{body}    print({_MARKER!r})\n", what, kernel_state=False)


__all__ = ["ANSWERS_PREFIX", "run_code_with_tools"]
