"""The one way the tests stand up an emulated provider: the emulator of a provider's API (E2B,
Runloop, or a Kubernetes cluster running agent-sandbox) from ``langchain_sandbox.testing``, and
that provider pointed at it by its constructor arguments only (the host's settings are never
read), or a runtime on it.

```python
async with emulated_provider("runloop", retry_deadline=10.0) as (emulator, provider):
    ...
with emulated_runtime("e2b") as runtime:
    ...
```

Emulator options (``api_key``, ``network``, ``egress_upstream``...) go in ``emulator={...}``; the
other keyword arguments go to the provider. An E2B emulator gets an API key unless one is given
(``api_key=None`` for none), so the provider's key is checked on every control-plane request.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_sandbox.providers.base import Provider
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.testing.e2b_emulator import E2BEmulator
from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

EMULATED = ("e2b", "runloop", "kubernetes")
"""The providers that have an emulator, by name."""

Emulator = E2BEmulator | RunloopEmulator | KubernetesEmulator


def new_emulator(name: str, **options: Any) -> Emulator:
    """A fresh emulator (not started) of the provider ``name``; ``options`` go to it."""
    if name == "e2b":
        options.setdefault("api_key", "e2b_" + uuid.uuid4().hex)
        return E2BEmulator(**options)
    if name == "runloop":
        return RunloopEmulator(**options)
    if name == "kubernetes":
        return KubernetesEmulator(**options)
    raise ValueError(f"no emulator for {name!r}; emulated: {', '.join(EMULATED)}")


@contextlib.asynccontextmanager
async def provider_on(emulator: Emulator, **options: Any) -> AsyncIterator[Any]:
    """The provider pointed at a running ``emulator`` (``options`` go to it), closed on exit."""
    provider: Provider = emulator.provider(**options)
    try:
        yield provider
    finally:
        await provider.aclose()


@contextlib.asynccontextmanager
async def emulated_provider(
    name: str, *, emulator: dict[str, Any] | None = None, **provider_options: Any
) -> AsyncIterator[tuple[Any, Any]]:
    """``(emulator, provider)``: a running emulator and the provider pointed at it, both closed
    on exit."""
    async with (
        new_emulator(name, **(emulator or {})) as running,
        provider_on(running, **provider_options) as provider,
    ):
        yield running, provider


@contextlib.contextmanager
def emulated_runtime(
    name: str,
    *,
    emulator: dict[str, Any] | None = None,
    provider: dict[str, Any] | None = None,
    **runtime_options: Any,
) -> Iterator[SandboxRuntime]:
    """A runtime on the provider ``name`` pointed at a running emulator, both closed on exit;
    ``provider`` holds the provider's options, the other keyword arguments go to the runtime."""
    with new_emulator(name, **(emulator or {})) as running:
        runtime = SandboxRuntime(running.provider(**(provider or {})), **runtime_options)
        try:
            yield runtime
        finally:
            runtime.close()


__all__ = [
    "EMULATED",
    "Emulator",
    "emulated_provider",
    "emulated_runtime",
    "new_emulator",
    "provider_on",
]
