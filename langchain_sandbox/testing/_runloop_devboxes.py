"""The state behind the Runloop emulator: devboxes, their executions and disk snapshots.

Every devbox is a real session of a local provider (bubblewrap by default), so commands run for
real. A devbox's "disk" is its ``/home/user`` plus its ``/tmp``: suspending packs them into a tar
and closes the session (Runloop keeps the disk, not the memory), resuming unpacks them into a new
session, and a disk snapshot is the same tar kept under an id.

All of it is thread-safe: HTTP handler threads call in, and the local provider's async API runs on
the emulator's own event-loop thread (`LoopThread`).

Why one module over 500 lines: one devbox's life (boot, executions, files, suspend, disk
snapshots) is one state machine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import posixpath
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_sandbox.core._event_loop import LoopThread
from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import SandboxError
from langchain_sandbox.providers.base import Limits, Provider, Session, SessionSpec
from langchain_sandbox.testing import _machine_files
from langchain_sandbox.testing._runloop_stdin import StdinPipe

if TYPE_CHECKING:
    from langchain_sandbox.testing._runloop_network import NetworkPolicies

T = TypeVar("T")

_EXECUTION_LIMIT_SECONDS = 24 * 3600.0
_DISK_FILE = f"{WORKSPACE_ROOT}/.runloop-emulator-disk.tgz"
_DISK_DIRS = "home/user tmp"


class ApiError(Exception):
    """An HTTP error answer: status and message, as Runloop sends them."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _now_ms() -> int:
    return int(time.time() * 1000)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class Execution:
    """One ``execute_async`` command."""

    id: str
    devbox_id: str
    command: str
    status: str = "running"
    exit_status: int | None = None
    stdout: str = ""
    stderr: str = ""
    done: threading.Event = field(default_factory=threading.Event)
    future: concurrent.futures.Future[Any] | None = None
    stdin: StdinPipe | None = None  # with ``attach_stdin``

    def view(self, last_n: int = 100, max_bytes: int | None = None) -> dict[str, Any]:
        """``DevboxAsyncExecutionDetailView``: output is the last ``last_n`` lines (and at most
        ``max_bytes`` of them), flagged truncated when that is not all of it."""
        result: dict[str, Any] = {
            "devbox_id": self.devbox_id,
            "execution_id": self.id,
            "status": self.status,
        }
        if self.status == "completed":
            stdout, stdout_cut = _tail(self.stdout, last_n, max_bytes)
            stderr, stderr_cut = _tail(self.stderr, last_n, max_bytes)
            result.update(
                exit_status=self.exit_status,
                stdout=stdout,
                stderr=stderr,
                stdout_truncated=stdout_cut,
                stderr_truncated=stderr_cut,
            )
        return result


def _tail(text: str, count: int, max_bytes: int | None) -> tuple[str, bool]:
    lines = text.splitlines(keepends=True)
    kept = "".join(lines[-count:])
    if max_bytes is not None and len(kept.encode()) > max_bytes:
        kept = kept.encode()[-max_bytes:].decode("utf-8", errors="ignore")
    return kept, kept != text


@dataclass
class Devbox:
    """One emulated devbox and the local session that plays its machine."""

    id: str
    name: str | None
    metadata: dict[str, str]
    env: dict[str, str]
    launch_parameters: dict[str, Any]
    blueprint_id: str | None
    snapshot_id: str | None
    create_time_ms: int
    status: str = "provisioning"
    transitions: list[dict[str, Any]] = field(default_factory=list)
    end_time_ms: int | None = None
    shutdown_reason: str | None = None
    machine: Session | None = None
    disk: bytes | None = None
    executions: dict[str, Execution] = field(default_factory=dict)
    tunnel: dict[str, Any] | None = None  # its TunnelView, once enabled (_runloop_tunnels)

    def view(self) -> dict[str, Any]:
        """``DevboxView`` as Runloop returns it."""
        view: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "capabilities": [],
            "create_time_ms": self.create_time_ms,
            "launch_parameters": self.launch_parameters,
            "metadata": self.metadata,
            "state_transitions": self.transitions,
            "initiator_type": "api",
        }
        for key in ("blueprint_id", "snapshot_id", "end_time_ms", "shutdown_reason", "tunnel"):
            if getattr(self, key) is not None:
                view[key] = getattr(self, key)
        return view


