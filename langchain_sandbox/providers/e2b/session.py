"""One E2B sandbox as a session: the lease, code and commands, pause and close; its kernel calls
(`_kernel`) and file calls (`_files`) are mixed in."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from langchain_sandbox.errors import (
    ProviderUnavailableError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
    SessionClosedError,
)
from langchain_sandbox.network import network_record
from langchain_sandbox.providers.base import (
    Capabilities,
    OutputCallback,
    SessionRecord,
    SessionSpec,
    check_port,
)
from langchain_sandbox.providers.e2b._files import FileCalls
from langchain_sandbox.providers.e2b._kernel import KernelCalls
from langchain_sandbox.providers.e2b._streams import Streams
from langchain_sandbox.providers.e2b._tool_channel import run_code_with_tools
from langchain_sandbox.providers.e2b._wire import execution_fields, translate
from langchain_sandbox.providers.names import E2B as PROVIDER_NAME
from langchain_sandbox.providers.tool_channel import FrameFilter
from langchain_sandbox.results import ExecutionResult

if TYPE_CHECKING:
    from langchain_sandbox.providers.e2b.provider import E2BProvider

logger = logging.getLogger(__name__)

CAPABILITIES = Capabilities(
    stateful_python=True,
    shell=True,
    network_control=True,
    install_packages=True,
    figures=True,
    variables=True,
    pause=True,
    pause_keeps_memory=True,
    attach_across_processes=True,
    native_snapshots=False,
    processes=True,
    ports=True,
    tools_from_code=True,
)

_BACKSTOP = 30.0  # the SDK's own deadline sits behind ours, only to never hang


class E2BSession(KernelCalls, FileCalls):
    """One E2B sandbox. Build it with [`E2BProvider.create`][langchain_sandbox.E2BProvider.create] or [`E2BProvider.attach`][langchain_sandbox.E2BProvider.attach]."""

    provider_name = PROVIDER_NAME
    capabilities = CAPABILITIES

    def __init__(
        self,
        provider: E2BProvider,
        sandbox: Any,
        spec: SessionSpec,
        *,
        session_id: str,
        created_at: float,
    ) -> None:
        self._provider = provider
        self._sandbox = sandbox
        self.spec = spec
        self.session_id = session_id
        self._created_at = created_at
        self._lease_end = time.monotonic() + provider.lease_seconds
        self._lease_lock = asyncio.Lock()
        self._paused = False
        self._closed = False

    def __repr__(self) -> str:
        return f"E2BSession(session_id={self.session_id!r}, sandbox_id={self.sandbox_id!r})"

    @property
    def sandbox_id(self) -> str:
        return str(self._sandbox.sandbox_id)

    @property
    def record(self) -> SessionRecord:
        limits = self.spec.limits
        return SessionRecord(
            provider=PROVIDER_NAME,
            session_id=self.session_id,
            sandbox_id=self.sandbox_id,
            created_at=self._created_at,
            metadata=dict(self.spec.metadata),
            state={
                "template": self.spec.template,
                "network": network_record(self.spec.network),
                "paused": self._paused,
                "limits": {
                    "timeout": limits.timeout,
                    "max_output_bytes": limits.max_output_bytes,
                    "max_file_bytes": limits.max_file_bytes,
                },
            },
        )

    # -- plumbing --------------------------------------------------------------------------

    async def _ready(self, needed: float = 0.0) -> None:
        """Check the session is usable, resume it if paused, and keep its lease long enough."""
        if self._closed:
            raise SessionClosedError(f"E2B session {self.session_id} is closed.")
        if self._paused:
            await self._provider._retry(
                "resume the sandbox",
                lambda: self._sandbox.connect(timeout=self._provider.lease_seconds),
            )
            self._paused = False
            self._lease_end = time.monotonic() + self._provider.lease_seconds
        await self._keep_lease(needed)

    async def _keep_lease(self, needed: float) -> None:
        """Extend E2B's sandbox timeout only when what is left would not cover the next call."""
        provider = self._provider
        want = max(provider.lease_refresh_below, needed + provider.lease_refresh_below)
        if self._lease_end - time.monotonic() >= want:
            return
        async with self._lease_lock:
            if self._lease_end - time.monotonic() >= want:
                return
            seconds = max(provider.lease_seconds, math.ceil(want))
            await provider._retry("extend the lease", lambda: self._sandbox.set_timeout(seconds))
            self._lease_end = time.monotonic() + seconds

    async def _failure(self, exc: BaseException, what: str) -> SandboxError:
        """Translate a failure of a call that is not retried; tell "gone" from "unreachable"."""
        error = translate(exc, what, secret=self._provider._api_key)
        if isinstance(error, ProviderUnavailableError | SandboxTimeoutError):
            try:
                running = await self._sandbox.is_running(request_timeout=10)
            except Exception:
                running = True
            if not running:
                return SandboxGoneError(
                    f"E2B sandbox {self.sandbox_id} is gone ({what}).", provider=PROVIDER_NAME
                )
        return error

    # -- code and commands -------------------------------------------------------------------

    async def _run_code(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
        frames: FrameFilter | None = None,
    ) -> ExecutionResult:
        """``frames``: code that calls host tools (see `_tool_channel`)."""
        import httpx

        await self._ready(timeout)
        streams = Streams(self.spec.limits.max_output_bytes, on_output, frames)
        started = time.monotonic()
        execution: Any = None
        try:
            async with asyncio.timeout(timeout) as deadline:
                execution = await self._sandbox.run_code(
                    code,
                    envs=env or None,
                    on_stdout=streams.sink("stdout"),
                    on_stderr=streams.sink("stderr"),
                    timeout=timeout + _BACKSTOP,
                )
        except Exception as exc:
            # Our deadline, or the SDK's own one (its ReadTimeout, when a busy stream kept the
            # event loop from firing ours first). Closing the stream interrupts the cell.
            if not (deadline.expired() or isinstance(exc.__context__, httpx.ReadTimeout)):
                raise await self._failure(exc, "run code") from exc
        fields: dict[str, Any] = {
            "duration_ms": (time.monotonic() - started) * 1000,
            **streams.fields(),
            **(
                {"timed_out": True, "exit_code": None}
                if execution is None
                else execution_fields(execution)
            ),
        }
        return ExecutionResult(kind="code", **fields)

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
        import e2b

        await self._ready(timeout)
        streams = Streams(self.spec.limits.max_output_bytes, on_output)
        started = time.monotonic()
        try:
            handle = await self._sandbox.commands.run(
                command,
                background=True,
                envs=env or None,
                cwd=cwd,
                on_stdout=streams.sink("stdout"),
                on_stderr=streams.sink("stderr"),
                timeout=timeout + _BACKSTOP,
                retain_output=False,
            )
        except Exception as exc:
            raise await self._failure(exc, "start the command") from exc
        exit_code: int | None
        timed_out = False
        try:
            async with asyncio.timeout(timeout) as deadline:
                exit_code = (await handle.wait()).exit_code
        except e2b.CommandExitException as exc:
            exit_code = exc.exit_code
        except TimeoutError as exc:
            if not deadline.expired():
                raise await self._failure(exc, "run the command") from exc
            timed_out, exit_code = True, None
            await self._kill(handle)
        except Exception as exc:
            raise await self._failure(exc, "run the command") from exc
        return ExecutionResult(
            kind="command",
            exit_code=exit_code,
            timed_out=timed_out,
            duration_ms=(time.monotonic() - started) * 1000,
            **streams.fields(),
        )

    async def _kill(self, handle: Any) -> None:
        """Stop a command that ran past its timeout; the session stays usable either way."""
        try:
            await handle.kill()
        except Exception as exc:
            logger.debug("E2B: killing a timed-out command failed: %s", type(exc).__name__)
        await handle.disconnect()

    # -- files -----------------------------------------------------------------------------

    # -- lifecycle ---------------------------------------------------------------------------

    async def is_alive(self) -> bool:
        if self._closed:
            return False
        try:
            if self._paused:
                info = await self._sandbox.get_info()
                return str(getattr(info.state, "value", info.state)) in ("running", "paused")
            return bool(await self._sandbox.is_running(request_timeout=10))
        except Exception:
            return False

    async def expose_port(self, port: int) -> str:
        """``https://{port}-{sandbox_id}.{domain}`` (``sandbox.get_host``, no API call): E2B's
        edge routes that host name to the port, for anyone who has the URL. A paused sandbox
        is resumed first (its processes, kept in its memory, still listen)."""
        check_port(port)
        await self._ready()
        return f"https://{self._sandbox.get_host(port)}"

    async def pause(self) -> None:
        if self._closed:
            raise SessionClosedError(f"E2B session {self.session_id} is closed.")
        if self._paused:
            return
        await self._provider._retry("pause the sandbox", self._sandbox.pause)
        self._paused = True

    async def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(SandboxGoneError):  # already gone is what close wants
            await self._provider._retry("kill the sandbox", self._sandbox.kill)
        self._closed = True


__all__ = ["CAPABILITIES", "E2BSession"]
