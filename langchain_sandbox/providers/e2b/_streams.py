"""The output of one E2B call as the SDK's callbacks deliver it: capped at the source, passed on
to the caller's callback, and, for code that calls host tools, with the tool frames taken out
of stdout before anything sees it (see `langchain_sandbox.providers.tool_channel.FrameFilter`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from langchain_sandbox.providers.base import OutputCallback
from langchain_sandbox.providers.tool_channel import FrameFilter
from langchain_sandbox.results import OutputCapture


class Streams:
    """Output of one call: capped at the source, and passed on to the caller's callback.

    Args:
        limit: Bytes kept per stream.
        on_output: The caller's callback, if any.
        frames: Takes tool frames out of stdout (code run with host tools).
    """

    def __init__(
        self, limit: int, on_output: OutputCallback | None, frames: FrameFilter | None = None
    ) -> None:
        self._captures = {"stdout": OutputCapture(limit), "stderr": OutputCapture(limit)}
        self._on_output = on_output
        self._frames = frames

    def sink(self, stream: Literal["stdout", "stderr"]) -> Callable[[Any], None]:
        """A callback for the SDK; it passes ``str`` (commands) or ``OutputMessage`` (code)."""

        def write(chunk: Any) -> None:
            text = chunk if isinstance(chunk, str) else str(getattr(chunk, "line", chunk))
            if stream == "stdout" and self._frames is not None:
                text = self._frames.feed(text)
            self._write(stream, text)

        return write

    def _write(self, stream: Literal["stdout", "stderr"], text: str) -> None:
        if not text:
            return
        self._captures[stream].write(text.encode())
        if self._on_output is not None:
            self._on_output(stream, text)

    def fields(self) -> dict[str, Any]:
        """The result's output fields, once the call has ended."""
        if self._frames is not None:
            self._write("stdout", self._frames.finish())
        out, err = self._captures["stdout"], self._captures["stderr"]
        return {
            "stdout": out.text(),
            "stderr": err.text(),
            "truncated": out.truncated or err.truncated,
            "omitted_bytes": out.omitted + err.omitted,
        }


__all__ = ["Streams"]
