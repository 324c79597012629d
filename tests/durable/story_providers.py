"""Where the sandboxes of a cross-process story run: the local provider, or E2B, Runloop or
Kubernetes through their real SDKs against the emulators of ``langchain_sandbox.testing``.

An emulator runs in the test's process, so its sandboxes outlive the worker processes (and their
SIGKILL) as the real services' do; the workers find it through the SDK's own environment
settings, and the test opens a port URL they were given with `StoryProvider.open_url`. `StoryProvider.lose_every_sandbox` is the story's "the sandbox is gone" (its timeout
ran out): a no-op on the local provider, whose sandboxes die with their process anyway.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from process_helpers import URLOpener, open_directly, through_edge

from langchain_sandbox.testing.e2b_emulator import E2BEmulator
from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

PROVIDERS = ("local", "e2b", "runloop", "kubernetes")
# The host's own settings would point a worker at a real service.
_HOST_SETTINGS = ("E2B_DOMAIN", "E2B_ACCESS_TOKEN", "RUNLOOP_CUSTOM_HEADERS")


@dataclass(frozen=True)
class StoryProvider:
    """The ``--provider`` of a story's workers, their environment (``None``: this process's),
    how to make every sandbox of the provider gone, and how to GET a port URL a worker was given
    (a remote one only resolves through the emulator's edge)."""

    name: str
    env: dict[str, str] | None
    lose_every_sandbox: Callable[[], None]
    open_url: URLOpener

    @property
    def worker_args(self) -> tuple[str, ...]:
        return ("--provider", self.name)

    @property
    def sandboxes_outlive_their_process(self) -> bool:
        """A killed worker's sandbox lives on (a remote one), for the next process to attach."""
        return self.name != "local"


def _env(settings: dict[str, str]) -> dict[str, str]:
    host = {k: v for k, v in os.environ.items() if k not in _HOST_SETTINGS}
    return {**host, **settings}


@contextlib.contextmanager
def running_provider(name: str) -> Iterator[StoryProvider]:
    """The provider ``name`` of `PROVIDERS`, with its emulator running for the block."""
    if name == "local":
        yield StoryProvider("local", None, lambda: None, open_directly)
    elif name == "e2b":
        with E2BEmulator(api_key="e2b_" + uuid.uuid4().hex) as e2b:

            def expire_e2b() -> None:
                for sandbox_id in e2b.sandbox_ids():
                    e2b.expire(sandbox_id)

            yield StoryProvider("e2b", _env(e2b.env()), expire_e2b, through_edge(e2b))
    elif name == "runloop":
        with RunloopEmulator(api_key="rl-" + uuid.uuid4().hex) as runloop:

            def expire_runloop() -> None:
                for devbox in runloop.account.listing():
                    if devbox.status != "shutdown":
                        runloop.expire(devbox.id)

            yield StoryProvider(
                "runloop", _env(runloop.env()), expire_runloop, through_edge(runloop)
            )
    elif name == "kubernetes":
        with KubernetesEmulator() as cluster:

            def delete_every_claim() -> None:
                for claim in cluster.claims():
                    cluster.delete_claim(claim)

            # No port URL to open: the provider has no ports (Capabilities.ports is False).
            yield StoryProvider(
                "kubernetes", _env(cluster.env()), delete_every_claim, open_directly
            )
    else:
        raise ValueError(f"no story provider {name!r}")


__all__ = ["PROVIDERS", "StoryProvider", "running_provider"]
