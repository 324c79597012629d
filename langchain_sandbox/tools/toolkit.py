"""SandboxToolkit: every sandbox tool, over one runtime."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, BaseToolkit
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from langchain_sandbox.core.arguments import check_model_arguments
from langchain_sandbox.providers.base import Provider
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.tools.base import private_thread_id
from langchain_sandbox.tools.exec import SandboxExecTool
from langchain_sandbox.tools.files import (
    SandboxListFilesTool,
    SandboxReadFileTool,
    SandboxWriteFileTool,
)
from langchain_sandbox.tools.ownership import RuntimeOwner
from langchain_sandbox.tools.packages import SandboxInstallPackagesTool
from langchain_sandbox.tools.processes import SandboxProcessTool
from langchain_sandbox.tools.shell import SandboxShellTool


class SandboxToolkit(BaseToolkit):
    """The sandbox tools (Python, shell, files, packages, processes) sharing one runtime.

    Args:
        runtime: The runtime every tool uses. Without it, the tools find one per call (the run's
            context, ``configurable``, or the process-wide default), unless ``provider`` is set.
        provider: Build one runtime on this provider for all the tools, a name or a configured
            provider (``LocalProvider(isolation="none")``); the toolkit owns it and
            `close` destroys its sandboxes.
        provider_options: Options for a provider given by name, checked against its parameters.
        include: Names of the tools to include (all of them by default).
        default_thread_id: The thread of calls that carry no ``thread_id``. By default one
            private thread of this toolkit: its tools share a sandbox with each other and with
            no one else. Give two toolkits the same name to share one on purpose.
        code_tools: Host tools the code of ``sandbox_exec`` may call (its ``tools=``; see
            ``docs/tools-from-code.md``). Named so because ``tools`` here are the sandbox's own.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    runtime: SandboxRuntime | None = None
    provider: str | Provider | None = None
    provider_options: dict[str, Any] | None = None
    include: list[str] | None = Field(default=None)
    default_thread_id: str = Field(default_factory=private_thread_id)
    code_tools: list[Any] = Field(default_factory=list)

    _owner: RuntimeOwner = PrivateAttr(default_factory=RuntimeOwner)

    @model_validator(mode="before")
    @classmethod
    def _known_arguments(cls, data: Any) -> Any:
        # As the tools do: a typo or an option of the provider fails instead of being dropped.
        check_model_arguments(cls, data)
        return data

    def _shared_runtime(self) -> SandboxRuntime | None:
        return self._owner.resolve(self.runtime, self.provider, self.provider_options)

    def close(self) -> None:
        """Close the runtime this toolkit built for ``provider=`` (its sandboxes are destroyed).

        The same rule as `SandboxTool.close`:
        a runtime passed in belongs to someone else and is left alone.
        """
        self._owner.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        await self._owner.aclose()

    def get_tools(self) -> list[BaseTool]:
        """The tools, all bound to the same runtime (or all resolving it the same way)."""
        runtime, thread = self._shared_runtime(), self.default_thread_id
        tools: list[BaseTool] = [
            SandboxExecTool(runtime=runtime, default_thread_id=thread, tools=self.code_tools)
        ]
        tools += [
            tool_class(runtime=runtime, default_thread_id=thread)
            for tool_class in (
                SandboxShellTool,
                SandboxWriteFileTool,
                SandboxReadFileTool,
                SandboxListFilesTool,
                SandboxInstallPackagesTool,
                SandboxProcessTool,
            )
        ]
        if self.include is None:
            return tools
        unknown = set(self.include) - {t.name for t in tools}
        if unknown:
            raise ValueError(f"Unknown sandbox tools: {', '.join(sorted(unknown))}.")
        return [t for t in tools if t.name in self.include]


__all__ = ["SandboxToolkit"]
