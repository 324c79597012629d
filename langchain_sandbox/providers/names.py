"""The names providers go by, spelled once: in records, errors, ``get_provider`` and the CLI."""

from __future__ import annotations

LOCAL = "local"
E2B = "e2b"
RUNLOOP = "runloop"

PROVIDER_NAMES = (LOCAL, E2B, RUNLOOP)
"""Every built-in provider, the default first."""

__all__ = ["E2B", "LOCAL", "PROVIDER_NAMES", "RUNLOOP"]
