"""One local sandbox: a persistent Python worker in bubblewrap or gVisor, its workspace and its
cgroups.

Decisions a user can rely on:

* **Timeouts.** A call that runs past its timeout is interrupted (SIGINT, so ``KeyboardInterrupt``
  is raised in the code and the variables survive) and returns ``timed_out=True``. If the code does
  not stop within `INTERRUPT_GRACE` seconds, the worker is killed; the result says so in
  ``notices`` and the next call starts a fresh worker. Shell commands are killed with their whole
  process group.
* **A worker that dies** (out of memory, killed by its own code) is reported in the result of the
  call it died in and restarted transparently for the next call, with the notice
  `WORKER_RESTARTED`. The session stays usable; only its variables are lost (the workspace
  files stay). ``is_alive()`` is ``False`` only once the session is closed or its workspace is gone.
* **Calls are serialized**: one worker runs one thing at a time, like a notebook kernel.

Why a little over 500 lines: the worker's life (start, restart, each request with its timeout
and kill) and every call that uses it share one lock and one worker, so they stay together; the
files are in ``_session_files.py`` and what the worker's replies become in ``_worker_replies.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import (
    CapabilityError,
    SessionClosedError,
)
from langchain_sandbox.network import denied_notice, network_record
from langchain_sandbox.providers.base import (
    Capabilities,
    OutputCallback,
    Session,
    SessionRecord,
    SessionSpec,
    VariablesDump,
    check_port,
    checked_timeout,
)
from langchain_sandbox.providers.guest.persistent_shell import SHELL_SETUP, shell_script
from langchain_sandbox.providers.local._cgroups import SessionCgroup
from langchain_sandbox.providers.local._files import HostWorkspace
from langchain_sandbox.providers.local._gvisor import kill_containers
from langchain_sandbox.providers.local._launcher import Launcher
from langchain_sandbox.providers.local._packages import (
    PackageIndex,
    install_packages,
)
from langchain_sandbox.providers.local._port_relay import PortRelays
from langchain_sandbox.providers.local._quota import WorkspaceQuota
from langchain_sandbox.providers.local._session_files import LocalSessionFiles
from langchain_sandbox.providers.local._streams import OutputStreams
from langchain_sandbox.providers.local._worker_process import WorkerDied, WorkerProcess
from langchain_sandbox.providers.local._worker_replies import (
    MALFORMED,
    WORKER_RESTARTED,
    Outcome,
    QueuedDump,
    checked,
    execution_result,
    killed_by_host,
    malformed_reply,
    routed,
    tool_events,
)
from langchain_sandbox.providers.local._workspace_fs import release_directory
from langchain_sandbox.providers.names import LOCAL
from langchain_sandbox.providers.tool_channel import ToolHost
from langchain_sandbox.results import ExecutionResult

if TYPE_CHECKING:
    from langchain_sandbox.providers.local._egress_proxy import EgressProxy

INTERRUPT_GRACE = 2.0
"""Seconds a timed-out call gets to stop after the interrupt before its worker is killed."""

LOCAL_CAPABILITIES = Capabilities(
    stateful_python=True,
    shell=True,
    network_control=True,
    install_packages=True,
    figures=True,
    variables=True,
    pause=False,
    attach_across_processes=False,
    native_snapshots=False,
    tools_from_code=True,
    processes=True,
    ports=True,
)


class LocalSession(LocalSessionFiles, Session):
    """A live local sandbox. Made by [`LocalProvider.create`][langchain_sandbox.LocalProvider.create]; see the module docstring."""

    provider_name = LOCAL
    capabilities = LOCAL_CAPABILITIES

    def __init__(
        self,
        *,
        session_id: str,
        spec: SessionSpec,
        directory: str,
        launcher: Launcher,
        cgroup: SessionCgroup,
        package_index: PackageIndex,
        created_at: float,
        on_close: Callable[[LocalSession], None],
        egress: EgressProxy | None = None,
        expose_host: str = "127.0.0.1",
    ) -> None:
        self.session_id = session_id
        self.spec = spec
        self.directory = directory
        self.launcher = launcher
        self.cgroup = cgroup
        self.package_index = package_index
        self.created_at = created_at
        self._on_close = on_close
        self._egress = egress
        self._egress_serving = contextlib.AsyncExitStack()
        self._files = HostWorkspace(
            launcher.workspace_dir,
            max_file_bytes=spec.limits.max_file_bytes,
            owner=launcher.workspace_owner,
        )
        self._quota = WorkspaceQuota(self._files, spec.limits.workspace_bytes, held=cgroup.pids)
        self._lock = asyncio.Lock()
        self._worker: WorkerProcess | None = None
        self._oom_kills_seen = 0
        self._restart_notice: str | None = None
        self._closed = False
        self._closing: asyncio.Future[None] | None = None
        self._capture_expected = False
        self._queued_dump: QueuedDump | None = None
        self._ports = PortRelays(launcher.ports_dir, expose_host) if launcher.ports_dir else None

    # ------------------------------------------------------------------ lifecycle

    @property
    def record(self) -> SessionRecord:
        return {
            "provider": LOCAL,
            "session_id": self.session_id,
            "sandbox_id": self.session_id,
            "created_at": self.created_at,
            "metadata": dict(self.spec.metadata),
            "state": {
                "isolation": self.launcher.isolation,
                "network": network_record(self.spec.network),
            },
        }

    @property
    def workspace_dir(self) -> str:
        """Host directory of the workspace (bound at ``/home/user`` inside)."""
        return self.launcher.workspace_dir

    @property
    def guest_python(self) -> str:
        return self.launcher.python_executable

    @property
    def worker_pid(self) -> int | None:
        """Host pid of the process that runs the worker (bubblewrap's, when isolated)."""
        return self._worker.pid if self._worker is not None and self._worker.alive else None

    async def start(self) -> None:
        """Start the worker (called once by the provider before handing the session out)."""
        async with self._lock:
            if self._egress is not None:
                await self._egress_serving.enter_async_context(self._egress.serving())
            self._worker = await self._start_worker()

    async def _start_worker(self) -> WorkerProcess:
        # Out-of-memory kills counted from here on are this worker's (read once, off the hot path).
        self._oom_kills_seen = self.cgroup.oom_kills()
        worker = await WorkerProcess.start(
            self.launcher.worker_command,
            prepare=self.launcher.spawnable,
            preexec_fn=self.launcher.preexec(),
            env=self.launcher.process_env(),
            cwd=self.launcher.process_cwd(),
            control_pipe=self.launcher.control_pipe,
            stdio=self.launcher.gvisor is not None,
        )
        if self._egress is not None and self.launcher.gvisor is None:
            # Before any code runs: clients that ignore the proxy variables (docs/network.md).
            # (gVisor's relay opens its own, inside, before it starts the worker.)
            await self._egress.transparent.open(worker.pid)
        return worker

    async def _ready_worker(self) -> WorkerProcess:
        """The running worker, restarting one that died since the last call.

        The restart is told to the model in the next code or command result
        (`WORKER_RESTARTED`), whichever request noticed it.
        """
        self._check_open()
        worker = self._worker
        if worker is not None and not worker.alive:
            await worker.kill()
            self._restart_notice = (
                WORKER_RESTARTED
                if worker.violation is None
                else f"{killed_by_host(worker.violation)}; {WORKER_RESTARTED}"
            )
            worker = None
        if worker is None:
            worker = self._worker = await self._start_worker()
        return worker

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"Local session {self.session_id} is closed.", provider=LOCAL)

    async def is_alive(self) -> bool:
        if self._closed:
            return False
        return await asyncio.to_thread(os.path.isdir, self.workspace_dir)

    async def close(self) -> None:
        """Kill the sandbox's processes and remove its directory. A close while another is under
        way waits for that one: whoever removes the session's base directory next (the
        provider's ``aclose``, an emulator's cleanup) must find its mounts gone. Shielded, so a
        cancelled caller never leaves the workspace mounted."""
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.ensure_future(self._release())
        await asyncio.shield(self._closing)

    async def _release(self) -> None:
        worker, self._worker = self._worker, None
        if self._ports is not None:
            await self._ports.close()
        if worker is not None:
            await worker.kill()
        await self._egress_serving.aclose()
        await asyncio.to_thread(self.cgroup.remove)
        if self.launcher.gvisor is not None:
            await asyncio.to_thread(kill_containers, self.launcher.gvisor.directory)
        await asyncio.to_thread(release_directory, self.directory)
        self._on_close(self)

    async def expose_port(self, port: int) -> str:
        """The URL of ``port`` through the session's relay (``_port_relay``): the sandbox's
        network stays off; the host listens on the provider's ``expose_host``."""
        check_port(port)
        self._check_open()
        if self._ports is None:
            raise CapabilityError("This local session has no port directory.", provider=LOCAL)
        return await self._ports.expose(self, port)

    # ------------------------------------------------------------------ requests

    async def _request(
        self,
        worker: WorkerProcess,
        op: str,
        payload: dict[str, Any],
        *,
        timeout: float,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        queue_dump: bool = False,
    ) -> Outcome:
        """Send one request and wait for it: interrupt on timeout, kill if that is not enough.

        ``queue_dump``: send a variables dump right behind it (see `expect_capture`).
        """
        started = time.perf_counter()
        request_id, future = worker.send(op, payload, on_event)
        if queue_dump:
            self._queued_dump = QueuedDump.send(worker, self.spec.limits.max_file_bytes)
        return await self._reply(worker, request_id, future, started, timeout)

    async def _reply(
        self,
        worker: WorkerProcess,
        request_id: int,
        future: asyncio.Future[dict[str, Any]],
        started: float,
        timeout: float,
    ) -> Outcome:
        def elapsed() -> float:
            return (time.perf_counter() - started) * 1000

        try:
            # shield: a timeout must not cancel the reply, which is still awaited after it.
            try:
                async with asyncio.timeout(timeout):
                    reply = await asyncio.shield(future)
                return Outcome(reply, elapsed_ms=elapsed())
            except TimeoutError:
                worker.interrupt(request_id)
            try:
                async with asyncio.timeout(INTERRUPT_GRACE):
                    reply = await asyncio.shield(future)
                return Outcome(reply, timed_out=True, elapsed_ms=elapsed())
            except TimeoutError:
                await self._discard_worker(worker)
                return Outcome(
                    None,
                    timed_out=True,
                    lost="the code did not stop when interrupted, so the Python worker was killed",
                    elapsed_ms=elapsed(),
                )
        except WorkerDied as died:
            self._check_open()  # closed while the call ran: that, not a crash, ended it
            await self._discard_worker(worker)
            out_of_memory = self.cgroup.oom_kills() > self._oom_kills_seen
            if out_of_memory:
                limit = self.spec.limits.memory_mb
                why = f"it ran out of memory (the session's limit is {limit} MB)"
            else:
                why = str(died)
            return Outcome(
                None,
                lost=killed_by_host(why) if died.by_host else f"the Python worker died: {why}",
                out_of_memory=out_of_memory,
                elapsed_ms=elapsed(),
            )

    async def _discard_worker(self, worker: WorkerProcess) -> None:
        """Kill a worker that is gone or stuck; the next result will say the variables are lost
        (unless the result of the call that lost it already does)."""
        await worker.kill()
        if self._worker is worker:
            self._worker = None
        self._restart_notice = WORKER_RESTARTED

    async def _simple_request(
        self,
        op: str,
        payload: dict[str, Any],
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """A request whose failure is an infrastructure error (variables, cache refresh)."""
        async with self._lock:
            self._queued_dump = None  # it may change the variables
            worker = await self._ready_worker()
            outcome = await self._request(
                worker, op, payload, timeout=self.spec.limits.timeout, on_event=on_event
            )
        return checked(op, outcome)

    # ------------------------------------------------------------------ code and commands

    async def _run_code(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
    ) -> ExecutionResult:
        payload = {"code": code, "env": env, "limit": self.spec.limits.max_output_bytes}
        return await self._execute("code", "exec", payload, timeout, on_output)

    async def _run_code_with_tools(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
        tools: ToolHost,
    ) -> ExecutionResult:
        """The worker's own pipes carry the calls (see ``_worker._call_tool``): the code's
        ``tool`` events go to ``tools``, the results back as ``tool_result`` frames."""
        payload = {
            "code": code,
            "env": env,
            "limit": self.spec.limits.max_output_bytes,
            "tools": tools.specs,
        }
        return await self._execute("code", "exec", payload, timeout, on_output, tools=tools)

    async def _run_command(
        self,
        command: str,
        *,
        timeout: float,
        env: dict[str, str],
        cwd: str,
        on_output: OutputCallback | None,
        warm: bool = False,
    ) -> ExecutionResult:
        """``warm``: a persistent-shell script, which may run in a spare shell that already ran
        its setup (see ``_worker._Spare``)."""
        if cwd != WORKSPACE_ROOT:  # the root is the sandbox's own mount: always a directory
            await asyncio.to_thread(self._files.require_dir, cwd)
        payload = {
            "command": command,
            "cwd": self.launcher.to_process_path(cwd),
            "env": env,
            "limit": self.spec.limits.max_output_bytes,
            "shell": self.launcher.bash,
            "warm": warm,
            "preamble": SHELL_SETUP if warm else "",
        }
        return await self._execute("command", "command", payload, timeout, on_output)

    async def run_shell(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """[`Session.run_shell`][langchain_sandbox.Session.run_shell], in a shell the worker started before the command arrived
        when it has one (``warm``): the persistent shell ``eval``-s the command itself, so it
        reads the same there as in a new ``bash -c`` (see ``_worker._Spare``)."""
        return await self._run_command(
            shell_script(command, cwd),
            timeout=checked_timeout(timeout, self.spec.limits.timeout),
            env={},
            cwd=WORKSPACE_ROOT,
            on_output=on_output,
            warm=True,
        )

    async def _execute(
        self,
        kind: Literal["code", "command"],
        op: str,
        payload: dict[str, Any],
        timeout: float,
        on_output: OutputCallback | None,
        tools: ToolHost | None = None,
    ) -> ExecutionResult:
        streams = OutputStreams(self.spec.limits.max_output_bytes, on_output)
        async with self._lock:
            self._queued_dump = None  # no longer what the interpreter holds after this call
            queue_dump, self._capture_expected = self._capture_expected, False
            worker = await self._ready_worker()
            notices = [self._restart_notice] if self._restart_notice else []
            self._restart_notice = None
            denied_before = len(self._egress.denied) if self._egress is not None else 0
            async with self._quota.guard(worker.kill), tool_events(worker, tools) as calls:
                outcome = await self._request(
                    worker,
                    op,
                    payload,
                    timeout=timeout,
                    on_event=routed(streams.on_event, calls),
                    queue_dump=queue_dump,
                )
            if outcome.lost is not None:
                self._restart_notice = None  # this result tells it
            over_quota = self._quota.notice()
            if over_quota is not None:
                notices.append(over_quota)
            if self._egress is not None:
                notices.extend(denied_notice(self._egress.denied[denied_before:]))
        try:
            return execution_result(kind, outcome, streams, notices)
        except MALFORMED as exc:
            raise malformed_reply(exc) from None

    async def _install_packages(
        self, names: list[str], *, timeout: float, on_output: OutputCallback | None
    ) -> ExecutionResult:
        async with self._lock:
            self._check_open()
            result = await install_packages(
                self.launcher,
                self.package_index,
                names,
                timeout=timeout,
                limit=self.spec.limits.max_output_bytes,
                preexec_fn=self.launcher.preexec(),
                on_output=on_output,
            )
        await self._quota.measure()
        over_quota = self._quota.notice()
        if over_quota is not None:
            result = result.with_notices(over_quota)
        if result.ok:
            await self._simple_request("invalidate_caches", {})
        return result

    # ------------------------------------------------------------------ variables

    def expect_capture(self) -> None:
        # The worker then dumps right after the call, while the host still reads its reply and
        # lists the workspace: the capture does not wait for a round trip of its own.
        self._capture_expected = True

    async def _dump_variables(self, max_bytes: int) -> VariablesDump:
        async with self._lock:
            queued, self._queued_dump = self._queued_dump, None
            self._capture_expected = False
            started = time.perf_counter()
            worker = await self._ready_worker()
            if (
                queued is None
                or queued.worker is not worker
                or queued.chunks.max_bytes != max_bytes
            ):
                queued = QueuedDump.send(worker, max_bytes)
            outcome = await self._reply(
                worker, queued.request_id, queued.future, started, self.spec.limits.timeout
            )
        reply = checked("dump", outcome)
        try:
            data = queued.chunks.data(int(reply["size"]))
            reasons = {str(name): str(why) for name, why in dict(reply["skipped"]).items()}
            return VariablesDump(
                data=data,
                saved=tuple(str(name) for name in reply["saved"]),
                skipped=tuple(reasons),
                reasons=reasons,
            )
        except MALFORMED as exc:
            raise malformed_reply(exc) from None

    async def _load_variables(self, data: bytes) -> dict[str, str]:
        reply = await self._simple_request("load", {"data": data})
        try:
            return {str(name): str(why) for name, why in dict(reply["failed"]).items()}
        except MALFORMED as exc:
            raise malformed_reply(exc) from None


__all__ = ["INTERRUPT_GRACE", "LOCAL_CAPABILITIES", "LocalSession"]
