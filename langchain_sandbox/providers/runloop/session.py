"""One Runloop devbox as a `WorkerSession`: how one command runs (``execute_async`` once, then a
retried long-poll), how its output and files move, and suspend, resume and disk snapshots."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import posixpath
import time
from typing import TYPE_CHECKING, Any, Literal

from langchain_sandbox.errors import (
    InvalidInputError,
    InvalidPathError,
    SandboxError,
    SandboxGoneError,
    SessionClosedError,
)
from langchain_sandbox.providers.base import Capabilities, OutputCallback, SessionSpec, check_port
from langchain_sandbox.providers.guest import command_worker as _runloop_worker
from langchain_sandbox.providers.names import RUNLOOP as PROVIDER_NAME
from langchain_sandbox.providers.remote import SESSION_KEY, TAG_KEY
from langchain_sandbox.providers.runloop import _tunnels
from langchain_sandbox.providers.runloop._sdk import status_code
from langchain_sandbox.providers.runloop._tool_channel import (
    StdinReplies,
    follow,
    run_code_with_tools,
)
from langchain_sandbox.providers.worker_session import WORKER_DIR, CodeToolChannel, WorkerSession

if TYPE_CHECKING:
    from langchain_sandbox.providers.runloop.provider import RunloopProvider

_MAX_HOLD_SECONDS = 25
_LONG_POLL_BUFFER = 5.0
_FOLLOW_GRACE = 5.0
_MAX_RESULT_BYTES = 128 * 1024 * 1024
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
                details={"devbox_status": view.status},
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


__all__ = ["CAPABILITIES", "RunloopSession"]
