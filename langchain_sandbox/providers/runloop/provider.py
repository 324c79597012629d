"""Runloop devboxes behind the provider contract, over ``runloop_api_client``'s async SDK.

A session is one devbox. Runloop offers shell commands, files, suspend/resume and disk snapshots,
but no kernel, so stateful Python runs in a small interpreter inside the devbox
(`langchain_sandbox.providers.runloop._worker`), started in the background by the first
``run_code`` and reached by one short command per call. Every call is one ``execute_async``
request plus one ``wait_for_status`` long-poll while it runs (two HTTP requests for a warm call).

What this module guarantees:

* The SDK is imported only when a provider is built; without it, [`MissingDependencyError`][langchain_sandbox.MissingDependencyError]
  names the ``runloop`` extra.
* The API key comes from ``api_key=`` or the SDK's own ``RUNLOOP_API_KEY``; it is never stored in
  a record, a result, a log line or a repr.
* The SDK's hidden retries are off (``max_retries=0``): a 5xx on ``execute_async`` must not run
  user code twice. Operations safe to repeat (create, attach, reads, listing, uploads, snapshots,
  suspend, shutdown) are retried by `retry_async` instead, only
  for retryable errors and within a deadline.
* SDK errors become `langchain_sandbox.errors` in one place, `_translate`.

Why one module over 500 lines: the provider and its session share the execution plumbing (one
``execute_async`` per call, the long-poll, live output, telling a refusal from a gone devbox);
moving ``RunloopSession`` into a ``session.py`` of its own, as ``providers/local`` does, is the
next split.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import posixpath
import shlex
import time
import uuid
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

from langchain_sandbox.environment import validate_env
from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    InvalidPathError,
    ProviderUnavailableError,
    ProviderUnreachableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
    SessionClosedError,
)
from langchain_sandbox.network import refuse_policy
from langchain_sandbox.providers import guest, guest_changes, guest_tool_frames, kernel_state
from langchain_sandbox.providers.base import (
    Capabilities,
    ChangeListing,
    FileInfo,
    Limits,
    OutputCallback,
    SessionRecord,
    SessionSpec,
    VariablesDump,
    check_port,
    install_spec_packages,
)
from langchain_sandbox.providers.guest_facts import (
    checked_count,
    failure_text,
    figure_notices,
    variable_names,
)
from langchain_sandbox.providers.names import RUNLOOP as PROVIDER_NAME
from langchain_sandbox.providers.remote import (
    SESSION_KEY,
    TAG_KEY,
    RemoteProvider,
    RemoteSession,
    change_listing,
    known_reference,
    load_sdk,
    read_tags,
    tag_metadata,
)
from langchain_sandbox.providers.runloop import _tunnels
from langchain_sandbox.providers.runloop import _worker as _runloop_worker
from langchain_sandbox.providers.runloop._tool_channel import (
    StdinReplies,
    follow,
    run_code_with_tools,
)
from langchain_sandbox.providers.shipped_pickler import cloudpickle_source
from langchain_sandbox.results import (
    DEFAULT_CAPTURE_BYTES,
    Artifact,
    ExecutionError,
    ExecutionResult,
    OutputCapture,
)
from langchain_sandbox.retries import DEFAULT_ATTEMPTS, retry_async
from langchain_sandbox.workspace import WORKSPACE_ROOT, resolve_path

T = TypeVar("T")

WORKER_DIR = "/tmp/langchain_sandbox"
"""Where the in-devbox worker lives; outside the workspace so snapshots and listings ignore it."""

_WORKER_MISSING_EXIT = 86
_MAX_HOLD_SECONDS = 25
_LONG_POLL_BUFFER = 5.0
_WORKER_SLACK = 20.0
_FOLLOW_GRACE = 5.0
_MAX_INLINE_REQUEST = 64 * 1024
_MAX_RESULT_BYTES = 128 * 1024 * 1024
# A listing with changed files carries each file up to the dump's inline size, and no more in all
# than a bounded answer line (the rest is downloaded one request per file, as before).
_BUNDLE_FILE_BYTES = _runloop_worker.INLINE_DUMP_BYTES
_BUNDLE_BYTES = 16 * 1024 * 1024
_LISTED_STATUSES = (
    "queued",
    "provisioning",
    "initializing",
    "running",
    "suspending",
    "suspended",
    "resuming",
)
_INTERPRETER_OPS = frozenset({"code", "dump", "load", "save"})
_LIVE_STATUSES = frozenset({"running", "suspending", "suspended", "resuming"})
_BOOTING_STATUSES = frozenset({"scheduled", "queued", "provisioning", "initializing", "resuming"})

logger = logging.getLogger(__name__)

CAPABILITIES = Capabilities(
    stateful_python=True,
    shell=True,
    network_control=False,
    install_packages=True,
    figures=True,
    variables=True,
    pause=True,
    pause_keeps_memory=False,
    attach_across_processes=True,
    native_snapshots=True,
    processes=True,
    ports=True,
    tools_from_code=True,
)


def _sdk() -> Any:
    """The ``runloop_api_client`` module, or a clear error naming the extra that brings it."""
    return load_sdk(
        "runloop_api_client",
        package="runloop-api-client",
        extra="runloop",
        purpose="The Runloop provider",
    )


def _worker_script() -> str:
    """The worker program, standalone: the package imports it makes are replaced by the code
    itself (the output capture and the change listing inline, the kernel-state module as source
    it loads on demand)."""
    worker = inspect.getsource(_runloop_worker)
    start, end = "# <package-imports>", "# </package-imports>"
    inlined = "\n".join(
        [
            "_SHIPPED = {}",
            f"SHIPPED_SOURCES = {_shipped_sources()!r}",
            "def _cloudpickle():",
            "    return _unpacked('cloudpickle')",
            f"DEFAULT_CAPTURE_BYTES = {DEFAULT_CAPTURE_BYTES}",
            inspect.getsource(OutputCapture),
            guest_changes.shipped_source(),
        ]
    )
    return worker[: worker.index(start)] + inlined + worker[worker.index(end) + len(end) :]


def _shipped_sources() -> dict[str, str]:
    """The modules the worker builds in the devbox, compressed (the script travels in a command
    line, whose length is bounded)."""
    sources = {
        "kernel_state": inspect.getsource(kernel_state),
        "guest": inspect.getsource(guest),
        "guest_tool_frames": inspect.getsource(guest_tool_frames),
        "cloudpickle": cloudpickle_source(),
    }
    return {
        name: base64.b64encode(zlib.compress(source.encode(), 9)).decode()
        for name, source in sources.items()
    }


def _translate(exc: BaseException, *, what: str) -> SandboxError:
    """Map an SDK or transport error to the package's taxonomy (the one place that does)."""
    if isinstance(exc, SandboxError):
        return exc
    sdk = _sdk()
    from runloop_api_client.lib.polling import PollingTimeout

    details: dict[str, Any] = {}
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        details["status"] = status
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = f"Runloop {what} failed: {message}"
    if isinstance(exc, sdk.RateLimitError):
        return QuotaExceededError(text, provider=PROVIDER_NAME, details=details)
    if isinstance(exc, (sdk.AuthenticationError, sdk.PermissionDeniedError)):
        return AuthenticationError(
            f"Runloop rejected the API key ({what}): {message}",
            provider=PROVIDER_NAME,
            details=details,
        )
    if isinstance(exc, sdk.NotFoundError):
        return SandboxGoneError(
            f"The Runloop devbox is gone ({what}): {message}",
            provider=PROVIDER_NAME,
            details=details,
        )
    if isinstance(exc, (sdk.APITimeoutError, PollingTimeout, asyncio.TimeoutError)):
        return SandboxTimeoutError(
            f"Runloop {what} timed out", provider=PROVIDER_NAME, details=details
        )
    if isinstance(exc, sdk.APIConnectionError):
        import httpx

        # No answer at all (refused, no route) is told from a connection lost mid-request.
        never_answered = isinstance(exc.__cause__, httpx.ConnectError)
        unreachable = ProviderUnreachableError if never_answered else ProviderUnavailableError
        return unreachable(
            f"Runloop could not be reached ({what})", provider=PROVIDER_NAME, details=details
        )
    if (
        isinstance(exc, sdk.APIStatusError)
        and status is not None
        and (status >= 500 or status in (408, 409))
    ):
        return ProviderUnavailableError(text, provider=PROVIDER_NAME, details=details)
    return SandboxError(text, provider=PROVIDER_NAME, details=details)


