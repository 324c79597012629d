"""Where an emulator's machines come from: the event-loop thread their async API runs on, and the
provider whose sessions play the emulated sandboxes (a local provider in a temporary directory
unless the emulator was given one, its egress going to ``egress_upstream`` where a test names
one, and then closed with the emulator)."""

from __future__ import annotations

import contextlib
import tempfile
from typing import TYPE_CHECKING

from langchain_sandbox.core._event_loop import LoopThread
from langchain_sandbox.providers.base import Provider

if TYPE_CHECKING:
    from langchain_sandbox.providers.local import EgressUpstream


class MachineHost:
    """The loop thread and the machines' provider of one running emulator."""

    def __init__(
        self, name: str, machines: Provider | None, *, egress_upstream: EgressUpstream | None = None
    ) -> None:
        self.loop = LoopThread(name=name)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if machines is None:
            from langchain_sandbox.providers.local import LocalProvider

            self._tmp = tempfile.TemporaryDirectory(prefix=f"{name}-")
            machines = LocalProvider(base_dir=self._tmp.name, egress_upstream=egress_upstream)
        self.machines = machines

    def stop(self) -> None:
        """Close the provider this host made (not one it was given) and stop the loop."""
        if self._tmp is not None:
            with contextlib.suppress(Exception):
                self.loop.run_sync(self.machines.aclose())
        self.loop.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


__all__ = ["MachineHost"]
