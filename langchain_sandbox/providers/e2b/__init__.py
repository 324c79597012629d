"""The E2B provider: sessions on E2B cloud sandboxes (``pip install 'langchain-sandbox[e2b]'``).

See ``docs/providers/e2b.md``. The SDK is imported only when a provider is built.
"""

from __future__ import annotations

from langchain_sandbox.providers.e2b.provider import (
    CAPABILITIES,
    SESSION_KEY,
    TAG_KEY,
    E2BProvider,
    E2BSession,
)

__all__ = ["CAPABILITIES", "SESSION_KEY", "TAG_KEY", "E2BProvider", "E2BSession"]
