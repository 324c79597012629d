"""A stateful Python worker shipped into a remote sandbox that offers only commands and files.

Runloop devboxes and Kubernetes agent-sandbox pods have no kernel API: they run a command and
move files. Stateful Python therefore runs in a small interpreter inside the sandbox
(`langchain_sandbox.providers.guest.command_worker`, shipped as one standalone script), started in the
background by the first ``run_code`` and reached by one short command per call, which prints one
answer line. `WorkerSession` is everything above the transport: the worker's protocol (code,
commands, listings, change listings, variables), files through the worker, the head marker
carried with the user's own call. A provider's session adds how one command runs (`execute`),
how its output is read (`_stdout_of`), how a file moves (`_upload`, `_download`) and what
``_ready`` means (a closed session, a suspended devbox).

Why one module over 500 lines: it is one protocol, the host side of ``command_worker``'s
operations (each a request, its answer, and what a timeout or a missing worker means), moved here
whole from the Runloop provider so that Kubernetes pods speak it too; splitting it by operation
would scatter the one place that says how a call reaches the worker.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import hashlib
import inspect
import json
import mimetypes
import posixpath
import shlex
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from langchain_sandbox.core.workspace import WORKSPACE_ROOT, resolve_path
from langchain_sandbox.errors import (
    InvalidPathError,
    SandboxError,
    SandboxTimeoutError,
)
from langchain_sandbox.providers import _file_archive
from langchain_sandbox.providers.base import (
    FileInfo,
    OutputCallback,
    SessionRecord,
    SessionSpec,
    VariablesDump,
)
from langchain_sandbox.providers.guest import cells as guest
from langchain_sandbox.providers.guest import changes as guest_changes
from langchain_sandbox.providers.guest import command_worker as _shipped_worker
from langchain_sandbox.providers.guest import packer, process_groups
from langchain_sandbox.providers.guest import tool_frames as guest_tool_frames
from langchain_sandbox.providers.guest import unpack as guest_unpack
from langchain_sandbox.providers.guest import variables as kernel_state
from langchain_sandbox.providers.guest_facts import (
    checked_count,
    failure_text,
    figure_notices,
    variable_names,
)
from langchain_sandbox.providers.remote import (
    ChangesReply,
    RemoteProvider,
    RemoteSession,
)
from langchain_sandbox.providers.tool_channel import held_back
from langchain_sandbox.results import (
    DEFAULT_CAPTURE_BYTES,
    Artifact,
    ExecutionError,
    ExecutionResult,
    OutputCapture,
)

WORKER_DIR = "/tmp/langchain_sandbox"
"""Where the in-sandbox worker lives; outside the workspace so snapshots and listings ignore it."""

_WORKER_MISSING_EXIT = 86
WORKER_SLACK = 20.0
"""Seconds a worker call may take beyond the user's timeout (start-up, the answer, the kill)."""
_MAX_INLINE_REQUEST = 64 * 1024
_INTERPRETER_OPS = frozenset({"code", "dump", "load", "save"})


def worker_script() -> str:
    """The worker program, standalone: the package imports it makes are replaced by the code
    itself (the output capture and the change listing inline, the guest modules as sources it
    builds on demand)."""
    inlined = "\n".join(
        [
            "_SHIPPED = {}",
            f"SHIPPED_SOURCES = {_shipped_sources()!r}",
            "def _cloudpickle():",
            "    return _unpacked('cloudpickle')",
            f"DEFAULT_CAPTURE_BYTES = {DEFAULT_CAPTURE_BYTES}",
            inspect.getsource(OutputCapture),
            packer.shipped_part(guest_changes),
            packer.shipped_part(process_groups),
            packer.shipped_part(guest_unpack),
        ]
    )
    return packer.standalone(_shipped_worker, inlined)


