"""SandboxBackend: this package's sandboxes behind Deep Agents' ``SandboxBackendProtocol``.

```python
from deepagents import create_deep_agent
from langchain_sandbox.deepagents import SandboxBackend

agent = create_deep_agent(model, backend=SandboxBackend(), checkpointer=saver)
```

One backend instance serves every conversation: each call finds its thread's sandbox at call time
(``configurable.thread_id`` of the running graph, ``"default"`` outside one) through the same
[`SandboxRuntime`][langchain_sandbox.SandboxRuntime] the tools use, so threads run in parallel,
calls of one thread are serialized, limits, idle TTL and ``gc`` apply, and any provider works.

Where the work happens:

* ``execute`` runs the command in the thread's persistent shell (``cd`` and ``export`` stick,
  and travel with the snapshots) with stderr merged into stdout at the source; output past the
  session's cap is dropped in the sandbox and ``truncated`` says so.
* ``read``, ``write``, ``edit``, ``ls``, ``upload_files`` and ``download_files`` use the
  provider's file API for paths under ``/home/user`` (the workspace, which is what snapshots keep):
  no script through the shell, no size limit of a command line, binary-safe.
* Any other absolute path (``/tmp/x``, ``/notes.md``) is the sandbox's own, as in Deep Agents'
  sandboxes: ``ls`` runs Deep Agents' script; ``read``, ``write``, ``edit``, ``upload_files`` and
  ``download_files`` copy through a staging file in the workspace as the sandbox's user (see
  ``_outside``), so the sandbox's permissions decide (``permission_denied`` on a read-only
  ``/usr``). What is written there is not kept by the snapshots, so its result says so: the
  path of the result carries a note (``NotedPath``) that the model reads in the tool's reply.
* ``grep`` and ``glob`` are Deep Agents' own scripts (one command each), so their matching rules
  are exactly Deep Agents'.

Every method returns errors in its result and never raises: Deep Agents turns only
``ValueError`` and ``NotImplementedError`` into a message for the model, and anything else would
abort the agent's run.

Why one module over 500 lines: it implements Deep Agents' ``SandboxBackendProtocol``, every
method in a blocking and an async form; where a call goes (``_call``), the workspace's files on a
session (``_session_files``), page shapes (``_pages``) and record lineage (``_lineage``) are
modules of their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from deepagents.backends.protocol import (
    EditResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.sandbox import BaseSandbox
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from langchain_sandbox.checkpointing.checkpointer_names import anote_checkpointer, note_checkpointer
from langchain_sandbox.core._event_loop import on_event_loop
from langchain_sandbox.core.arguments import check_provider_options, checked_init
from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.deepagents._call import Call, awaited, graph_config
from langchain_sandbox.deepagents._lineage import RecordBook, position_of
from langchain_sandbox.deepagents._outside import (
    NotedPath,
    outside_note,
    sandbox_path,
    write_outside,
)
from langchain_sandbox.deepagents._pages import (
    MAX_BINARY_BYTES,
    binary_too_large,
    edit_error,
    is_binary_path,
    not_absolute,
    read_error,
    read_page,
    replace_in,
    write_error,
)
from langchain_sandbox.deepagents._session_files import (
    Fetched,
    absolute,
    entry_of,
    fetch_on,
    in_workspace,
    missing_or_invalid,
    sort_uploads,
    workspace_path,
    write_workspace,
)
from langchain_sandbox.errors import InvalidPathError, SandboxError
from langchain_sandbox.graph.step_lineage import (
    afinished_calls,
    astep_above,
    finished_calls,
    step_above,
)
from langchain_sandbox.providers.base import FileInfo as SandboxFileInfo
from langchain_sandbox.providers.base import Provider, Session
from langchain_sandbox.runtime import Outcome, SandboxRuntime
from langchain_sandbox.tools.base import (
    is_resumable,
    private_thread_id,
    resolve_runtime,
    resolve_thread_id,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)

_READ_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "langchain_sandbox_deepagents_read_only", default=False
)
"""Set while Deep Agents' own read-only scripts (grep, glob, ls outside the workspace) run
through [`SandboxBackend.execute`][langchain_sandbox.SandboxBackend.execute], so they neither bump the revision nor take a snapshot."""

_TIMEOUT_EXIT_CODE = 124
"""Exit code reported for a command stopped at its timeout (what ``timeout(1)`` uses)."""


class SandboxBackend(BaseSandbox):
    """Deep Agents backend on this package's per-thread, durable sandboxes.

    Args:
        provider: ``"local"``, ``"e2b"``, ``"runloop"`` or a [`Provider`][langchain_sandbox.Provider]: the backend builds
            and owns a [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] on it (close it with `close`). Without
            ``provider`` or ``runtime``, each call finds its runtime the way the tools do (the
            run's context, ``configurable["sandbox_runtime"]``, else the process-wide default
            on the local provider).
        runtime: The [`SandboxRuntime`][langchain_sandbox.SandboxRuntime] to use (shared with other tools, owned by you).
        provider_options: Options for ``provider`` given by name.
        thread_id: The thread of calls made outside a graph run (default: one of this
            backend's own, shared with nothing else).
        persistent_shell: ``execute`` keeps the working directory and exported variables of
            earlier commands (``cd`` and ``export`` stick, across a resume too). ``False`` runs
            each command in a fresh ``bash -c`` in ``/home/user``, as Deep Agents' own sandboxes
            do: the shell's state is neither restored nor saved, which makes a command about a
            millisecond cheaper.
        code_tools: Host tools the agent's code may call as ``tools.name(...)``, in the
            ``sandbox_exec`` tool `exec_tools` makes (``execute`` runs shell commands, which
            have no ``tools`` object; see ``docs/tools-from-code.md``).
    """

    @checked_init
    def __init__(
        self,
        provider: str | Provider | None = None,
        *,
        runtime: SandboxRuntime | None = None,
        provider_options: dict[str, Any] | None = None,
        thread_id: str | None = None,
        persistent_shell: bool = True,
        code_tools: Sequence[BaseTool | Callable[..., Any]] = (),
    ) -> None:
        if provider is not None and runtime is not None:
            raise ValueError("Pass provider or runtime, not both.")
        check_provider_options(provider, provider_options)
        self._runtime = runtime
        self._provider = provider
        self._provider_options = provider_options
        self._owned: SandboxRuntime | None = None
        self._build_lock = threading.Lock()
        self.default_thread_id = thread_id or private_thread_id()
        self.persistent_shell = persistent_shell
        self.code_tools = list(code_tools)
        # As the tools do: a missing extra or API key fails here, not at the agent's first call
        # (on an event loop, where building would block it, the first call builds it instead).
        if provider is not None and not on_event_loop():
            self._explicit_runtime()

    # -- where a call goes -------------------------------------------------------------------

    def _explicit_runtime(self) -> SandboxRuntime | None:
        if self._runtime is not None:
            return self._runtime
        if self._provider is None:
            return None
        with self._build_lock:
            if self._owned is None or self._owned.closed:
                self._owned = SandboxRuntime(
                    self._provider, provider_options=self._provider_options
                )
            return self._owned

    def _call(self, config: RunnableConfig | None, *, blocking: bool = True) -> Call:
        runtime = resolve_runtime(self._explicit_runtime(), None, config)
        thread_id = resolve_thread_id(config, self.default_thread_id)
        position = position_of(config, blocking=blocking)
        resumable = is_resumable(config)
        book = RecordBook.of(runtime, resumable) if position is not None else None
        return Call(runtime, thread_id, position, book, resumable)

    def _sync(self, work: Callable[[Call], Awaitable[T]]) -> T:
        config = graph_config()
        call = self._call(config)
        if siblings := call.siblings:
            call = call.after(finished_calls(config, siblings))
        if call.filed:
            call = call.under(step_above(config))
        if call.filed and call.position is not None:
            call.position.find_step_blocking()
        note_checkpointer(call.runtime, config)
        return call.runtime.run_sync(awaited(work(call)))

    async def _async(self, work: Callable[[Call], Awaitable[T]]) -> T:
        config = graph_config()
        call = self._call(config, blocking=False)
        if siblings := call.siblings:
            call = call.after(await afinished_calls(config, siblings))
        if call.filed:
            call = call.under(await astep_above(config))
        await anote_checkpointer(call.runtime, config)
        return await work(call)

    @staticmethod
    async def _on_session(
        call: Call,
        operation: Callable[[Session], Awaitable[T]],
        *,
        mutates: bool,
        repeatable: bool = True,
    ) -> Outcome[T]:
        record = await call.record()
        outcome = await call.runtime.aexecute(
            call.thread_id,
            operation,
            record=record,
            mutates=mutates,
            repeatable=repeatable,
            step_call=call.step_call,
            resumable=call.resumable,
        )
        if mutates:
            await call.file(outcome.record, record)
        return outcome

    @property
    def id(self) -> str:
        """The live sandbox session of the calling thread, else ``provider:thread``."""
        call = self._call(graph_config())
        session_id = call.runtime.live_sessions().get(call.thread_id)
        return session_id or f"{call.runtime.provider_name}:{call.thread_id}"

    def close(self) -> None:
        """Close the runtime this backend built for ``provider=`` (its sandboxes are destroyed).

        A runtime passed in, or found per call, belongs to someone else and is left alone.
        """
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.aclose()

    def process_tools(self) -> list[BaseTool]:
        """Tools for processes that keep running and their ports, to pass to
        ``create_deep_agent(tools=backend.process_tools(), backend=backend)``: ``sandbox_shell``
        (with ``background=true`` it starts a named process) and ``sandbox_process`` (list,
        output, stop, expose a port as a URL). They go through this backend, so the services
        they start are part of the thread's records and come back after a resume or a fork
        (``docs/processes.md``)."""
        from langchain_sandbox.deepagents._process_tools import process_tools

        return process_tools(self)

    def exec_tools(self) -> list[BaseTool]:
        """``[sandbox_exec]``: stateful Python in the thread's sandbox whose code may call the
        ``code_tools`` (durably: a replayed call returns their recorded results), to pass to
        ``create_deep_agent(tools=backend.exec_tools(), backend=backend)``. It goes through this
        backend, like `process_tools`."""
        from langchain_sandbox.deepagents._process_tools import BackendExecTool

        return [BackendExecTool(backend=self, tools=self.code_tools)]

    # -- execute -----------------------------------------------------------------------------

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run ``command`` in the thread's persistent shell (``cd`` and ``export`` carry over to
        later commands, and across a resume or fork); stdout and stderr combined.

        ``timeout`` is in seconds; ``None`` or ``0`` means the session's limit
        (``Limits.timeout``), which also caps larger values (the output says so). A command
        stopped at its time limit reports exit code 124.
        """
        return self._sync(lambda call: self._aexecute(call, command, timeout))

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Async twin of `execute`."""
        return await self._async(lambda call: self._aexecute(call, command, timeout))

    async def _aexecute(self, call: Call, command: str, timeout: int | None) -> ExecuteResponse:
        if not isinstance(command, str) or not command.strip():
            return ExecuteResponse(output="Error: the command is empty.")
        # Merged in the sandbox, so the model reads both streams in the order they were written
        # and the session's output cap applies to what it reads.
        merged = f"exec 2>&1\n{command}"
        seconds = float(timeout) if timeout else None
        lost = None
        try:
            if _READ_ONLY.get():
                outcome = await self._on_session(
                    call, lambda s: s.run_command(merged, timeout=seconds), mutates=False
                )
            else:
                run = (
                    call.runtime.arun_shell if self.persistent_shell else call.runtime.arun_command
                )
                record = await call.record()
                lost = call.lost(record)
                outcome = await run(
                    call.thread_id,
                    merged,
                    timeout=seconds,
                    record=record,
                    step_call=call.step_call,
                    resumable=call.resumable,
                )
                await call.file(outcome.record, record)
        except SandboxError as exc:
            return ExecuteResponse(output=f"Error: the sandbox could not run the command: {exc}")
        result = outcome.value
        if lost is not None:
            result = result.with_notices(lost)
        notices = "".join(f"[notice] {n}\n" for n in result.notices)
        output = notices + result.stdout + result.stderr
        if result.timed_out:
            output += "\n[Command stopped at its time limit]"
            return ExecuteResponse(output, _TIMEOUT_EXIT_CODE, result.truncated)
        return ExecuteResponse(
            output=output, exit_code=result.exit_code, truncated=result.truncated
        )

    @contextlib.contextmanager
    def _read_only(self) -> Iterator[None]:
        token = _READ_ONLY.set(True)
        try:
            yield
        finally:
            _READ_ONLY.reset(token)

    # -- grep and glob: Deep Agents' own scripts, read-only ----------------------------------

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        """Literal search (Deep Agents' ``grep`` script, run once in the sandbox)."""
        with self._read_only():
            return super().grep(pattern, path or WORKSPACE_ROOT, glob, max_count=max_count)

    async def agrep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        """Async twin of `grep`."""
        with self._read_only():
            return await super().agrep(pattern, path or WORKSPACE_ROOT, glob, max_count=max_count)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Files matching ``pattern`` (Deep Agents' ``glob`` script; absolute paths)."""
        with self._read_only():
            return super().glob(pattern, path or WORKSPACE_ROOT)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Async twin of `glob`."""
        with self._read_only():
            return await super().aglob(pattern, path or WORKSPACE_ROOT)

    # -- ls ----------------------------------------------------------------------------------

    def ls(self, path: str) -> LsResult:
        """Entries of a directory, with absolute paths, sizes and modification times."""
        if workspace_path(path) is None:
            with self._read_only():
                return super().ls(path)
        return self._sync(lambda call: self._als(call, path))

    async def als(self, path: str) -> LsResult:
        """Async twin of `ls`."""
        if workspace_path(path) is None:
            with self._read_only():
                return await super().als(path)
        return await self._async(lambda call: self._als(call, path))

    async def _als(self, call: Call, path: str) -> LsResult:
        target = workspace_path(path)
        assert target is not None

        async def _list(session: Session) -> list[SandboxFileInfo] | str:
            try:
                entries = await session.list_files(target)
            except InvalidPathError:
                return await missing_or_invalid(session, target)
            if len(entries) == 1 and absolute(entries[0].path) == target and not entries[0].is_dir:
                return "not_a_directory"
            return entries

        try:
            listed = (await self._on_session(call, _list, mutates=False)).value
        except SandboxError as exc:
            return LsResult(error=f"Path '{path}': {exc}")
        if isinstance(listed, str):
            return LsResult(error=f"Path '{path}': {listed}")
        return LsResult(entries=[entry_of(e) for e in listed])

    # -- read --------------------------------------------------------------------------------

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Lines ``[offset, offset + limit)`` of a text file; base64 of a binary one (≤ 500 KiB)."""
        return self._sync(lambda call: self._aread(call, file_path, offset, limit))

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Async twin of `read`."""
        return await self._async(lambda call: self._aread(call, file_path, offset, limit))

    async def _aread(self, call: Call, file_path: str, offset: int, limit: int) -> ReadResult:
        # A binary file past the preview size is refused from its size alone: never transferred.
        max_bytes = MAX_BINARY_BYTES if is_binary_path(file_path) else None
        try:
            fetched = await self._fetch(call, [file_path], max_bytes=max_bytes)
        except SandboxError as exc:
            return ReadResult(error=f"File '{file_path}': {exc}")
        if file_path in fetched.errors:
            error = fetched.errors[file_path]
            return (
                binary_too_large(file_path)
                if error == "too_large"
                else read_error(file_path, error)
            )
        return read_page(file_path, fetched.data[file_path], offset, limit)

    # -- write and edit ----------------------------------------------------------------------

    def write(self, file_path: str, content: str) -> WriteResult:
        """Create or overwrite a file (parents are created), as Deep Agents 0.7 does."""
        return self._sync(lambda call: self._awrite(call, file_path, content))

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        """Async twin of `write`."""
        return await self._async(lambda call: self._awrite(call, file_path, content))

    async def _awrite(self, call: Call, file_path: str, content: str) -> WriteResult:
        [response] = await self._aupload(call, [(file_path, content.encode("utf-8"))])
        if response.error is not None:
            return WriteResult(error=write_error(file_path, response.error))
        return WriteResult(path=response.path)

    def edit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        """Replace ``old_string`` by ``new_string`` (once, or everywhere with ``replace_all``)."""
        return self._sync(
            lambda call: self._aedit(call, file_path, old_string, new_string, replace_all)
        )

    async def aedit(
        self,
        file_path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
    ) -> EditResult:
        """Async twin of `edit`."""
        return await self._async(
            lambda call: self._aedit(call, file_path, old_string, new_string, replace_all)
        )

    async def _aedit(
        self, call: Call, file_path: str, old: str, new: str, replace_all: bool
    ) -> EditResult:
        target = sandbox_path(file_path)
        if target is None:
            return EditResult(error=not_absolute(file_path))
        inside = in_workspace(target)

        async def _edit(session: Session) -> EditResult:
            fetched = await fetch_on(session, {file_path: target}, max_bytes=None)
            if file_path in fetched.errors:
                return EditResult(error=edit_error(file_path, fetched.errors[file_path]))
            updated, result = replace_in(
                file_path, fetched.data[file_path], old, new, replace_all=replace_all
            )
            if result.error is not None:
                return result
            if inside:
                await session.write_files({target: updated})
                return result
            if code := (await write_outside(session, {target: updated})).get(target):
                return EditResult(error=edit_error(file_path, code))
            return dataclasses.replace(result, path=outside_note(file_path))

        try:
            return (await self._on_session(call, _edit, mutates=inside)).value
        except SandboxError as exc:
            return EditResult(error=f"Error editing file '{file_path}': {exc}")

    # -- upload and download -----------------------------------------------------------------

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each ``(path, bytes)``; one response per file, in order, errors per file."""
        return self._sync(lambda call: self._aupload(call, files))

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Async twin of `upload_files`."""
        return await self._async(lambda call: self._aupload(call, files))

    async def _aupload(
        self, call: Call, files: Sequence[tuple[str, bytes]]
    ) -> list[FileUploadResponse]:
        errors, targets, outside = sort_uploads(files)

        async def _write(session: Session) -> None:
            if targets:
                await write_workspace(session, files, targets, errors)
            if outside:
                # The last of several uploads to one path wins, as with the file API.
                latest = {target: bytes(files[i][1]) for i, target in outside.items()}
                codes = await write_outside(session, latest)
                errors.update({i: codes[t] for i, t in outside.items() if t in codes})

        if targets or outside:
            try:
                await self._on_session(call, _write, mutates=bool(targets))
            except SandboxError as exc:
                for index in (*targets, *outside):
                    errors.setdefault(index, f"Error: {exc}")
        return [
            FileUploadResponse(
                path=outside_note(p) if i in outside and i not in errors else p,
                error=errors.get(i),
            )
            for i, (p, _) in enumerate(files)
        ]

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """The bytes of each path; one response per path, in order, errors per path."""
        return self._sync(lambda call: self._adownload(call, paths))

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Async twin of `download_files`."""
        return await self._async(lambda call: self._adownload(call, paths))

    async def _adownload(self, call: Call, paths: Sequence[str]) -> list[FileDownloadResponse]:
        try:
            fetched = await self._fetch(call, paths, max_bytes=None)
        except SandboxError as exc:
            return [FileDownloadResponse(path=p, error=f"Error: {exc}") for p in paths]
        return [
            FileDownloadResponse(path=p, content=fetched.data.get(p), error=fetched.errors.get(p))
            for p in paths
        ]

    async def _fetch(self, call: Call, paths: Sequence[str], *, max_bytes: int | None) -> Fetched:
        targets: dict[str, str] = {}
        invalid: list[str] = []
        for path in paths:
            target = sandbox_path(path)
            if target is None:
                invalid.append(path)
            else:
                targets[path] = target

        async def _read(session: Session) -> Fetched:
            return await fetch_on(session, targets, max_bytes=max_bytes)

        fetched = (
            (await self._on_session(call, _read, mutates=False)).value if targets else Fetched()
        )
        for path in invalid:
            fetched.errors[path] = "invalid_path"
        return fetched


__all__ = ["NotedPath", "SandboxBackend"]
