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
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from langchain_sandbox.errors import (
    AuthenticationError,
    CapabilityError,
    CheckpointerUnavailableError,
    ConfigurationError,
    EnvironmentBuildError,
    InvalidInputError,
    InvalidPackageNameError,
    InvalidPathError,
    IsolationUnavailableError,
    MissingDependencyError,
    ProcessLimitError,
    ProviderUnavailableError,
    ProviderUnreachableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
    SessionClosedError,
    SnapshotNotFoundError,
    SnapshotStoreUnavailable,
    ThreadBusyError,
    UnknownArgumentError,
    UnsafeArchiveError,
)
from langchain_sandbox.network import NetworkPolicy, Secret
from langchain_sandbox.processes import ProcessInfo, ProcessOutput, ProcessSpec, ProcessState
from langchain_sandbox.providers import get_provider
from langchain_sandbox.providers.base import (
    Capabilities,
    ChangeListing,
    FileInfo,
    Limits,
    OutputCallback,
    Provider,
    Session,
    SessionRecord,
    SessionSpec,
    VariablesDump,
)
from langchain_sandbox.results import Artifact, ExecutionError, ExecutionResult
from langchain_sandbox.state import SandboxState, merge_sandbox_state

try:
    __version__: str = version("langchain-sandbox")
    """The installed distribution's version (the one in ``pyproject.toml``)."""
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from langchain_sandbox.checkpointing.thread_lock import PostgresThreadLock
    from langchain_sandbox.deepagents import SandboxBackend
    from langchain_sandbox.graph import (
        ImagePolicy,
        SandboxAgentState,
        SandboxChannel,
        SandboxGraphState,
        SandboxMiddleware,
        SandboxToolCallWrapper,
        SandboxToolNode,
        image_placement,
        messages_for_model,
    )
    from langchain_sandbox.providers.e2b import E2BProvider
    from langchain_sandbox.providers.kubernetes import KubernetesProvider
    from langchain_sandbox.providers.local import (
        EnvironmentStatus,
        LocalProvider,
        PackageIndex,
        SandboxEnvironment,
    )
    from langchain_sandbox.providers.runloop import RunloopProvider
    from langchain_sandbox.runtime import (
        Outcome,
        PersistPolicy,
        SandboxRuntime,
        StepCall,
        get_default_runtime,
    )
    from langchain_sandbox.snapshots import (
        LangGraphStoreBlobStore,
        LocalDirectoryBlobStore,
        Snapshotter,
    )
    from langchain_sandbox.tools import (
        SandboxExecTool,
        SandboxInstallPackagesTool,
        SandboxListFilesTool,
        SandboxProcessTool,
        SandboxReadFileTool,
        SandboxShellTool,
        SandboxToolkit,
        SandboxWriteFileTool,
        execution_result,
    )

