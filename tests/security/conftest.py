"""Fixtures of the security suite: the local provider's own (real bubblewrap sandboxes under a
temporary base dir), shared rather than repeated."""

from __future__ import annotations

from local.conftest import provider, session

__all__ = ["provider", "session"]
