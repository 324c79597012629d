"""The names providers go by, spelled once: in records, errors, ``get_provider`` and the CLI."""

from __future__ import annotations

LOCAL = "local"
E2B = "e2b"
RUNLOOP = "runloop"
KUBERNETES = "kubernetes"

PROVIDER_NAMES = (LOCAL, E2B, RUNLOOP, KUBERNETES)
"""Every built-in provider, the default first."""

__all__ = ["E2B", "KUBERNETES", "LOCAL", "PROVIDER_NAMES", "RUNLOOP"]