def _shipped_sources() -> dict[str, str]:
    """The modules the worker builds in the sandbox, packed (the script travels in a command
    line, whose length is bounded)."""
    sources = {
        "kernel_state": packer.module_source(kernel_state),
        "guest": packer.module_source(guest),
        "guest_tool_frames": packer.module_source(guest_tool_frames),
        "cloudpickle": packer.cloudpickle_source(),
    }
    return {name: packer.packed_source(source) for name, source in sources.items()}


class CodeToolChannel(Protocol):
    """Where one code execution's tool calls are answered (Runloop: its stdin); the worker is
    told the tools' ``specs``."""

    specs: list[dict[str, Any]]


class ShippedWorker:
    """The worker program one provider ships: its source, and where it lives in a sandbox (the
    file name carries the source's hash, so a sandbox never runs another version's worker)."""

    def __init__(self) -> None:
        self.script = worker_script()
        digest = hashlib.sha256(self.script.encode()).hexdigest()[:12]
        self.module = f"worker_{digest}"
        self.path = f"{WORKER_DIR}/{self.module}.py"

    @property
    def launcher(self) -> str:
        """Python that imports the worker as a module (so its bytecode is cached) and runs it."""
        return (
            f"import sys; sys.path.insert(0, {WORKER_DIR!r}); "
            f"import {self.module} as worker; worker.main(sys.argv)"
        )


