"""The local provider: isolated sandboxes on this machine with bubblewrap (the default).

See ``docs/local-provider.md`` for the settings and ``docs/isolation.md`` for what is protected.
"""

from __future__ import annotations

from langchain_sandbox.providers.local._packages import PackageIndex
from langchain_sandbox.providers.local._probe import IsolationReport, probe_isolation
from langchain_sandbox.providers.local.provider import HOME_ENV, LocalProvider, default_base_dir
from langchain_sandbox.providers.local.session import (
    INTERRUPT_GRACE,
    LOCAL_CAPABILITIES,
    WORKER_RESTARTED,
    LocalSession,
)

__all__ = [
    "HOME_ENV",
    "INTERRUPT_GRACE",
    "LOCAL_CAPABILITIES",
    "WORKER_RESTARTED",
    "IsolationReport",
    "LocalProvider",
    "LocalSession",
    "PackageIndex",
    "default_base_dir",
    "probe_isolation",
]
