"""Who closes a runtime: the one ownership rule of sandbox tools and toolkits.

A runtime passed in (``runtime=``) or found per call (the run's context, ``configurable``, the
process-wide default) belongs to someone else and is never closed by a tool. A runtime built for
``provider=`` belongs to the tool or toolkit that built it: it is built once, under a lock
(``ToolNode`` calls tools from several worker threads at once), rebuilt if it was closed, and
closed (its sandboxes destroyed) by that owner's ``close()`` / ``aclose()``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from langchain_sandbox.providers.base import Provider
from langchain_sandbox.runtime import SandboxRuntime


class RuntimeOwner:
    """Holds the runtime a tool or toolkit built for ``provider=``; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runtime: SandboxRuntime | None = None

    def resolve(
        self,
        runtime: SandboxRuntime | None,
        provider: str | Provider | None,
        options: Mapping[str, Any] | None,
    ) -> SandboxRuntime | None:
        """The runtime given, else the one owned for ``provider`` (built on first use or after a
        close), else ``None`` (the caller finds one per call)."""
        if runtime is not None:
            return runtime
        if provider is None:
            return None
        with self._lock:
            if self._runtime is None or self._runtime.closed:
                self._runtime = SandboxRuntime(provider, provider_options=options)
            return self._runtime

    def close(self) -> None:
        """Close the owned runtime, if one was built. Idempotent."""
        with self._lock:
            owned, self._runtime = self._runtime, None
        if owned is not None:
            owned.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        with self._lock:
            owned, self._runtime = self._runtime, None
        if owned is not None:
            await owned.aclose()


__all__ = ["RuntimeOwner"]
