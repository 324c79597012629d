"""The Runloop provider: sessions on Runloop devboxes (``pip install 'langchain-sandbox[runloop]'``).

See ``docs/providers/runloop.md``. The SDK is imported only when a provider is built.
"""

from __future__ import annotations

from langchain_sandbox.providers.remote import SESSION_KEY, TAG_KEY
from langchain_sandbox.providers.runloop.provider import (
    CAPABILITIES,
    RunloopProvider,
    RunloopSession,
)
from langchain_sandbox.providers.worker_session import WORKER_DIR

__all__ = [
    "CAPABILITIES",
    "SESSION_KEY",
    "TAG_KEY",
    "WORKER_DIR",
    "RunloopProvider",
    "RunloopSession",
]
