"""Isolated, durable code execution for LangChain agents and LangGraph graphs.

```python
from langchain.agents import create_agent
from langchain_sandbox import SandboxExecTool

agent = create_agent(model, tools=[SandboxExecTool()])  # a local, isolated sandbox; no API key
```

The LangChain and LangGraph layers (tools, runtime, graph glue, middleware) are imported lazily on
first use, so ``import langchain_sandbox`` stays cheap and never needs an optional extra
(``langchain`` for the middleware, the E2B and Runloop SDKs for their providers).
"""

from __future__ import annotations

import importlib
from typing import Any

from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    InvalidPackageNameError,
    InvalidPathError,
    IsolationUnavailableError,
    MissingDependencyError,
    ProviderUnavailableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
    SessionClosedError,
    SnapshotNotFoundError,
    UnsafeArchiveError,
)
from langchain_sandbox.providers import get_provider
from langchain_sandbox.providers.base import (
    Capabilities,
    FileInfo,
    Limits,
    Provider,
    Session,
    SessionRecord,
    SessionSpec,
)
from langchain_sandbox.results import Artifact, ExecutionError, ExecutionResult

_LAZY: dict[str, str] = {}

__all__ = [
    "Artifact",
    "AuthenticationError",
    "Capabilities",
    "ExecutionError",
    "ExecutionResult",
    "FileInfo",
    "InvalidInputError",
    "InvalidPackageNameError",
    "InvalidPathError",
    "IsolationUnavailableError",
    "Limits",
    "MissingDependencyError",
    "Provider",
    "ProviderUnavailableError",
    "QuotaExceededError",
    "SandboxError",
    "SandboxGoneError",
    "SandboxTimeoutError",
    "Session",
    "SessionClosedError",
    "SessionRecord",
    "SessionSpec",
    "SnapshotNotFoundError",
    "UnsafeArchiveError",
    "get_provider",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'langchain_sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
