"""Tool calls as frames in an output stream the host already reads: E2B's kernel stdout, the
Runloop worker's (stdlib only, shipped into those sandboxes as source, like `guest`).

A call is a `tool_frame`; the host takes frames out of the output
(`langchain_sandbox.providers.tool_channel.FrameFilter`) and answers each with a JSON object
tagged with the call's ``seq``. How the answer comes back is the provider's: a file the host
writes (`FramedToolCalls`, E2B) or a relay that reads the command's stdin (`RelayedToolCalls`,
Runloop). Either is the ``call`` of a `langchain_sandbox.providers.guest.Tools`.
"""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TOOL_FRAME = "\x1elangchain_sandbox.tool:"
"""Starts a tool call's frame in a stream of output the host reads (E2B's kernel stdout, the Runloop
worker's): the JSON of the call follows, and a newline ends it."""


def tool_frame(seq: int, name: str, args: dict[str, Any]) -> str:
    """The frame of one tool call (`TOOL_FRAME`, the call's JSON, a newline). An argument JSON
    cannot hold travels as its ``repr``; the tool's schema on the host decides."""
    return TOOL_FRAME + json.dumps({"seq": seq, "name": name, "args": args}, default=repr) + "\n"


class RelayedToolCalls:
    """The transport of `Tools` where a relay carries frames out and replies in (the Runloop
    worker: the interpreter hands a `tool_frame` to ``send``, its short-lived client prints it
    and passes on the replies the host writes to its stdin, `relay_lines`; ``receive`` returns
    the next one). A reply to another call (a resend) is skipped.

    ``waits_on`` is ``(reply socket, listener)``: one call runs at a time, so a client that
    connects while the code waits for a reply means the host that waited is gone (it was
    killed; its replayed call is here). The call then stops the code, which the new call runs
    again.
    """

    def __init__(self, send: Any, receive: Any, waits_on: tuple[Any, Any]) -> None:
        self._send = send
        self._receive = receive
        self._waits_on = waits_on
        self._seq = 0

    def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        import select

        self._seq += 1
        self._send(tool_frame(self._seq, name, args))
        while True:
            ready = select.select(list(self._waits_on), [], [])[0]
            if self._waits_on[0] not in ready:
                return {"ok": False, "kind": "limit", "error": "the host of this call is gone"}
            reply = self._receive()
            if isinstance(reply, dict) and reply.get("seq") == self._seq:
                return reply


def relay_lines(fd: int, deliver: Any) -> None:
    """Read JSON lines from ``fd`` until its end and ``deliver`` each object (the Runloop
    client's stdin: the host's replies). Raw reads: a buffered ``sys.stdin`` would hold its
    lock in this thread at the process's exit."""
    pending = b""
    while chunk := os.read(fd, 1 << 20):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            try:
                deliver(json.loads(line))
            except (ValueError, OSError):
                continue


class FramedToolCalls:
    """The transport of `Tools` where the host reads the code's output stream but can only
    answer with a file (E2B's kernel): each call is a `tool_frame` written to ``stream``, and
    the host writes its reply, JSON, to ``{answers}-{seq}.json``, polled here.

    A file read half-written is not yet valid JSON, so it is read again. Past ``seconds`` (the
    outer call's timeout) a call is refused: a ``tools`` object left behind by a call that
    ended can never block code.
    """

    def __init__(self, stream: Any, answers: str, seconds: float) -> None:
        self._stream = stream
        self._answers = answers
        self._deadline = time.monotonic() + seconds
        self._seq = 0

    def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if time.monotonic() > self._deadline:
            return {"ok": False, "kind": "limit", "error": "the call these tools belong to ended"}
        self._seq += 1
        path = f"{self._answers}-{self._seq}.json"
        self._stream.write(tool_frame(self._seq, name, args))
        self._stream.flush()
        delay = 0.001
        while True:
            try:
                with open(path, encoding="utf-8") as handle:
                    reply = json.loads(handle.read())
                if isinstance(reply, dict) and reply.get("seq") == self._seq:
                    os.unlink(path)
                    return reply
            except (OSError, ValueError):
                pass
            time.sleep(delay)
            delay = min(delay * 2, 0.02)


__all__ = ["TOOL_FRAME", "FramedToolCalls", "RelayedToolCalls", "relay_lines", "tool_frame"]