@dataclass
class DiskSnapshot:
    id: str
    source_devbox_id: str
    name: str | None
    metadata: dict[str, str]
    create_time_ms: int
    status: str = "in_progress"
    disk: bytes | None = None
    error: str | None = None

    def view(self) -> dict[str, Any]:
        """``DevboxSnapshotView``."""
        view: dict[str, Any] = {
            "id": self.id,
            "create_time_ms": self.create_time_ms,
            "metadata": self.metadata,
            "source_devbox_id": self.source_devbox_id,
        }
        if self.name is not None:
            view["name"] = self.name
        if self.disk is not None:
            view["size_bytes"] = len(self.disk)
        return view

    def status_view(self) -> dict[str, Any]:
        """``DevboxSnapshotAsyncStatusView``."""
        view: dict[str, Any] = {"status": self.status, "snapshot": self.view()}
        if self.error:
            view["error_message"] = self.error
        return view


class Account:
    """Every devbox, execution and snapshot of one emulated Runloop account."""

    def __init__(
        self,
        loop: LoopThread,
        machines: Provider,
        *,
        network: bool = False,
        boot_delay: float = 0.0,
        policies: NetworkPolicies | None = None,
    ) -> None:
        self._loop = loop
        self._machines = machines
        self._network = network
        self._policies = policies
        self.boot_delay = boot_delay
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)
        self.devboxes: dict[str, Devbox] = {}
        self.snapshots: dict[str, DiskSnapshot] = {}
        self.closing = False

    # ---- running work on the loop thread ----------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_sync(coro)

    def _background(self, work: Callable[[], None]) -> None:
        threading.Thread(target=work, name="runloop-emulator-work", daemon=True).start()

    def _set_status(self, devbox: Devbox, status: str) -> None:
        with self.changed:
            devbox.status = status
            devbox.transitions.append({"status": status, "transition_time_ms": _now_ms()})
            if status in ("shutdown", "failure"):
                devbox.end_time_ms = _now_ms()
            self.changed.notify_all()

    # ---- devboxes ---------------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> Devbox:
        snapshot_id = body.get("snapshot_id")
        disk: bytes | None = None
        if snapshot_id:
            with self._lock:
                snapshot = self.snapshots.get(snapshot_id)
            if snapshot is None or snapshot.status != "complete":
                raise ApiError(400, f"Snapshot {snapshot_id} does not exist or is not complete")
            disk = snapshot.disk
        devbox = Devbox(
            id=_new_id("dbx"),
            name=body.get("name"),
            metadata=dict(body.get("metadata") or {}),
            env=dict(body.get("environment_variables") or {}),
            launch_parameters=dict(body.get("launch_parameters") or {}),
            blueprint_id=body.get("blueprint_id"),
            snapshot_id=snapshot_id,
            create_time_ms=_now_ms(),
        )
        with self.changed:
            self.devboxes[devbox.id] = devbox
            self._set_status(devbox, "provisioning")

        def boot() -> None:
            time.sleep(self.boot_delay)
            try:
                self._start_machine(devbox, disk)
            except Exception:
                self._set_status(devbox, "failure")
                return
            self._set_status(devbox, "running")

        if self.boot_delay:
            self._background(boot)
        else:
            boot()
        return devbox

    def _start_machine(self, devbox: Devbox, disk: bytes | None) -> None:
        spec = SessionSpec(
            env=devbox.env,
            network=self._network
            if self._policies is None
            else self._policies.machine_network(devbox.launch_parameters, self._network),
            limits=Limits(timeout=_EXECUTION_LIMIT_SECONDS, max_output_bytes=64 * 1024 * 1024),
        )
        machine = self._run(self._machines.create(spec))
        if disk is not None:
            self._run(machine.write_files({_DISK_FILE: disk}))
            self._run(
                machine.run_command(f"tar -C / -xzf {_DISK_FILE}; rm -f {_DISK_FILE}", timeout=120)
            )
        devbox.machine = machine

    def get(self, devbox_id: str) -> Devbox:
        with self._lock:
            devbox = self.devboxes.get(devbox_id)
        if devbox is None:
            raise ApiError(404, f"Devbox {devbox_id} not found")
        return devbox

    def running(self, devbox_id: str) -> tuple[Devbox, Session]:
        """The devbox and its machine, or the error Runloop gives for a devbox that is not up."""
        devbox = self.get(devbox_id)
        with self._lock:
            machine = devbox.machine
            if devbox.status != "running" or machine is None:
                raise ApiError(400, f"Devbox {devbox_id} is not running (status: {devbox.status})")
        return devbox, machine

    def listing(self) -> list[Devbox]:
        with self._lock:
            return sorted(self.devboxes.values(), key=lambda d: d.create_time_ms, reverse=True)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Hold until ``predicate()`` or ``timeout``; what a long-poll does."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.closing:
                    return predicate()
                self.changed.wait(min(remaining, 0.5))
            return True

    def shutdown(self, devbox: Devbox, reason: str = "api_shutdown") -> None:
        with self._lock:
            machine, devbox.machine = devbox.machine, None
            executions = list(devbox.executions.values())
        for execution in executions:
            self._finish_killed(execution)
        if machine is not None:
            self._close_machine(machine)
        if devbox.status != "shutdown":
            devbox.shutdown_reason = reason
            self._set_status(devbox, "shutdown")

    def _close_machine(self, machine: Session) -> None:
        with contextlib.suppress(Exception):
            self._run(machine.close())

    def forget(self, devbox: Devbox) -> None:
        """Make the devbox unknown (404 everywhere), as when Runloop has deleted it."""
        self.shutdown(devbox, reason="ttl_expired")
        with self._lock:
            self.devboxes.pop(devbox.id, None)

    def suspend(self, devbox: Devbox) -> None:
        _, machine = self.running(devbox.id)
        self._set_status(devbox, "suspending")

        def pack() -> None:
            try:
                devbox.disk = self._pack(machine)
            except Exception:
                self._set_status(devbox, "failure")
                return
            finally:
                with self._lock:
                    devbox.machine = None
                self._close_machine(machine)
            self._set_status(devbox, "suspended")

        self._background(pack)

    def resume(self, devbox: Devbox) -> None:
        if devbox.status != "suspended":
            raise ApiError(400, f"Devbox {devbox.id} is not suspended (status: {devbox.status})")
        self._set_status(devbox, "resuming")

        def unpack() -> None:
            try:
                self._start_machine(devbox, devbox.disk)
            except Exception:
                self._set_status(devbox, "failure")
                return
            devbox.disk = None
            self._set_status(devbox, "running")

        self._background(unpack)

    def _pack(self, machine: Session) -> bytes:
        packed = self._run(
            machine.run_command(
                f"tar -C / --exclude={_DISK_FILE[1:]} -czf {_DISK_FILE} {_DISK_DIRS}", timeout=300
            )
        )
        if packed.exit_code not in (0, 1):
            raise SandboxError(f"packing the disk failed: {packed.stderr}")
        data = self._run(machine.read_files([_DISK_FILE]))[_DISK_FILE]
        self._run(machine.remove_files([_DISK_FILE]))
        return data

    # ---- executions -------------------------------------------------------------------------

    def execute(self, devbox_id: str, command: str, *, attach_stdin: bool = False) -> Execution:
        devbox, machine = self.running(devbox_id)
        execution = Execution(id=_new_id("exn"), devbox_id=devbox.id, command=command)
        if attach_stdin:
            execution.stdin = StdinPipe(machine.workspace_dir, execution.id)  # type: ignore[attr-defined]
            command = execution.stdin.wrap(command)
        with self._lock:
            devbox.executions[execution.id] = execution

        def grow(stream: str, text: str) -> None:
            # Output as it comes, so the SSE endpoints can stream a running execution.
            with self.changed:
                if stream == "stdout":
                    execution.stdout += text
                else:
                    execution.stderr += text
                self.changed.notify_all()

        async def run() -> None:
            try:
                result = await machine.run_command(
                    command, timeout=_EXECUTION_LIMIT_SECONDS, on_output=grow
                )
                stdout, stderr = result.stdout, result.stderr
                exit_status = result.exit_code if result.exit_code is not None else 137
            except Exception as exc:
                stdout, stderr, exit_status = "", f"{exc}\n", 1
            if execution.stdin is not None:
                await asyncio.to_thread(execution.stdin.close)  # file calls: off the loop
            with self.changed:
                if execution.status != "completed":
                    execution.stdout, execution.stderr = stdout, stderr
                    execution.exit_status = exit_status
                    execution.status = "completed"
                    execution.done.set()
                self.changed.notify_all()

        execution.future = self._loop.submit(run())
        return execution

    def execution(self, devbox_id: str, execution_id: str) -> Execution:
        devbox = self.get(devbox_id)
        with self._lock:
            execution = devbox.executions.get(execution_id)
        if execution is None:
            raise ApiError(404, f"Execution {execution_id} not found")
        return execution

    def kill(self, execution: Execution) -> None:
        if execution.future is not None:
            execution.future.cancel()
        self._finish_killed(execution)

    def _finish_killed(self, execution: Execution) -> None:
        with self.changed:
            if execution.status != "completed":
                execution.status = "completed"
                execution.exit_status = 143
                execution.done.set()
            self.changed.notify_all()

    # ---- files ------------------------------------------------------------------------------

    def write_file(self, devbox_id: str, path: str, data: bytes) -> None:
        _, machine = self.running(devbox_id)
        try:
            _machine_files.write_file(self._run, machine, _absolute(path), data)
        except _machine_files.MachineFileError as exc:
            raise ApiError(400, f"Cannot write {path}: {exc}") from exc

    def read_file(self, devbox_id: str, path: str) -> bytes:
        _, machine = self.running(devbox_id)
        try:
            return _machine_files.read_file(self._run, machine, _absolute(path))
        except FileNotFoundError as exc:
            raise ApiError(404, f"File not found: {path}") from exc

    # ---- disk snapshots ---------------------------------------------------------------------

    def snapshot(self, devbox_id: str, name: str | None, metadata: dict[str, str]) -> DiskSnapshot:
        devbox, machine = self.running(devbox_id)
        snapshot = DiskSnapshot(
            id=_new_id("snp"),
            source_devbox_id=devbox.id,
            name=name,
            metadata=metadata,
            create_time_ms=_now_ms(),
        )
        with self._lock:
            self.snapshots[snapshot.id] = snapshot

        def take() -> None:
            try:
                snapshot.disk = self._pack(machine)
                snapshot.status = "complete"
            except Exception as exc:
                snapshot.status, snapshot.error = "error", str(exc)
            with self.changed:
                self.changed.notify_all()

        self._background(take)
        return snapshot

    def close(self) -> None:
        """Shut every devbox down (their local sessions with them)."""
        with self.changed:
            self.closing = True
            self.changed.notify_all()
            devboxes = list(self.devboxes.values())
        for devbox in devboxes:
            self.shutdown(devbox)


def _absolute(path: str) -> str:
    """Runloop paths are relative to the user's home unless absolute."""
    if not path:
        raise ApiError(400, "A path is required")
    return posixpath.normpath(
        path if path.startswith("/") else posixpath.join(WORKSPACE_ROOT, path)
    )


__all__ = ["Account", "ApiError", "Devbox", "DiskSnapshot", "Execution"]
