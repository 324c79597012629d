"""The one output capper: a stream's first half-budget and its most recent bytes, nothing between.

It caps output everywhere a stream is read: on the host (the local provider rebuilds a call's
output with it, E2B's SDK streams through it) and inside every sandbox (the local worker loads
this file beside it, the Runloop and Kubernetes worker carries the class inline; see
`langchain_sandbox.providers.guest.packer`), so printing gigabytes costs bounded memory on either
side. Standard library only, with no import at all: the local worker's cold start loads it.
It lives at the package's root, below `langchain_sandbox.results` which names it publicly
(`langchain_sandbox.providers` imports `results`, so it cannot live under ``providers``).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_CAPTURE_BYTES = 1_000_000
"""How much of each stream a provider keeps (head and tail) before marking a result truncated."""


class OutputCapture:
    """A byte sink that keeps at most ``limit`` bytes: the first half and the most recent half.

    Providers feed streamed output through it so a run that prints gigabytes costs bounded memory;
    `omitted` counts what was dropped. ``on_head`` is given the head's bytes as they come (a
    worker forwards or echoes them live); only the tail waits for the end (`tail`).
    """

    def __init__(
        self, limit: int = DEFAULT_CAPTURE_BYTES, on_head: Callable[[bytes], object] | None = None
    ) -> None:
        self.limit = limit
        self._on_head = on_head
        self._head = bytearray()
        self._tail = bytearray()
        self.omitted = 0

    def write(self, data: bytes) -> None:
        room = self.limit // 2 - len(self._head)
        if room > 0:
            head = data[:room]
            self._head += head
            if self._on_head is not None and head:
                self._on_head(head)
            data = data[room:]
        if not data:
            return
        self._tail += data
        keep = self.limit - self.limit // 2
        excess = len(self._tail) - keep
        if excess > 0:
            del self._tail[:excess]
            self.omitted += excess

    @property
    def truncated(self) -> bool:
        return self.omitted > 0

    @property
    def tail(self) -> bytes:
        """The kept bytes after the head (what ``on_head`` has not been given)."""
        return bytes(self._tail)

    def text(self) -> str:
        """The kept bytes as text, with a marker line where bytes were dropped."""
        head = self._head.decode("utf-8", errors="replace")
        if not self.omitted:
            return head + self._tail.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        return f"{head}\n... [{self.omitted} bytes omitted] ...\n{tail}"


__all__ = ["DEFAULT_CAPTURE_BYTES", "OutputCapture"]