def _status_code(exc: BaseException) -> int | None:
    cause = exc.__cause__ if isinstance(exc, SandboxError) else exc
    status = getattr(getattr(cause, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _parse_template(template: str | None) -> dict[str, str]:
    """``snapshot:<id>``, ``blueprint_id:<id>``, ``blueprint:<name>`` or a bare blueprint name."""
    if not template:
        return {}
    kind, sep, value = template.partition(":")
    if sep and kind in ("snapshot", "snapshot_id"):
        return {"snapshot_id": value}
    if sep and kind == "blueprint_id":
        return {"blueprint_id": value}
    if sep and kind in ("blueprint", "blueprint_name"):
        return {"blueprint_name": value}
    return {"blueprint_name": template}


class RunloopProvider(RemoteProvider):
    """Sessions on Runloop devboxes.

    Args:
        api_key: Runloop API key; defaults to the SDK's ``RUNLOOP_API_KEY``.
        base_url: API URL; defaults to the SDK's ``RUNLOOP_BASE_URL``, then the public API.
        blueprint_id, blueprint_name, snapshot_id: Default image of new devboxes (a
            ``SessionSpec.template`` overrides them).
        launch_parameters: Runloop launch parameters (resource size, idle policy, keep-alive...).
        create_timeout: Seconds a devbox may take to reach ``running``.
        retry_attempts, retry_deadline: Bounds of the retries of safe operations.
    """

    name = PROVIDER_NAME
    capabilities = CAPABILITIES

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        blueprint_id: str | None = None,
        blueprint_name: str | None = None,
        snapshot_id: str | None = None,
        launch_parameters: Mapping[str, Any] | None = None,
        create_timeout: float = 300.0,
        retry_attempts: int = DEFAULT_ATTEMPTS,
        retry_deadline: float = 60.0,
    ) -> None:
        super().__init__(retry_attempts=retry_attempts, retry_deadline=retry_deadline)
        _sdk()
        if not (api_key or os.environ.get("RUNLOOP_API_KEY")):
            raise AuthenticationError(
                "No Runloop API key: pass api_key= to RunloopProvider or set RUNLOOP_API_KEY.",
                provider=PROVIDER_NAME,
            )
        self._api_key = api_key
        self._base_url = base_url
        self._image = {
            key: value
            for key, value in (
                ("blueprint_id", blueprint_id),
                ("blueprint_name", blueprint_name),
                ("snapshot_id", snapshot_id),
            )
            if value
        }
        self._launch_parameters = dict(launch_parameters or {})
        self.create_timeout = create_timeout
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}
        self.worker_script = _worker_script()
        digest = hashlib.sha256(self.worker_script.encode()).hexdigest()[:12]
        self.worker_module = f"worker_{digest}"
        self.worker_path = f"{WORKER_DIR}/{self.worker_module}.py"

    @property
    def worker_launcher(self) -> str:
        """Python that imports the worker as a module (so its bytecode is cached) and runs it."""
        return (
            f"import sys; sys.path.insert(0, {WORKER_DIR!r}); "
            f"import {self.worker_module} as worker; worker.main(sys.argv)"
        )

    def __repr__(self) -> str:
        return f"RunloopProvider(base_url={self._base_url!r})"

    # ---- the SDK client -----------------------------------------------------------------------

    def sdk(self) -> Any:
        """The ``AsyncRunloopSDK`` of the running event loop (async clients are bound to one)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            sdk = _sdk()
            try:
                client = sdk.AsyncRunloopSDK(
                    bearer_token=self._api_key, base_url=self._base_url, max_retries=0
                )
            except sdk.RunloopError as exc:
                raise AuthenticationError(
                    "No Runloop API key: pass api_key= or set RUNLOOP_API_KEY.",
                    provider=PROVIDER_NAME,
                ) from exc
            self._clients = {
                known: value for known, value in self._clients.items() if not known.is_closed()
            }
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def _translate(self, exc: BaseException, what: str, *, path: str | None) -> SandboxError:
        return _translate(exc, what=what)

    # ---- the contract -------------------------------------------------------------------------

    async def create(self, spec: SessionSpec | None = None) -> RunloopSession:
        return await self._create(spec or SessionSpec(), {})

    async def create_from_snapshot(
        self, snapshot_id: str, spec: SessionSpec | None = None
    ) -> RunloopSession:
        """A new devbox whose disk (and saved Python variables) is a Runloop disk snapshot's."""
        return await self._create(spec or SessionSpec(), {"snapshot_id": snapshot_id})

    async def _create(self, spec: SessionSpec, image: dict[str, str]) -> RunloopSession:
        refuse_policy(
            spec.network,
            "Runloop",
            offers="its network policies (allowed host names) are not mapped yet, and it has "
            "no secret placeholders",
        )
        session_id = uuid.uuid4().hex
        metadata = tag_metadata(spec.metadata, session_id)
        params: dict[str, Any] = {
            "name": f"langchain-sandbox-{session_id[:12]}",
            "metadata": metadata,
            **(image or _parse_template(spec.template) or self._image),
        }
        if spec.env:
            params["environment_variables"] = validate_env(spec.env)
        if self._launch_parameters:
            params["launch_parameters"] = self._launch_parameters
        from runloop_api_client.lib.polling import PollingConfig

        polling = PollingConfig(
            interval_seconds=1.0,
            max_attempts=max(1, math.ceil(self.create_timeout)),
            timeout_seconds=self.create_timeout,
        )

        async def attempt() -> Any:
            try:
                async with self._errors("devbox creation"):
                    return await self.sdk().api.devboxes.create_and_await_running(
                        **params, polling_config=polling
                    )
            except ProviderUnreachableError:
                raise  # the request never left: no devbox was made
            except SandboxError:
                # The request may have reached Runloop: a devbox half made must not leak.
                await self._shutdown_tagged(session_id)
                raise

        view = await retry_async(attempt, deadline=self.create_timeout)
        session = RunloopSession(
            self,
            devbox_id=view.id,
            session_id=session_id,
            spec=spec,
            created_at=view.create_time_ms / 1000,
            state={"limits": dataclasses.asdict(spec.limits)},
        )
        try:
            await session.install_worker()
        except BaseException:
            await session.close()
            raise
        await install_spec_packages(session)
        return session

    async def _shutdown_tagged(self, session_id: str) -> None:
        try:
            # A devbox this create made is among the newest: the first page is enough.
            first_page = await self.sdk().api.devboxes.list(limit=100)
            for view in first_page.devboxes:
                if view.metadata.get(SESSION_KEY) == session_id and view.status != "shutdown":
                    await self.sdk().api.devboxes.shutdown(view.id)
        except Exception as exc:
            # One line: the creation's own error is what the caller gets; the traceback of a
            # cleanup that could not reach Runloop either is for debugging only.
            logger.warning("could not clean up after a failed Runloop devbox creation: %r", exc)
            logger.debug("cleanup failure", exc_info=True)

    async def _live_views(self) -> list[Any]:
        """Devboxes not shut down, one status at a time: an account's history of shut-down
        devboxes can be long, and only live ones can be attached or cost anything."""

        async def listing(status: str) -> list[Any]:
            devboxes = self.sdk().api.devboxes
            return [view async for view in devboxes.list(limit=100, status=status)]

        views: list[Any] = []
        for status in _LISTED_STATUSES:
            views += await self._retry("listing devboxes", functools.partial(listing, status))
        return views

    async def _attach(self, record: SessionRecord) -> RunloopSession | None:
        devbox_id = record["sandbox_id"]
        try:
            view = await self._retry(
                "devbox lookup", lambda: self.sdk().api.devboxes.retrieve(devbox_id)
            )
        except SandboxGoneError:
            return None
        if view.status in ("shutdown", "failure"):
            return None
        state = dict(record.get("state") or {})
        limits = Limits(**state["limits"]) if isinstance(state.get("limits"), dict) else Limits()
        session = RunloopSession(
            self,
            devbox_id=devbox_id,
            session_id=record.get("session_id") or view.metadata.get(SESSION_KEY, devbox_id),
            spec=SessionSpec(limits=limits, metadata=dict(record.get("metadata") or {})),
            created_at=record.get("created_at", view.create_time_ms / 1000),
            state=state,
        )
        try:
            await session.wake(view.status)
        except SandboxGoneError:
            return None
        return session

    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        wanted = dict(metadata or {})
        records: list[SessionRecord] = []
        for view in await self._live_views():
            tags = dict(view.metadata or {})
            if tags.get(TAG_KEY) != "1":
                continue
            if any(tags.get(key) != value for key, value in wanted.items()):
                continue
            session_id, metadata = read_tags(tags, view.id)
            records.append(
                SessionRecord(
                    provider=PROVIDER_NAME,
                    session_id=session_id,
                    sandbox_id=view.id,
                    created_at=view.create_time_ms / 1000,
                    metadata=metadata,
                    state={"status": view.status},
                )
            )
        return records

    async def _destroy(self, record: SessionRecord) -> bool:
        devbox_id = record["sandbox_id"]
        try:
            view = await self._retry(
                "devbox lookup", lambda: self.sdk().api.devboxes.retrieve(devbox_id)
            )
            if view.status == "shutdown":
                return False
            await self._retry("shutdown", lambda: self.sdk().api.devboxes.shutdown(devbox_id))
        except SandboxGoneError:
            return False
        return True