_LAZY: dict[str, str] = {
    "SandboxRuntime": "langchain_sandbox.runtime",
    "Outcome": "langchain_sandbox.runtime",
    "PersistPolicy": "langchain_sandbox.runtime",
    "StepCall": "langchain_sandbox.runtime",
    "get_default_runtime": "langchain_sandbox.runtime",
    "SandboxExecTool": "langchain_sandbox.tools",
    "SandboxShellTool": "langchain_sandbox.tools",
    "SandboxProcessTool": "langchain_sandbox.tools",
    "SandboxWriteFileTool": "langchain_sandbox.tools",
    "SandboxReadFileTool": "langchain_sandbox.tools",
    "SandboxListFilesTool": "langchain_sandbox.tools",
    "SandboxInstallPackagesTool": "langchain_sandbox.tools",
    "SandboxToolkit": "langchain_sandbox.tools",
    "execution_result": "langchain_sandbox.tools",
    "SandboxToolNode": "langchain_sandbox.graph",
    "SandboxMiddleware": "langchain_sandbox.graph",
    "SandboxGraphState": "langchain_sandbox.graph",
    "SandboxAgentState": "langchain_sandbox.graph",
    "SandboxChannel": "langchain_sandbox.graph",
    "SandboxToolCallWrapper": "langchain_sandbox.graph",
    "ImagePolicy": "langchain_sandbox.graph",
    "image_placement": "langchain_sandbox.graph",
    "messages_for_model": "langchain_sandbox.graph",
    "SandboxBackend": "langchain_sandbox.deepagents",
    "Snapshotter": "langchain_sandbox.snapshots",
    "LocalDirectoryBlobStore": "langchain_sandbox.snapshots",
    "LangGraphStoreBlobStore": "langchain_sandbox.snapshots",
    "LocalProvider": "langchain_sandbox.providers.local",
    "SandboxEnvironment": "langchain_sandbox.providers.local",
    "EnvironmentStatus": "langchain_sandbox.providers.local",
    "PackageIndex": "langchain_sandbox.providers.local",
    "E2BProvider": "langchain_sandbox.providers.e2b",
    "RunloopProvider": "langchain_sandbox.providers.runloop",
    "KubernetesProvider": "langchain_sandbox.providers.kubernetes",
    "PostgresThreadLock": "langchain_sandbox.checkpointing.thread_lock",
}

__all__ = [
    "Artifact",
    "AuthenticationError",
    "Capabilities",
    "CapabilityError",
    "ChangeListing",
    "CheckpointerUnavailableError",
    "ConfigurationError",
    "E2BProvider",
    "EnvironmentBuildError",
    "EnvironmentStatus",
    "ExecutionError",
    "ExecutionResult",
    "FileInfo",
    "ImagePolicy",
    "InvalidInputError",
    "InvalidPackageNameError",
    "InvalidPathError",
    "IsolationUnavailableError",
    "KubernetesProvider",
    "LangGraphStoreBlobStore",
    "Limits",
    "LocalDirectoryBlobStore",
    "LocalProvider",
    "MissingDependencyError",
    "NetworkPolicy",
    "Outcome",
    "OutputCallback",
    "PackageIndex",
    "PersistPolicy",
    "PostgresThreadLock",
    "ProcessInfo",
    "ProcessLimitError",
    "ProcessOutput",
    "ProcessSpec",
    "ProcessState",
    "Provider",
    "ProviderUnavailableError",
    "ProviderUnreachableError",
    "QuotaExceededError",
    "RunloopProvider",
    "SandboxAgentState",
    "SandboxBackend",
    "SandboxChannel",
    "SandboxEnvironment",
    "SandboxError",
    "SandboxExecTool",
    "SandboxGoneError",
    "SandboxGraphState",
    "SandboxInstallPackagesTool",
    "SandboxListFilesTool",
    "SandboxMiddleware",
    "SandboxProcessTool",
    "SandboxReadFileTool",
    "SandboxRuntime",
    "SandboxShellTool",
    "SandboxState",
    "SandboxTimeoutError",
    "SandboxToolCallWrapper",
    "SandboxToolNode",
    "SandboxToolkit",
    "SandboxWriteFileTool",
    "Secret",
    "Session",
    "SessionClosedError",
    "SessionRecord",
    "SessionSpec",
    "SnapshotNotFoundError",
    "SnapshotStoreUnavailable",
    "Snapshotter",
    "StepCall",
    "ThreadBusyError",
    "UnknownArgumentError",
    "UnsafeArchiveError",
    "VariablesDump",
    "execution_result",
    "get_default_runtime",
    "get_provider",
    "image_placement",
    "merge_sandbox_state",
    "messages_for_model",
]


def __dir__() -> list[str]:
    return __all__


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        from langchain_sandbox._removed_api import REPLACEMENTS, removed_api_error

        if name in REPLACEMENTS:
            # An ImportError, not an AttributeError: ``from langchain_sandbox import X`` turns
            # an AttributeError into a bare "cannot import name" and drops this message.
            raise removed_api_error(name)
        raise AttributeError(f"module 'langchain_sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
