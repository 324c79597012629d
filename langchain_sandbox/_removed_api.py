"""Names of the old Pyodide-based ``langchain-sandbox`` (0.0.1 to 0.0.6), and what replaces them.

This package took over the ``langchain_sandbox`` import name. Code written for the old package
fails on its first import; instead of Python's bare ``cannot import name``, it gets an
``ImportError`` that names the replacement and points at the migration guide
(``docs/migration.md``).
"""

from __future__ import annotations

MIGRATION_GUIDE = "docs/migration.md in the langchain-sandbox repository"

_TOOL = (
    "use SandboxExecTool (from langchain_sandbox import SandboxExecTool): Python is always "
    "stateful per thread, and state lives in the graph's 'sandbox' channel instead of "
    "session_bytes; allow_net=True becomes SandboxRuntime(spec=SessionSpec(network=True))"
)
_SANDBOX = (
    "use SandboxRuntime (from langchain_sandbox import SandboxRuntime): "
    "runtime.arun_code(thread_id, code) replaces await sandbox.execute(code, session_bytes=...), "
    "and the thread id replaces session_bytes/session_metadata"
)

REPLACEMENTS: dict[str, str] = {
    "PyodideSandbox": _SANDBOX,
    "SyncPyodideSandbox": _SANDBOX.replace("arun_code", "run_code").replace("await ", ""),
    "BasePyodideSandbox": _SANDBOX,
    "PyodideSandboxTool": _TOOL,
    "PyodideStatefulSandboxTool": _TOOL,
    "PyodideStatelessSandboxTool": _TOOL,
    "CodeExecutionResult": (
        "use ExecutionResult (from langchain_sandbox import ExecutionResult): stdout, stderr, "
        "value (was result), error and ok (was status), duration_ms (was execution_time, in seconds)"
    ),
}
"""Every public name the old package exported, from its top level or its ``pyodide`` and
``tool`` modules, mapped to what to use now."""


def removed_api_error(name: str, module: str = "langchain_sandbox") -> ImportError:
    """The error for importing ``name``, a name of the old Pyodide package, from ``module``."""
    return ImportError(
        f"{name} was part of the old Pyodide-based langchain-sandbox (0.0.x), which this "
        f"package replaces under the same import name: {REPLACEMENTS[name]}. "
        f"See {MIGRATION_GUIDE}.",
        name=module,
    )


def removed_module_error(module: str) -> ImportError:
    """The error for importing ``module``, a module of the old Pyodide package."""
    names = ", ".join(sorted(REPLACEMENTS))
    return ImportError(
        f"{module} was a module of the old Pyodide-based langchain-sandbox (0.0.x), which this "
        f"package replaces under the same import name. Its names ({names}) are replaced by "
        f"SandboxExecTool (the tool) and SandboxRuntime (running code from your own code), "
        f"both importable from langchain_sandbox. See {MIGRATION_GUIDE}.",
        name=module,
    )


__all__ = ["MIGRATION_GUIDE", "REPLACEMENTS", "removed_api_error", "removed_module_error"]
