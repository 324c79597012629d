"""Credentials the Runloop tests use; the live key is read once, at import, before any fixture
changes the environment."""

from __future__ import annotations

import os

LIVE_KEY = os.environ.get("RUNLOOP_API_KEY", "")

FAKE_KEY = "rl-test-key-5f1e0c9a7d3b-never-leak"
"""A distinctive key: tests assert it appears in no record, result or log line."""
