"""The runtime's processes and ports: named processes that outlive a call, and URLs to their ports.

A mixin of [`SandboxRuntime`][langchain_sandbox.SandboxRuntime], in a module of its own so the
runtime's facade stays one idea per module. Each operation is one async method that runs through
`langchain_sandbox.core._runtime_calls`; its blocking twin is one line made by `blocking`.

Starting a process with ``restart=True`` and exposing a port change the thread's *services*
(`langchain_sandbox.core.services`), which its record carries: after a restore the runtime starts them
again before the next call and tells the model the new URLs. Stopping a process removes it.
"""

from __future__ import annotations

import posixpath
import re
import uuid
from collections.abc import Mapping

from langchain_sandbox.core._runtime_calls import CallContext, RuntimeCalls, blocking
from langchain_sandbox.core.thread import Outcome, StepCall, ThreadSandbox
from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.processes import (
    ProcessInfo,
    ProcessOutput,
    ProcessSpec,
    check_process_name,
)
from langchain_sandbox.providers.base import Session, check_port
from langchain_sandbox.state import SandboxState


def default_process_name(command: str) -> str:
    """A name for a process started without one: its program's name and a short random tail
    (``python-3fa2``), readable in a listing and unlikely to collide."""
    words = command.split() if isinstance(command, str) else []
    program = posixpath.basename(words[0]) if words else "process"
    stem = re.sub(r"[^A-Za-z0-9_-]", "", program)[:40] or "process"
    return f"{stem}-{uuid.uuid4().hex[:4]}"


def _process_spec(
    command: str,
    name: str | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    restart: bool,
) -> ProcessSpec:
    """The spec to start, checked before any sandbox is touched."""
    return ProcessSpec(
        name=name if name is not None else default_process_name(command),
        command=command,
        cwd=cwd or WORKSPACE_ROOT,
        env=dict(env or {}),
        restart=restart,
    ).checked()


class RuntimeProcesses(RuntimeCalls):
    """Processes and ports of a thread's sandbox; mixed into `SandboxRuntime`."""

    async def astart_process(
        self,
        thread_id: str,
        command: str,
        *,
        name: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        restart: bool = True,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ProcessInfo]:
        """Start ``command`` (a bash command line) as a named process that keeps running after
        the call; the result says its name, state and what it printed in its first moments.

        Args:
            thread_id: The conversation thread.
            command: The command line, run by ``bash -c`` in a process group of its own.
            name: Its name (default: from the program's name, e.g. ``python-3fa2``); a second
                running process of the same name is refused.
            cwd: Where it runs, relative to the workspace (``/home/user``) or absolute.
            env: Variables added to the sandbox's environment for it (kept in the record to
                start it again: never put a secret here).
            restart: A service: the record keeps it, and a restore (a resume in a new process,
                a fork, a lost sandbox) starts it again before the next call.
            record, step_call, resumable: As for `SandboxRuntime.aexecute`.

        Raises:
            InvalidInputError: a bad name, cwd, env, or a running process of that name.
        """
        spec = _process_spec(command, name, cwd, env, restart)

        async def _start(thread: ThreadSandbox, session: Session) -> ProcessInfo:
            info = await session.start_process(spec)
            thread.ran_processes = True
            thread.position.services = thread.position.services.with_process(spec)
            return info

        # Not repeatable: a command is user code, never run twice silently.
        return await self._on_thread(
            CallContext(thread_id, record, step_call, resumable),
            _start,
            mutates=True,
            repeatable=False,
        )

    async def aprocess_output(
        self,
        thread_id: str,
        name: str,
        *,
        since: int = 0,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[ProcessOutput]:
        """What process ``name`` printed (stdout and stderr in order) from byte offset ``since``;
        pass the result's ``next_offset`` as ``since`` to read only what came after."""
        check_process_name(name)
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise InvalidInputError(f"since must be a byte offset of 0 or more, not {since!r}.")

        async def _output(thread: ThreadSandbox, session: Session) -> ProcessOutput:
            return await session.process_output(name, since=since)

        return await self._on_thread(
            CallContext(thread_id, record, step_call), _output, mutates=False, repeatable=True
        )

    async def astop_process(
        self,
        thread_id: str,
        name: str,
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[ProcessInfo]:
        """Stop process ``name`` and its whole process group (TERM, then KILL after a grace
        period); it stops being a service, so no restore starts it again."""
        check_process_name(name)

        async def _stop(thread: ThreadSandbox, session: Session) -> ProcessInfo:
            info = await session.stop_process(name)
            thread.position.services = thread.position.services.without_process(name)
            return info

        return await self._on_thread(
            CallContext(thread_id, record, step_call, resumable),
            _stop,
            mutates=True,
            repeatable=True,
        )

    async def alist_processes(
        self,
        thread_id: str,
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
    ) -> Outcome[list[ProcessInfo]]:
        """The named processes of the thread's sandbox, running or finished."""

        async def _list(thread: ThreadSandbox, session: Session) -> list[ProcessInfo]:
            return await session.list_processes()

        return await self._on_thread(
            CallContext(thread_id, record, step_call), _list, mutates=False, repeatable=True
        )

    async def aexpose_port(
        self,
        thread_id: str,
        port: int,
        *,
        record: SandboxState | None = None,
        step_call: StepCall | None = None,
        resumable: bool = False,
    ) -> Outcome[str]:
        """A URL the host (and the user) can open to reach ``port`` in the thread's sandbox; the
        same URL for the same port while the sandbox lives. The record keeps the port, so a
        restore exposes it again (at a new URL, which the model is told)."""
        port = check_port(port)

        async def _expose(thread: ThreadSandbox, session: Session) -> str:
            url = await session.expose_port(port)
            thread.position.services = thread.position.services.with_port(port)
            return url

        return await self._on_thread(
            CallContext(thread_id, record, step_call, resumable),
            _expose,
            mutates=True,
            repeatable=True,
        )

    start_process = blocking(astart_process)
    """Blocking twin of `astart_process`."""
    process_output = blocking(aprocess_output)
    """Blocking twin of `aprocess_output`."""
    stop_process = blocking(astop_process)
    """Blocking twin of `astop_process`."""
    list_processes = blocking(alist_processes)
    """Blocking twin of `alist_processes`."""
    expose_port = blocking(aexpose_port)
    """Blocking twin of `aexpose_port`."""


__all__ = ["RuntimeProcesses", "default_process_name"]
