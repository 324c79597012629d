"""LangChain tools that run code, commands and file operations in a thread's sandbox."""

from langchain_sandbox.tools.base import SandboxTool, SandboxToolArgs, execution_result
from langchain_sandbox.tools.exec import SandboxExecTool
from langchain_sandbox.tools.files import (
    SandboxListFilesTool,
    SandboxReadFileTool,
    SandboxWriteFileTool,
)
from langchain_sandbox.tools.packages import SandboxInstallPackagesTool
from langchain_sandbox.tools.processes import SandboxProcessTool
from langchain_sandbox.tools.shell import SandboxShellTool
from langchain_sandbox.tools.toolkit import SandboxToolkit

__all__ = [
    "SandboxExecTool",
    "SandboxInstallPackagesTool",
    "SandboxListFilesTool",
    "SandboxProcessTool",
    "SandboxReadFileTool",
    "SandboxShellTool",
    "SandboxTool",
    "SandboxToolArgs",
    "SandboxToolkit",
    "SandboxWriteFileTool",
    "execution_result",
]