class RunloopSession(RemoteSession):
    """One Runloop devbox; see the module docstring."""

    provider_name = PROVIDER_NAME
    capabilities = CAPABILITIES
    lists_variables = True

    def __init__(
        self,
        provider: RunloopProvider,
        *,
        devbox_id: str,
        session_id: str,
        spec: SessionSpec,
        created_at: float,
        state: dict[str, Any],
    ) -> None:
        self._provider = provider
        self.devbox_id = devbox_id
        self.session_id = session_id
        self.spec = spec
        self._created_at = created_at
        self._state = state
        self._closed = False
        self._paused = False
        self._worker_installed = False
        self._interpreter_turn = asyncio.Lock()
        self._staged_head: dict[str, str] | None = None
        self._carried_head: str | None = None

    def __repr__(self) -> str:
        return f"RunloopSession(devbox_id={self.devbox_id!r}, session_id={self.session_id!r})"

    @property
    def record(self) -> SessionRecord:
        return SessionRecord(
            provider=PROVIDER_NAME,
            session_id=self.session_id,
            sandbox_id=self.devbox_id,
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

    def _api(self) -> Any:
        return self._provider.sdk().api

    async def _ready(self) -> None:
        if self._closed:
            raise SessionClosedError("This Runloop session was closed.", provider=PROVIDER_NAME)
        if self._paused:
            await self.wake("suspended")

    async def execute(
        self,
        command: str,
        *,
        wait: float,
        on_output: OutputCallback | None = None,
        tools: StdinReplies | None = None,
    ) -> tuple[Any, bool]:
        """Run ``command`` once; return its final view and whether ``wait`` ran out.

        ``execute_async`` is sent exactly once (never retried: it runs code); the long-poll that
        follows only reads, so it is retried on transient errors. With ``on_output``, the
        execution's output streams (SSE) are followed meanwhile and passed on as they come, up to
        the worker's answer line. With ``tools``, stdin is attached and stdout followed for the
        code's tool calls (see `_tool_channel`).
        """
        stdin = {"attach_stdin": True} if tools is not None else {}
        try:
            async with self._provider._errors("execute_async"):
                view = await self._api().devboxes.execute_async(
                    self.devbox_id, command=command, **stdin
                )
        except SandboxError as exc:
            raise await self._diagnose(exc) from exc
        if tools is not None:
            tools.execution_id = view.execution_id
        streams: list[Literal["stdout", "stderr"]] = (
            ["stdout", "stderr"] if on_output else ["stdout"] if tools else []
        )
        followers = [
            asyncio.create_task(follow(self, view.execution_id, s, on_output, tools))
            for s in streams
        ]
        deadline = time.monotonic() + wait
        try:
            while view.status != "completed":
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    await self._kill(view.execution_id)
                    return view, True
                hold = max(1, min(_MAX_HOLD_SECONDS, math.ceil(remaining)))
                view = await self._provider._retry(
                    "wait_for_status", functools.partial(self._wait_once, view, hold)
                )
            if followers:
                # The streams end with the execution; give them a moment to deliver the rest.
                await asyncio.wait(followers, timeout=_FOLLOW_GRACE)
        finally:
            for follower in followers:
                follower.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
        return view, False

    async def _wait_once(self, current: Any, hold: int) -> Any:
        import httpx
        from runloop_api_client import APIStatusError

        try:
            return await self._api().devboxes.wait_for_command(
                current.execution_id,
                devbox_id=self.devbox_id,
                statuses=["completed"],
                timeout_seconds=hold,
                timeout=httpx.Timeout(hold + _LONG_POLL_BUFFER, connect=5.0),
            )
        except APIStatusError as exc:
            if exc.response.status_code == 408:
                return current
            raise

    async def _diagnose(self, exc: SandboxError) -> SandboxError:
        """A refusal of a devbox call: is the devbox gone (the usual cause), or something else?"""
        if isinstance(exc, SandboxGoneError) or exc.retryable:
            return exc
        try:
            async with self._provider._errors("devbox lookup"):
                view = await self._api().devboxes.retrieve(self.devbox_id)
        except SandboxGoneError as gone:
            return gone
        except SandboxError:
            return exc
        if view.status in ("shutdown", "failure"):
            return SandboxGoneError(
                f"The Runloop devbox {self.devbox_id} is {view.status}"
                + (f" ({view.shutdown_reason})" if view.shutdown_reason else "")
                + ".",
                provider=PROVIDER_NAME,
                details={"status": view.status},
            )
        return exc

    async def _kill(self, execution_id: str) -> None:
        try:
            async with self._provider._errors("kill"):
                await self._api().devboxes.executions.kill(execution_id, devbox_id=self.devbox_id)
        except SandboxError:
            logger.warning("could not kill Runloop execution %s", execution_id, exc_info=True)

    async def _stdout_of(self, view: Any) -> str:
        if not view.stdout_truncated:
            return str(view.stdout or "")

        async def stream() -> str:
            chunks: list[str] = []
            size = 0
            updates = await self._api().devboxes.executions.stream_stdout_updates(
                view.execution_id, devbox_id=self.devbox_id
            )
            async with updates:
                async for chunk in updates:
                    size += len(chunk.output)
                    if size > _MAX_RESULT_BYTES:
                        raise SandboxError(
                            "The devbox worker's answer is too large.", provider=PROVIDER_NAME
                        )
                    chunks.append(chunk.output)
            return "".join(chunks)

        return await self._provider._retry("reading output", stream)

    async def install_worker(self) -> None:
        """Put the worker program in the devbox (and check that the devbox has ``python3``)."""
        payload = base64.b64encode(self._provider.worker_script.encode()).decode()
        path = self._provider.worker_path
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
                "The devbox cannot run the Python worker (it needs python3 >= 3.8, base64 and a "
                f"writable {WORKER_DIR}); exit {view.exit_status}: {(view.stderr or '')[-500:]}",
                provider=PROVIDER_NAME,
            )
        self._worker_installed = True

    async def worker(
        self,
        op: str,
        request: dict[str, Any],
        *,
        wait: float,
        on_output: OutputCallback | None = None,
        interpreter: bool = False,
        tools: StdinReplies | None = None,
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
        tools: StdinReplies | None = None,
    ) -> dict[str, Any]:
        staged = self._staged_head
        if staged is not None:
            request = {**request, "head": staged}
        argument = base64.b64encode(json.dumps(request).encode()).decode()
        if len(argument) > _MAX_INLINE_REQUEST:
            if not self._worker_installed:
                await self.install_worker()
            remote = f"{WORKER_DIR}/request-{uuid.uuid4().hex}.json"
            await self._upload(remote, json.dumps(request).encode())
            argument = "@" + remote
        path = self._provider.worker_path
        command = (
            f"[ -f {path} ] || exit {_WORKER_MISSING_EXIT}; "
            f"cd {WORKSPACE_ROOT} && python3 -c {shlex.quote(self._provider.worker_launcher)} "
            f"{op} {argument}"
        )
        view, timed_out = await self.execute(command, wait=wait, on_output=on_output, tools=tools)
        if timed_out:
            return {"timed_out": True, "stdout": "", "stderr": "", "late": True}
        if view.exit_status == _WORKER_MISSING_EXIT:
            await self.install_worker()
            view, timed_out = await self.execute(
                command, wait=wait, on_output=on_output, tools=tools
            )
            if timed_out:
                return {"timed_out": True, "stdout": "", "stderr": "", "late": True}
        output = await self._stdout_of(view)
        marker = _runloop_worker.RESULT_MARKER
        lines = [line for line in output.splitlines() if line.startswith(marker)]
        if not lines:
            raise SandboxError(
                f"The devbox worker gave no answer (exit {view.exit_status}; its stderr ends: "
                f"{(view.stderr or '')[-500:]!r}).",
                provider=PROVIDER_NAME,
            )
        answer: dict[str, Any] = json.loads(lines[-1][len(marker) :])
        if "failure" in answer:
            raise SandboxError(
                f"The devbox worker failed: {failure_text(answer['failure'])}.",
                provider=PROVIDER_NAME,
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
        tools: StdinReplies | None = None,
    ) -> ExecutionResult:
        """``tools``: the channel of code that calls host tools (see `_tool_channel`)."""
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
            wait=timeout + _runloop_worker.KILL_GRACE + _WORKER_SLACK,
            on_output=on_output,
            tools=tools,
        )
        return _result("code", answer, timeout)

    _run_code_with_tools = run_code_with_tools  # over the provider's channel

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
            wait=timeout + 2 * _runloop_worker.KILL_GRACE + _WORKER_SLACK,
            on_output=on_output,
        )
        if "missing" in answer:
            raise InvalidPathError(f"The working directory {cwd} does not exist.")
        return _result("command", answer, timeout)

    async def _shell(self, command: str, what: str) -> None:
        view, timed_out = await self.execute(command, wait=120.0)
        if timed_out or view.exit_status != 0:
            raise SandboxError(
                f"{what} failed in the devbox: {(view.stderr or '')[-500:]}", provider=PROVIDER_NAME
            )

    async def _upload(self, path: str, data: bytes) -> None:
        async def upload() -> Any:
            return await self._api().devboxes.upload_file(
                self.devbox_id, path=path, file=(posixpath.basename(path), data)
            )

        try:
            await self._provider._retry("upload", upload)
        except SandboxError as exc:
            raise await self._diagnose(exc) from exc

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        resolved = {resolve_path(path): data for path, data in files.items()}
        await self._ready()
        parents = sorted({posixpath.dirname(path) for path in resolved} - {WORKSPACE_ROOT})
        if parents:
            await self._shell(f"mkdir -p -- {shlex.join(parents)}", "Creating directories")
        for path, data in resolved.items():
            await self._upload(path, bytes(data))

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        resolved = [(path, resolve_path(path)) for path in paths]
        await self._ready()
        return {path: await self._download(path, absolute) for path, absolute in resolved}

    async def _download(self, given: str, path: str, *, limit: int | None = None) -> bytes:
        limit = self.spec.limits.max_file_bytes if limit is None else limit

        async def download() -> bytes:
            data = bytearray()
            streaming = self._api().devboxes.with_streaming_response.download_file
            async with streaming(self.devbox_id, path=path) as response:
                async for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise InvalidInputError(
                            f"{given} is larger than the {limit}-byte read limit; "
                            "read parts of it with a command instead."
                        )
            return bytes(data)

        try:
            return await self._provider._retry("download", download)
        except SandboxError as exc:
            if _status_code(exc) not in (400, 404, 422):
                raise
            diagnosed = await self._diagnose(SandboxError(str(exc), provider=PROVIDER_NAME))
            if isinstance(diagnosed, SandboxGoneError):
                raise diagnosed from exc
            raise InvalidPathError(f"No such file in the workspace: {given}") from exc

    async def list_files(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        absolute = resolve_path(path)
        await self._ready()
        answer = await self.worker("ls", {"path": absolute, "recursive": recursive}, wait=120.0)
        if answer.get("timed_out"):
            raise SandboxTimeoutError("Listing files timed out.", provider=PROVIDER_NAME)
        if "missing" in answer:
            raise InvalidPathError(f"No such path in the workspace: {path}")
        return [FileInfo(**entry) for entry in answer["entries"]]

    async def list_changes(
        self,
        known: Mapping[str, FileInfo],
        *,
        max_bytes: int,
        variables_max_bytes: int | None = None,
        since: object | None = None,
    ) -> ChangeListing:
        """One worker call (``changes``): the worker compares the workspace with ``known`` and
        answers the changed entries, the gone paths, the changed files' contents and, when
        asked, the variables dump. ``known`` travels as the worker's token when ``since`` is
        the cursor it returned (`known_reference`);
        sent itself, a listing over the inline request limit costs one upload. A dump over the
        inline size costs its downloads."""
        await self._ready()
        request: dict[str, Any] = {
            "path": WORKSPACE_ROOT,
            "max_bytes": min(max_bytes, _BUNDLE_BYTES),
            "max_file_bytes": _BUNDLE_FILE_BYTES,
        }
        if variables_max_bytes is not None:
            request["variables_max_bytes"] = variables_max_bytes
        answer = await self._changes(request, known, since)
        if answer.get("stale"):  # the worker lost the listing the token named: send it
            answer = await self._changes(request, known, None)
        variables = (
            None
            if variables_max_bytes is None
            else await self._variables(answer["variables"], variables_max_bytes)
        )
        contents = {path: base64.b64decode(data) for path, data in answer["contents"].items()}
        return change_listing(answer, contents, variables)

    async def _changes(
        self, request: dict[str, Any], known: Mapping[str, FileInfo], since: object | None
    ) -> dict[str, Any]:
        request = {**request, **known_reference(known, since)}
        interpreter = "variables_max_bytes" in request  # the dump waits for a running cell
        answer = await self.worker("changes", request, wait=120.0, interpreter=interpreter)
        if answer.get("timed_out"):
            raise SandboxTimeoutError("Listing files timed out.", provider=PROVIDER_NAME)
        if "missing" in answer:
            raise InvalidPathError("The workspace is gone.")
        return answer

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
            raise SandboxTimeoutError("Capturing variables timed out.", provider=PROVIDER_NAME)
        if "error" in answer:  # the interpreter exited while dumping
            raise SandboxError(
                "Capturing variables failed (the sandbox says: "
                f"{str(answer['error']['value'])[:200]!r}).",
                provider=PROVIDER_NAME,
            )
        if "paths" in answer:  # a large dump is files of the devbox, not a line of output
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
                provider=PROVIDER_NAME,
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
        await self._upload(remote, data)
        answer = await self.worker("load", {"path": remote}, wait=120.0)
        if answer.get("timed_out"):
            raise SandboxTimeoutError("Restoring variables timed out.", provider=PROVIDER_NAME)
        return {str(name): str(why) for name, why in answer["failed"].items()}

    async def is_alive(self) -> bool:
        if self._closed:
            return False
        try:
            async with self._provider._errors("devbox lookup"):
                view = await self._api().devboxes.retrieve(self.devbox_id)
        except Exception:
            return False
        return view.status in _LIVE_STATUSES

    async def snapshot_disk(self, *, name: str | None = None) -> str:
        """Take a Runloop disk snapshot (files, and the picklable Python variables) and return its
        id, which the record keeps as ``state["disk_snapshot_id"]``.

        A devbox made from it with [`RunloopProvider.create_from_snapshot`][langchain_sandbox.RunloopProvider.create_from_snapshot] starts with these
        files, and its interpreter starts with these variables.
        """
        await self._ready()
        await self.worker("save", {"if_running": True}, wait=120.0)
        tags = {TAG_KEY: "1", SESSION_KEY: self.session_id}

        async def start() -> Any:
            return await self._api().devboxes.snapshot_disk_async(
                self.devbox_id,
                name=name or f"langchain-sandbox-{self.session_id[:12]}",
                metadata=tags,
            )

        started = await self._provider._retry("snapshot", start)
        from runloop_api_client.lib.polling import PollingConfig

        polling = PollingConfig(interval_seconds=0.5, max_attempts=1200, timeout_seconds=600)
        await self._provider._retry(
            "snapshot status",
            lambda: self._api().devboxes.disk_snapshots.await_completed(
                started.id, polling_config=polling
            ),
        )
        # The source keeps running with its variables in memory; the file was for the copy.
        saved = f"{WORKER_DIR}/{_runloop_worker.SAVED_NAME}"
        await self._shell(f"rm -f {saved} {saved}.skipped", "Cleaning up")
        self._state["disk_snapshot_id"] = started.id
        return str(started.id)

    async def wake(self, status: str) -> None:
        """Bring a suspended (or booting) devbox to ``running``."""
        devboxes = self._api().devboxes
        if status in ("suspending", "suspended"):
            if status == "suspending":
                await self._provider._retry(
                    "waiting for suspend", lambda: devboxes.await_suspended(self.devbox_id)
                )
            await self._provider._retry("resume", lambda: devboxes.resume(self.devbox_id))
            status = "resuming"
        if status in _BOOTING_STATUSES:
            await self._provider._retry("resume", lambda: devboxes.await_running(self.devbox_id))
        self._paused = False

    async def expose_port(self, port: int) -> str:
        """``https://{port}-{tunnel_key}.tunnel.runloop.ai``: the devbox's tunnel (enabled
        the first time, open to whoever has the URL; see `_tunnels`). Suspending the devbox
        stops what listened on the port; the URL stays."""
        check_port(port)
        await self._ready()
        return await _tunnels.tunnel_url(self, port)

    async def pause(self) -> None:
        """Suspend the devbox: its disk is kept and compute stops (no cost but storage).

        Memory is not kept by Runloop, so the picklable Python variables are saved to the disk
        first and the interpreter loads them again on the first call after the resume.
        """
        if self._closed or self._paused:
            return
        await self.worker("save", {"if_running": True}, wait=120.0)
        devboxes = self._api().devboxes
        await self._provider._retry("suspend", lambda: devboxes.suspend(self.devbox_id))
        await self._provider._retry(
            "waiting for suspend", lambda: devboxes.await_suspended(self.devbox_id)
        )
        self._paused = True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._provider._retry(
                "shutdown", lambda: self._api().devboxes.shutdown(self.devbox_id)
            )
        except SandboxGoneError:
            return


def _result(kind: str, answer: dict[str, Any], timeout: float) -> ExecutionResult:
    error = answer.get("error")
    timed_out = bool(answer.get("timed_out"))
    notices = _worker_notices(answer)
    if answer.get("late"):
        notices.append(f"The devbox did not answer within {timeout:.0f}s; the call was stopped.")
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


def _worker_notices(answer: dict[str, Any]) -> list[str]:
    """The host's notices for the facts the devbox worker reports (it sends no sentences: the
    devbox runs the user's code, which could write anything there, see guest_facts)."""
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
            "Python variables were restored after the devbox resumed"
            + (f" (not restored: {lost})" if lost else "")
        )
    notices += figure_notices(answer.get("figures_failed"), answer.get("figures_left_out"))
    return notices


__all__ = ["CAPABILITIES", "PROVIDER_NAME", "RunloopProvider", "RunloopSession"]
