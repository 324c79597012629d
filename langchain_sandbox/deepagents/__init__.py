"""Deep Agents integration: [`SandboxBackend`][langchain_sandbox.SandboxBackend], a durable per-thread ``SandboxBackendProtocol``.

Needs the ``deepagents`` extra (``pip install 'langchain-sandbox[deepagents]'``); importing
``langchain_sandbox`` alone never imports Deep Agents.
"""

from __future__ import annotations

try:
    import deepagents  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    from langchain_sandbox.errors import MissingDependencyError

    raise MissingDependencyError(
        "deepagents", "deepagents", purpose="langchain_sandbox.deepagents"
    ) from exc

from langchain_sandbox.deepagents.backend import NotedPath, SandboxBackend

__all__ = ["NotedPath", "SandboxBackend"]
