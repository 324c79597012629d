"""Runloop devboxes behind the provider contract, over ``runloop_api_client``'s async SDK.

A session is one devbox. Runloop offers shell commands, files, suspend/resume and disk snapshots,
but no kernel, so stateful Python runs in a small interpreter inside the devbox
(`langchain_sandbox.providers.guest.command_worker`), started in the background by the first
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
``execute_async`` per call, the long-poll, live output, telling a refusal from a gone devbox); the
worker's protocol is `WorkerSession`'s and the SDK's errors are ``_sdk.py``'s, and moving
``RunloopSession`` into a ``session.py`` of its own, as ``providers/local`` does, is the next split.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import os
import posixpath
import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from langchain_sandbox.environment import validate_env
from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    InvalidPathError,
    ProviderUnreachableError,
    SandboxError,
    SandboxGoneError,
    SessionClosedError,
)
from langchain_sandbox.providers.base import (
    Capabilities,
    Limits,
    OutputCallback,
    SessionRecord,
    SessionSpec,
    check_port,
    install_spec_packages,
)
from langchain_sandbox.providers.guest import command_worker as _runloop_worker
from langchain_sandbox.providers.names import RUNLOOP as PROVIDER_NAME
from langchain_sandbox.providers.remote import (
    SESSION_KEY,
    TAG_KEY,
    RemoteProvider,
    read_tags,
    tag_metadata,
)
from langchain_sandbox.providers.runloop import _tunnels
from langchain_sandbox.providers.runloop._network import launch_network
from langchain_sandbox.providers.runloop._sdk import runloop_sdk, status_code, translate
from langchain_sandbox.providers.runloop._tool_channel import (
    StdinReplies,
    follow,
    run_code_with_tools,
)
from langchain_sandbox.providers.worker_session import (
    WORKER_DIR,
    CodeToolChannel,
    ShippedWorker,
    WorkerSession,
)
from langchain_sandbox.retries import DEFAULT_ATTEMPTS, retry_async

T = TypeVar("T")

_MAX_HOLD_SECONDS = 25
_LONG_POLL_BUFFER = 5.0
_FOLLOW_GRACE = 5.0
_MAX_RESULT_BYTES = 128 * 1024 * 1024
_LISTED_STATUSES = (
    "queued",
    "provisioning",
    "initializing",
    "running",
    "suspending",
    "suspended",
    "resuming",
)
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
        runloop_sdk()
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
        self.shipped_worker = ShippedWorker()

    def __repr__(self) -> str:
        return f"RunloopProvider(base_url={self._base_url!r})"

    # ---- the SDK client -----------------------------------------------------------------------

    def sdk(self) -> Any:
        """The ``AsyncRunloopSDK`` of the running event loop (async clients are bound to one)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            sdk = runloop_sdk()
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
        return translate(exc, what=what)

    # ---- the contract -------------------------------------------------------------------------

    async def create(self, spec: SessionSpec | None = None) -> RunloopSession:
        return await self._create(spec or SessionSpec(), {})

    async def create_from_snapshot(
        self, snapshot_id: str, spec: SessionSpec | None = None
    ) -> RunloopSession:
        """A new devbox whose disk (and saved Python variables) is a Runloop disk snapshot's."""
        return await self._create(spec or SessionSpec(), {"snapshot_id": snapshot_id})

    async def _create(self, spec: SessionSpec, image: dict[str, str]) -> RunloopSession:
        # A policy Runloop cannot enforce is refused here, before any request.
        async with self._errors("the network policy"):
            launch = {
                **self._launch_parameters,
                **await launch_network(self.sdk().api, spec.network),
            }
        session_id = uuid.uuid4().hex
        metadata = tag_metadata(spec.metadata, session_id)
        params: dict[str, Any] = {
            "name": f"langchain-sandbox-{session_id[:12]}",
            "metadata": metadata,
            **(image or _parse_template(spec.template) or self._image),
        }
        if spec.env:
            params["environment_variables"] = validate_env(spec.env)
        if launch:
            params["launch_parameters"] = launch
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


class RunloopSession(WorkerSession):
    """One Runloop devbox; see the module docstring."""

    provider_name = PROVIDER_NAME
    capabilities = CAPABILITIES
    noun = "devbox"
    _provider: RunloopProvider

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
        super().__init__(
            provider,
            provider.shipped_worker,
            sandbox_id=devbox_id,
            session_id=session_id,
            spec=spec,
            created_at=created_at,
            state=state,
        )
        self.devbox_id = devbox_id
        self._paused = False

    def __repr__(self) -> str:
        return f"RunloopSession(devbox_id={self.devbox_id!r}, session_id={self.session_id!r})"

    _run_code_with_tools = run_code_with_tools  # over the provider's channel

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
        tools: CodeToolChannel | None = None,
    ) -> tuple[Any, bool]:
        """Run ``command`` once; return its final view and whether ``wait`` ran out.

        ``execute_async`` is sent exactly once (never retried: it runs code); the long-poll that
        follows only reads, so it is retried on transient errors. With ``on_output``, the
        execution's output streams (SSE) are followed meanwhile and passed on as they come, up to
        the worker's answer line. With ``tools``, stdin is attached and stdout followed for the
        code's tool calls (see `_tool_channel`).
        """
        if tools is not None and not isinstance(tools, StdinReplies):
            raise TypeError("a Runloop execution answers tool calls through StdinReplies")
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

    async def _upload(self, path: str, data: bytes) -> None:
        async def upload() -> Any:
            return await self._api().devboxes.upload_file(
                self.devbox_id, path=path, file=(posixpath.basename(path), data)
            )

        try:
            await self._provider._retry("upload", upload)
        except SandboxError as exc:
            raise await self._diagnose(exc) from exc

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
            if status_code(exc) not in (400, 404, 422):
                raise
            diagnosed = await self._diagnose(SandboxError(str(exc), provider=PROVIDER_NAME))
            if isinstance(diagnosed, SandboxGoneError):
                raise diagnosed from exc
            raise InvalidPathError(f"No such file in the workspace: {given}") from exc

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


__all__ = ["CAPABILITIES", "PROVIDER_NAME", "RunloopProvider", "RunloopSession"]
