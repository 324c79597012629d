"""The host side of a local sandbox process's output: bounded captures of stdout and stderr, and
the same bytes decoded for an ``on_output`` callback while the process runs."""

from __future__ import annotations

import codecs
from typing import Any, Literal

from langchain_sandbox.providers.base import OutputCallback
from langchain_sandbox.providers.guest_facts import checked_dropped
from langchain_sandbox.results import OutputCapture


class OutputStreams:
    """Host side of one call's output: bounded captures plus decoded chunks for ``on_output``.

    The worker already caps each stream inside the sandbox, but user code can write forged
    output events to the event pipe, so the host holds the same cap itself: at most ``limit``
    bytes per stream reach ``on_output``, and the captures keep head and tail as always.
    """

    def __init__(self, limit: int, on_output: OutputCallback | None) -> None:
        self.captures = {"stdout": OutputCapture(limit), "stderr": OutputCapture(limit)}
        self._on_output = on_output
        self._limit = limit
        self._forwarded = dict.fromkeys(self.captures, 0)
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in self.captures
        }

    def on_event(self, event: dict[str, Any]) -> None:
        """One output event of the worker (``{"stream": ..., "data": <latin-1 text>}``)."""
        stream = event.get("stream")
        if stream in self.captures:
            self.write(stream, str(event.get("data", "")).encode("latin-1", errors="replace"))

    def write(self, stream: Literal["stdout", "stderr"], data: bytes) -> None:
        """Bytes a process wrote to ``stream``: captured, and passed on decoded (up to the cap)."""
        self.captures[stream].write(data)
        room = self._limit - self._forwarded[stream]
        if self._on_output is not None and room > 0:
            data = data[:room]
            self._forwarded[stream] += len(data)
            text = self._decoders[stream].decode(data)
            if text:
                self._on_output(stream, text)

    def result_fields(self, dropped: Any) -> dict[str, Any]:
        for name, count in checked_dropped(dropped).items():
            # Bytes the worker already dropped inside the sandbox count as omitted too (its
            # count, bounded: the host cannot measure what never left the sandbox).
            self.captures[name].omitted += count
        omitted = sum(c.omitted for c in self.captures.values())
        return {
            "stdout": self.captures["stdout"].text(),
            "stderr": self.captures["stderr"].text(),
            "truncated": omitted > 0,
            "omitted_bytes": omitted,
        }


__all__ = ["OutputStreams"]
