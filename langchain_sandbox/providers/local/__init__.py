"""The local provider: isolated sandboxes on this machine with bubblewrap (the default).

See ``docs/local-provider.md`` for the settings and ``docs/isolation.md`` for what is protected.
"""

from __future__ import annotations

from langchain_sandbox.providers.local._egress_proxy import EgressUpstream
from langchain_sandbox.providers.local._packages import PackageIndex
from langchain_sandbox.providers.local._probe import (
    IsolationReport,
    isolation_levels,
    probe_isolation,
)
from langchain_sandbox.providers.local._worker_replies import WORKER_RESTARTED
from langchain_sandbox.providers.local.environments import (
    DEFAULT_ENVIRONMENT,
    HOST_ENVIRONMENT,
    EnvironmentStatus,
    SandboxEnvironment,
)
from langchain_sandbox.providers.local.provider import HOME_ENV, LocalProvider, default_base_dir
from langchain_sandbox.providers.local.session import (
    INTERRUPT_GRACE,
    LOCAL_CAPABILITIES,
    LocalSession,
)

__all__ = [
    "DEFAULT_ENVIRONMENT",
    "HOME_ENV",
    "HOST_ENVIRONMENT",
    "INTERRUPT_GRACE",
    "LOCAL_CAPABILITIES",
    "WORKER_RESTARTED",
    "EgressUpstream",
    "EnvironmentStatus",
    "IsolationReport",
    "LocalProvider",
    "LocalSession",
    "PackageIndex",
    "SandboxEnvironment",
    "default_base_dir",
    "isolation_levels",
    "probe_isolation",
]
