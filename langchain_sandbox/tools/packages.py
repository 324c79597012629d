"""SandboxInstallPackagesTool: pip packages for the thread's sandbox, by name only."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from langchain_sandbox.core.requirements import MAX_PACKAGES, validate_requirements
from langchain_sandbox.tools.base import (
    SandboxCall,
    SandboxTool,
    SandboxToolArgs,
    ToolReply,
    execution_reply,
)
from langchain_sandbox.tools.streaming import listener


class SandboxInstallPackagesArgs(SandboxToolArgs):
    """Arguments of [`SandboxInstallPackagesTool`][langchain_sandbox.SandboxInstallPackagesTool]."""

    packages: list[str] = Field(
        min_length=1,
        max_length=MAX_PACKAGES,
        description="Package requirements such as 'numpy' or 'pandas==2.2.3'. Names only.",
    )


class SandboxInstallPackagesTool(SandboxTool):
    """Install Python packages into the thread's sandbox.

    Requirements are validated on the host before the sandbox sees them: options, URLs, paths
    and shell syntax are refused, so an install can never become an arbitrary command.
    """

    name: str = "sandbox_install_packages"
    description: str = (
        "Install Python packages (pip requirements such as 'numpy' or 'pandas==2.2.3') into the "
        "sandbox so later Python code can import them. Only package names and version specifiers "
        "are accepted. Whether packages can be downloaded depends on the sandbox's network "
        "setting; the output says what happened."
    )
    args_schema: type[SandboxInstallPackagesArgs] = SandboxInstallPackagesArgs
    streams_output: ClassVar[bool] = True

    async def _acall(self, call: SandboxCall, args: dict[str, Any]) -> ToolReply:
        outcome = await call.runtime.ainstall_packages(
            call.thread_id,
            validate_requirements(args["packages"]),
            record=call.record,
            on_output=listener(call.on_output),
            step_call=call.step_call,
            resumable=call.resumable,
        )
        return execution_reply(
            outcome, max_chars=self.max_output_chars, images_inline=call.images_inline
        )


__all__ = ["SandboxInstallPackagesArgs", "SandboxInstallPackagesTool"]