class WorkerSession(RemoteSession, abc.ABC):
    """A session whose Python, listings and variables go through the shipped worker; see the
    module docstring for what a provider adds.

    Subclasses set ``provider_name``, ``capabilities`` and ``noun`` (how messages name the
    sandbox: ``"devbox"``, ``"pod"``).
    """

    noun = "sandbox"
    # A listing carries each changed file up to the dump's inline size: the worker's answer is
    # one bounded line.
    bundle_file_bytes = _shipped_worker.INLINE_DUMP_BYTES

    def __init__(
        self,
        provider: RemoteProvider,
        worker: ShippedWorker,
        *,
        sandbox_id: str,
        session_id: str,
        spec: SessionSpec,
        created_at: float,
        state: dict[str, Any],
    ) -> None:
        self._provider = provider
        self._shipped = worker
        self._sandbox_id = sandbox_id
        self.session_id = session_id
        self.spec = spec
        self._created_at = created_at
        self._state = state
        self._closed = False
        self._worker_installed = False
        self._interpreter_turn = asyncio.Lock()
        self._staged_head: dict[str, str] | None = None
        self._carried_head: str | None = None

    @property
    def record(self) -> SessionRecord:
        return SessionRecord(
            provider=self.provider_name,
            session_id=self.session_id,
            sandbox_id=self._sandbox_id,
            created_at=self._created_at,
            metadata=dict(self.spec.metadata),
            state=json.loads(json.dumps(self._state)),
        )

    def carry_head(self, name: str, value: str) -> bool:
        """The next worker call sets the head global in the interpreter (every call goes through
        the worker, so a warm call stays one ``execute_async`` and its long-poll)."""
        self._staged_head = {"name": name, "value": value}
        return True

    @property
    def carried_head(self) -> str | None:
        return self._carried_head

    # ---- executions ---------------------------------------------------------------------------
    # ---- what a provider's transport supplies -------------------------------------------------

    @abc.abstractmethod
    async def _ready(self) -> None:
        """Raise if the session cannot take a call; bring a suspended sandbox back."""

    @abc.abstractmethod
    async def execute(
        self,
        command: str,
        *,
        wait: float,
        on_output: OutputCallback | None = None,
        tools: CodeToolChannel | None = None,
    ) -> tuple[Any, bool]:
        """Run ``command`` (a shell command line) once, never retried (it may run user code);
        return its outcome (``exit_status``, ``stderr``; stdout through `_stdout_of`) and whether
        ``wait`` ran out. ``tools``: where the code's tool calls are answered, on a provider
        with ``capabilities.tools_from_code``."""

    @abc.abstractmethod
    async def _stdout_of(self, outcome: Any) -> str:
        """The whole stdout of an `execute` outcome."""

    @abc.abstractmethod
    async def _upload(self, path: str, data: bytes) -> None:
        """Write ``data`` to the absolute ``path`` in the sandbox."""

    @abc.abstractmethod
    async def _download(self, given: str, path: str, *, limit: int | None = None) -> bytes:
        """Read the absolute ``path`` (``given`` names it in errors), at most ``limit`` bytes."""

    async def _put(self, path: str, data: bytes) -> None:
        """`_upload`, the first time after loading the MIME tables off the event loop: both
        SDKs send a file as an httpx multipart part, whose type httpx guesses, and the first
        guess reads the system's tables from disk."""
        if not mimetypes.inited:
            await asyncio.to_thread(mimetypes.init)
        await self._upload(path, data)

    # ---- the worker -------------------------------------------------------------------------

    async def install_worker(self) -> None:
        """Put the worker program in the sandbox (and check that it has ``python3``)."""
        payload = base64.b64encode(self._shipped.script.encode()).decode()
        path = self._shipped.path
        command = (
            f"mkdir -p {WORKER_DIR} && printf %s {payload} | base64 -d > {path}.tmp && "
            f"mv {path}.tmp {path} && python3 -c "
            + shlex.quote(
                # Compiled once here: later calls import the cached bytecode even where the
                # environment turns bytecode writing off.
                f"import py_compile, sys; py_compile.compile({path!r}, doraise=True); "
                "sys.exit(sys.version_info < (3, 8))"
            )
        )
        view, _ = await self.execute(command, wait=120.0)
        if view.exit_status != 0:
            raise SandboxError(
                f"The {self.noun} cannot run the Python worker (it needs python3 >= 3.8, base64 and a "
                f"writable {WORKER_DIR}); exit {view.exit_status}: {(view.stderr or '')[-500:]}",
                provider=self.provider_name,
            )
        self._worker_installed = True

    async def _worker_missing(self) -> None:
        """The worker's file is not in the sandbox: install it. A provider whose sandbox can be
        replaced under a live session (a Kubernetes pod started again) says it is gone instead."""
        await self.install_worker()

    async def worker(
        self,
        op: str,
        request: dict[str, Any],
        *,
        wait: float,
        on_output: OutputCallback | None = None,
        interpreter: bool = False,
        tools: CodeToolChannel | None = None,
    ) -> dict[str, Any]:
        """Run one worker operation; ``{"timed_out": True}`` when ``wait`` ran out.

        Calls to the interpreter (its operations, and any other that says it talks to the
        ``interpreter``) take turns: it runs one cell at a time, and a call kept waiting behind
        another would count that wait against its own timeout.
        """
        if interpreter or op in _INTERPRETER_OPS:
            async with self._interpreter_turn:
                return await self._worker(op, request, wait=wait, on_output=on_output, tools=tools)
        return await self._worker(op, request, wait=wait, on_output=on_output)

    async def _worker(
        self,
        op: str,
        request: dict[str, Any],
        *,
        wait: float,
        on_output: OutputCallback | None = None,
        tools: CodeToolChannel | None = None,
    ) -> dict[str, Any]:
        staged = self._staged_head
        if staged is not None:
            request = {**request, "head": staged}
        argument = base64.b64encode(json.dumps(request).encode()).decode()
        if len(argument) > _MAX_INLINE_REQUEST:
            if not self._worker_installed:
                await self.install_worker()
            remote = f"{WORKER_DIR}/request-{uuid.uuid4().hex}.json"
            await self._put(remote, json.dumps(request).encode())
            argument = "@" + remote
        path = self._shipped.path
        command = (
            f"[ -f {path} ] || exit {_WORKER_MISSING_EXIT}; "
            f"cd {WORKSPACE_ROOT} && python3 -c {shlex.quote(self._shipped.launcher)} "
            f"{op} {argument}"
        )
        view, timed_out = await self.execute(command, wait=wait, on_output=on_output, tools=tools)
        if timed_out:
            return {"timed_out": True, "stdout": "", "stderr": "", "late": True}
        if view.exit_status == _WORKER_MISSING_EXIT:
            await self._worker_missing()
            view, timed_out = await self.execute(
                command, wait=wait, on_output=on_output, tools=tools
            )
            if timed_out:
                return {"timed_out": True, "stdout": "", "stderr": "", "late": True}
        output = await self._stdout_of(view)
        marker = _shipped_worker.RESULT_MARKER
        lines = [line for line in output.splitlines() if line.startswith(marker)]
        if not lines:
            raise SandboxError(
                f"The {self.noun} worker gave no answer (exit {view.exit_status}; its stderr ends: "
                f"{(view.stderr or '')[-500:]!r}).",
                provider=self.provider_name,
            )
        answer: dict[str, Any] = json.loads(lines[-1][len(marker) :])
        if "failure" in answer:
            raise SandboxError(
                f"The {self.noun} worker failed: {failure_text(answer['failure'])}.",
                provider=self.provider_name,
            )
        if staged is not None and self._staged_head is staged and "not_running" not in answer:
            self._staged_head, self._carried_head = None, staged["value"]
        return answer

    # ---- the contract -------------------------------------------------------------------------

    async def _run_code(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
        tools: CodeToolChannel | None = None,
    ) -> ExecutionResult:
        """``tools``: the channel of code that calls host tools (the provider's
        ``_run_code_with_tools`` makes it)."""
        await self._ready()
        request = {
            "code": code,
            "timeout": timeout,
            "env": env,
            "max_output_bytes": self.spec.limits.max_output_bytes,
            **({"tools": tools.specs} if tools is not None else {}),
        }
        answer = await self.worker(
            "code",
            {**request, "stream": on_output is not None},
            wait=timeout + _shipped_worker.KILL_GRACE + WORKER_SLACK,
            on_output=on_output,
            tools=tools,
        )
        return _result("code", answer, timeout, self.noun)

    async def _run_command(
        self,
        command: str,
        *,
        timeout: float,
        env: dict[str, str],
        cwd: str,
        on_output: OutputCallback | None,
    ) -> ExecutionResult:
        await self._ready()
        request = {
            "command": command,
            "cwd": cwd,
            "env": env,
            "timeout": timeout,
            "max_output_bytes": self.spec.limits.max_output_bytes,
        }
        answer = await self.worker(
            "cmd",
            {**request, "stream": on_output is not None},
            wait=timeout + 2 * _shipped_worker.KILL_GRACE + WORKER_SLACK,
            on_output=on_output,
        )
        if "missing" in answer:
            raise InvalidPathError(f"The working directory {cwd} does not exist.")
        return _result("command", answer, timeout, self.noun)

    async def _shell(self, command: str, what: str) -> None:
        view, timed_out = await self.execute(command, wait=120.0)
        if timed_out or view.exit_status != 0:
            raise SandboxError(
                f"{what} failed in the {self.noun}: {(view.stderr or '')[-500:]}",
                provider=self.provider_name,
            )

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        """Small files go as archives the worker unpacks (one upload and one command per
        archive, see `_file_archive`); a large file, or one or two small ones, one upload each."""
        resolved = {resolve_path(path): bytes(data) for path, data in files.items()}
        await self._ready()
        archives, alone = _file_archive.packed_groups(resolved)
        for paths in archives:
            await self._write_archive(resolved, paths)
        parents = sorted({posixpath.dirname(path) for path in alone} - {WORKSPACE_ROOT})
        if parents:
            await self._shell(f"mkdir -p -- {shlex.join(parents)}", "Creating directories")
        for path in alone:
            await self._put(path, resolved[path])

    async def _write_archive(self, files: Mapping[str, bytes], paths: list[str]) -> None:
        """One upload of the archive of ``paths`` into the worker's directory (outside the
        workspace) and one ``unpack``, which deletes it; so does the host if the worker did
        not answer."""
        if _file_archive.tar_bytes(files, paths) > _file_archive.THREAD_BYTES:
            archive = await asyncio.to_thread(_file_archive.pack, files, paths)
        else:
            archive = _file_archive.pack(files, paths)
        if not self._worker_installed:
            await self.install_worker()
        remote = f"{WORKER_DIR}/files-{uuid.uuid4().hex}.tar.gz"
        answered = False
        try:
            await self._put(remote, archive)
            answer = await self.worker("unpack", {"path": remote}, wait=120.0)
            answered = not answer.get("timed_out")
        finally:
            if not answered:
                with contextlib.suppress(Exception):
                    await self.execute(f"rm -f -- {remote}", wait=30.0)
        if not answered:
            raise SandboxTimeoutError("Writing files timed out.", provider=self.provider_name)
        error = _file_archive.unpack_error(answer, paths, self.noun, self.provider_name)
        if error is not None:
            raise error

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        resolved = [(path, resolve_path(path)) for path in paths]
        await self._ready()
        return {path: await self._download(path, absolute) for path, absolute in resolved}

    async def list_files(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        absolute = resolve_path(path)
        await self._ready()
        answer = await self.worker("ls", {"path": absolute, "recursive": recursive}, wait=120.0)
        if answer.get("timed_out"):
            raise SandboxTimeoutError("Listing files timed out.", provider=self.provider_name)
        if "missing" in answer:
            raise InvalidPathError(f"No such path in the workspace: {path}")
        return [FileInfo(**entry) for entry in answer["entries"]]

    async def _ask_changes(
        self, request: dict[str, Any], variables_max_bytes: int | None
    ) -> ChangesReply:
        """One worker call (``changes``). Sent itself, a listing over the inline request limit
        costs one upload; a dump over the inline size costs its downloads."""
        await self._ready()
        if variables_max_bytes is not None:  # the dump waits for a running cell
            request = {**request, "variables_max_bytes": variables_max_bytes}
        answer = await self.worker(
            "changes", request, wait=120.0, interpreter=variables_max_bytes is not None
        )
        if answer.get("timed_out"):
            raise SandboxTimeoutError("Listing files timed out.", provider=self.provider_name)
        if answer.get("stale") or "missing" in answer:
            return ChangesReply(answer)
        variables = (
            None
            if variables_max_bytes is None
            else await self._variables(answer["variables"], variables_max_bytes)
        )
        contents = {path: base64.b64decode(data) for path, data in answer["contents"].items()}
        return ChangesReply(answer, contents, variables)

    async def remove_files(self, paths: Sequence[str]) -> None:
        resolved = [resolve_path(path) for path in paths]
        if WORKSPACE_ROOT in resolved:
            raise InvalidPathError("The workspace root itself cannot be removed.")
        if not resolved:
            return
        await self._ready()
        await self._shell(f"rm -rf -- {shlex.join(resolved)}", "Removing files")

    async def _dump_variables(self, max_bytes: int) -> VariablesDump:
        await self._ready()
        answer = await self.worker("dump", {"max_bytes": max_bytes}, wait=120.0)
        return await self._variables(answer, max_bytes)

    async def _variables(self, answer: dict[str, Any], max_bytes: int) -> VariablesDump:
        """The dump the interpreter answered: inline, or left in files to download."""
        if answer.get("timed_out"):
            raise SandboxTimeoutError("Capturing variables timed out.", provider=self.provider_name)
        if "error" in answer:  # the interpreter exited while dumping
            raise SandboxError(
                "Capturing variables failed (the sandbox says: "
                f"{str(answer['error']['value'])[:200]!r}).",
                provider=self.provider_name,
            )
        if "paths" in answer:  # a large dump is files of the sandbox, not a line of output
            data = b"".join(
                [
                    await self._download("the variables dump", path, limit=max_bytes)
                    for path in answer["paths"]
                ]
            )
        else:
            data = base64.b64decode(answer["data"])
        if len(data) != answer["size"]:
            raise SandboxError(
                f"The variables dump is {len(data)} bytes, not the {answer['size']} announced.",
                provider=self.provider_name,
            )
        reasons = {str(name): str(why) for name, why in answer["skipped"].items()}
        return VariablesDump(
            data=data, saved=tuple(answer["saved"]), skipped=tuple(reasons), reasons=reasons
        )

    async def _load_variables(self, data: bytes) -> dict[str, str]:
        await self._ready()
        remote = f"{WORKER_DIR}/variables-{uuid.uuid4().hex}.pkl"
        if not self._worker_installed:
            await self.install_worker()
        await self._put(remote, data)
        answer = await self.worker("load", {"path": remote}, wait=120.0)
        if answer.get("timed_out"):
            raise SandboxTimeoutError("Restoring variables timed out.", provider=self.provider_name)
        return {str(name): str(why) for name, why in answer["failed"].items()}


class AnswerCut:
    """Passes a worker's stdout on until the line that carries its answer (never shown)."""

    _SENTINEL = "\n" + _shipped_worker.RESULT_MARKER

    def __init__(self) -> None:
        self._pending = ""
        self.done = False

    def feed(self, text: str) -> str:
        if self.done:
            return ""
        self._pending += text
        index = self._pending.find(self._SENTINEL)
        if index >= 0:
            self.done = True
            return self._pending[:index]
        # Hold back what could be the start of the answer line, split across chunks.
        keep = held_back(self._pending, self._SENTINEL)
        passed = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return passed


def _result(kind: str, answer: dict[str, Any], timeout: float, noun: str) -> ExecutionResult:
    error = answer.get("error")
    timed_out = bool(answer.get("timed_out"))
    notices = _worker_notices(answer, noun)
    if answer.get("late"):
        notices.append(f"The {noun} did not answer within {timeout:.0f}s; the call was stopped.")
    exit_code = answer.get("exit_code") if kind == "command" else (1 if error else 0)
    omitted = checked_count(answer.get("omitted"), "omitted")
    return ExecutionResult(
        kind="code" if kind == "code" else "command",
        stdout=answer.get("stdout", ""),
        stderr=answer.get("stderr", ""),
        exit_code=None if timed_out else exit_code,
        error=ExecutionError(**error) if error else None,
        value=answer.get("value"),
        artifacts=[
            Artifact(name=item["name"], mime_type="image/png", data=item["data"])
            for item in answer.get("artifacts") or []
        ],
        duration_ms=float(answer.get("duration_ms") or timeout * 1000 * timed_out),
        timed_out=timed_out,
        truncated=bool(omitted),
        omitted_bytes=omitted,
        notices=notices,
    )


_GONE = "variables defined earlier are gone."


def _worker_notices(answer: dict[str, Any], noun: str) -> list[str]:
    """The host's notices for the facts the sandbox's worker reports (it sends no sentences: the
    sandbox runs the user's code, which could write anything there, see guest_facts)."""
    notices: list[str] = []
    if answer.get("restarted") is True:
        notices.append(f"The Python interpreter had stopped and was restarted; {_GONE}")
    if answer.get("killed_after_timeout") is True:
        notices.append(
            "The code did not stop when interrupted, so the Python interpreter was restarted; "
            + _GONE
        )
    resumed = answer.get("resumed")
    if isinstance(resumed, dict) and resumed.get("failed") is True:
        notices.append("Python variables saved before suspend could not be restored.")
    elif isinstance(resumed, dict):
        lost = variable_names(resumed.get("lost"))
        notices.append(
            f"Python variables were restored after the {noun} resumed"
            + (f" (not restored: {lost})" if lost else "")
        )
    notices += figure_notices(answer.get("figures_failed"), answer.get("figures_left_out"))
    return notices


__all__ = [
    "WORKER_DIR",
    "WORKER_SLACK",
    "AnswerCut",
    "ShippedWorker",
    "WorkerSession",
    "worker_script",
]
