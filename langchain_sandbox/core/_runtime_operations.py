"""The runtime's operations on a thread's sandbox: code, shell commands, files and packages.

A mixin of [`SandboxRuntime`][langchain_sandbox.SandboxRuntime], in a module of its own so the
runtime's facade (sessions, persistence, closing) stays one idea per module. Each operation is one
async method that runs through `langchain_sandbox.core._runtime_calls`; its blocking twin is one line
made by `blocking`. Code and commands are user code: never repeatable (not re-run silently on a
replacement sandbox); file and package operations are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from langchain_sandbox.core._runtime_calls import CallContext, RuntimeCalls, blocking
from langchain_sandbox.core.requirements import validate_requirements
from langchain_sandbox.core.thread import Outcome, StepCall
from langchain_sandbox.providers.base import FileInfo, OutputCallback, Session
from langchain_sandbox.providers.tool_channel import ToolHost
from langchain_sandbox.results import ExecutionResult
from langchain_sandbox.state import SandboxState


class RuntimeOperations(RuntimeCalls):
    """Code, shell, files and packages of a thread's sandbox; mixed into `SandboxRuntime`."""

    async def _arun_capped(
        self,
        call: CallContext,
        timeout: float | None,
        run: Callable[[Session, float | None], Awaitable[ExecutionResult]],
    ) -> Outcome[ExecutionResult]:
        """Run code or a command (``run(session, timeout)``) with ``timeout`` capped to the
        session's limit; the result says if it was cut."""
        capped, notices = _capped_timeout(timeout, self._pool.spec.limits.timeout)

        async def _run(_: object, session: Session) -> ExecutionResult:
            return (await run(session, capped)).with_notices(*notices)

        return _as_execution(await self._on_thread(call, _run, mutates=True, repeatable=False))

    async def arun_code(
        self,
        thread_id: str,
        code: str,
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
        tools: ToolHost | None = None,
    ) -> Outcome[ExecutionResult]:
        """Run Python in the thread's stateful interpreter.

        ``timeout`` may lower the session's ``Limits.timeout``, never raise it: a larger value
        is cut to the limit and the result says so in its notices. ``tools``: host tools the
        code may call (see [`Session.run_code`][langchain_sandbox.Session.run_code]).
        """
        return await self._arun_capped(
            CallContext(thread_id, record, step_call, resumable),
            timeout,
            lambda session, capped: session.run_code(
                code, timeout=capped, on_output=on_output, tools=tools
            ),
        )

    async def arun_command(
        self,
        thread_id: str,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Run a shell command in the thread's sandbox (``cwd`` defaults to the workspace).

        ``timeout`` is capped by ``Limits.timeout`` as in `arun_code`.
        """
        return await self._arun_capped(
            CallContext(thread_id, record, step_call, resumable),
            timeout,
            lambda session, capped: session.run_command(
                command, timeout=capped, cwd=cwd, on_output=on_output
            ),
        )

    async def arun_shell(
        self,
        thread_id: str,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Run a command in the thread's persistent shell: ``cd`` and ``export`` carry over to
        its next commands, and across a resume or fork (they travel with the workspace's
        snapshot). ``cwd`` changes directory first, and the shell stays there. See
        [`Session.run_shell`][langchain_sandbox.Session.run_shell].

        ``timeout`` is capped by ``Limits.timeout`` as in `arun_code`.
        """
        return await self._arun_capped(
            CallContext(thread_id, record, step_call, resumable),
            timeout,
            lambda session, capped: session.run_shell(
                command, timeout=capped, cwd=cwd, on_output=on_output
            ),
        )

    async def awrite_files(
        self,
        thread_id: str,
        files: Mapping[str, bytes],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[None]:
        """Write files into the thread's workspace (parents are created)."""

        async def _write(_: object, session: Session) -> None:
            await session.write_files(files)

        return await self._on_thread(
            CallContext(thread_id, record, step_call, resumable),
            _write,
            mutates=True,
            repeatable=True,
        )

    async def aread_files(
        self,
        thread_id: str,
        paths: Sequence[str],
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[dict[str, bytes]]:
        """Read files from the thread's workspace."""

        async def _read(_: object, session: Session) -> dict[str, bytes]:
            return await session.read_files(paths)

        return await self._on_thread(
            CallContext(thread_id, record, step_call), _read, mutates=False, repeatable=True
        )

    async def alist_files(
        self,
        thread_id: str,
        path: str = ".",
        *,
        recursive: bool = False,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[list[FileInfo]]:
        """List a directory of the thread's workspace."""

        async def _list(_: object, session: Session) -> list[FileInfo]:
            return await session.list_files(path, recursive=recursive)

        return await self._on_thread(
            CallContext(thread_id, record, step_call), _list, mutates=False, repeatable=True
        )

    async def ainstall_packages(
        self,
        thread_id: str,
        packages: Sequence[str],
        *,
        timeout: float | None = None,
        record: SandboxState | None = None,
        on_output: OutputCallback | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ExecutionResult]:
        """Install packages into the thread's sandbox (validated before any sandbox is touched);
        the installer's output goes to ``on_output`` while it runs."""
        requirements = validate_requirements(packages)

        async def _install(_: object, session: Session) -> ExecutionResult:
            return await session.install_packages(
                requirements, timeout=timeout, on_output=on_output
            )

        return _as_execution(
            await self._on_thread(
                CallContext(thread_id, record, step_call, resumable),
                _install,
                mutates=True,
                repeatable=True,
            )
        )

    run_code = blocking(arun_code)
    """Blocking twin of `arun_code`."""
    run_command = blocking(arun_command)
    """Blocking twin of `arun_command`."""
    run_shell = blocking(arun_shell)
    """Blocking twin of `arun_shell`."""
    write_files = blocking(awrite_files)
    """Blocking twin of `awrite_files`."""
    read_files = blocking(aread_files)
    """Blocking twin of `aread_files`."""
    list_files = blocking(alist_files)
    """Blocking twin of `alist_files`."""
    install_packages = blocking(ainstall_packages)
    """Blocking twin of `ainstall_packages`."""


def _capped_timeout(timeout: float | None, ceiling: float) -> tuple[float | None, tuple[str, ...]]:
    """``timeout`` lowered to the operator's ``ceiling``, and the notice that says so if it was.

    The caller (often the model) may ask for less time than the operator allows, never more.
    Anything that is not a number is passed on for the session to refuse.
    """
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > ceiling:
        return ceiling, (
            f"timeout lowered from {timeout:g} s to the sandbox's limit of {ceiling:g} s",
        )
    return timeout, ()


def _as_execution(outcome: Outcome[ExecutionResult]) -> Outcome[ExecutionResult]:
    """Put the notices where the model reads them, and count the execution (a delta)."""
    record: SandboxState = {**outcome.record, "exec_count": 1}
    return Outcome(outcome.value.with_notices(*outcome.notices), record, outcome.notices)


__all__ = ["RuntimeOperations"]
