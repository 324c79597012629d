"""The host's handle on one sandboxed worker: start it, send requests, interrupt it, kill it.

The worker (`._worker`) talks on three pipes created here and handed to the sandbox by
descriptor number: requests (length-prefixed ``marshal`` frames: the host is trusted), events
(JSON lines, output chunks and replies: parsed safely whatever the sandbox sends) and control
(interrupt lines). A background task reads events and routes them to the request in flight, so output
streams to ``on_output`` while code runs, and a ``tool`` event (code calling a host tool) reaches
the request's handler, which answers it with `WorkerProcess.answer_tool`. When the worker's event pipe closes, every waiter learns
the worker is gone (`WorkerDied`) instead of hanging.

Sandboxed code runs in the worker's process, so it can write on the event pipe too, and find the
running request's id in the worker's frames. The host therefore holds the worker to its sequence
(see docs/isolation.md, "The worker channel"): the worker runs one request at a time, in the order
sent, so every event must be for the oldest request still open. Each request is followed on the
pipe by a *fence* (an empty request with its own random id, sent in the same write), and a
``done`` counts only once the fence's own ``done`` follows it: code that forged the ``done`` of the
request it runs in is caught when the worker's real one arrives before the fence's. An event for
any other request, a second ``done`` or a second ``ready`` kills the worker at once with a reason
written here (`WorkerProcess.violation`), never with the sandbox's words.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import marshal
import os
import random
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from langchain_sandbox.core._event_loop import entered_off_loop
from langchain_sandbox.errors import IsolationUnavailableError, SandboxError
from langchain_sandbox.providers.names import LOCAL

EventHandler = Callable[[dict[str, Any]], None]

logger = logging.getLogger(__name__)

# Replies carry figures and variable dumps, so a line may be large; the bound keeps a hostile
# sandbox from making the host buffer without limit (past it the worker counts as broken).
_MAX_LINE = 64 * 1024 * 1024
_STARTUP_TIMEOUT = 60.0
_FENCE = "fence"
_ANSWERED_KEPT = 64
"""How many answered request ids are remembered, to tell a second reply from a stray one."""


class WorkerDied(Exception):
    """The worker's process ended (killed, out of memory, crashed) while a request waited.

    ``by_host`` is true when the host ended it for breaking the protocol.
    """

    def __init__(self, reason: str, *, by_host: bool = False) -> None:
        super().__init__(reason)
        self.by_host = by_host


@dataclass
class _Open:
    """A request sent and not yet answered for good: its reply waits for its fence."""

    request_id: int
    fence_id: int
    future: asyncio.Future[dict[str, Any]]
    on_event: EventHandler | None
    reply: dict[str, Any] | None = None


class WorkerProcess:
    """One running worker. Create with `start`; requests are serialized by the caller."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        events: asyncio.StreamReader,
        events_transport: asyncio.ReadTransport,
        requests: asyncio.WriteTransport,
        control_fd: int,
        stderr_transport: asyncio.BaseTransport,
    ) -> None:
        self._process = process
        self._stderr_transport = stderr_transport
        self._events = events
        self._events_transport = events_transport
        self._requests = requests
        self._control_fd = control_fd
        self._ids = random.Random(os.urandom(16))
        # In the order sent, which is the order the worker answers them in.
        self._open: deque[_Open] = deque()
        self._answered: deque[int] = deque(maxlen=_ANSWERED_KEPT)
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.exited = False
        self.violation: str | None = None
        """Why the host killed the worker for breaking the protocol (host words), if it did."""
        self._reader = asyncio.create_task(self._read_events())
        # A process forked by user code may hold the event pipe open after the worker died;
        # the exit of the sandbox's process is the other sign that the worker is gone.
        self._watcher = asyncio.create_task(self._watch_exit())

    @classmethod
    async def start(
        cls,
        build_argv: Callable[[int, int, int], Sequence[str]],
        *,
        prepare: Callable[
            [Sequence[str]], AbstractContextManager[tuple[list[str], tuple[int, ...]]]
        ],
        preexec_fn: Callable[[], None] | None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        startup_timeout: float = _STARTUP_TIMEOUT,
        control_pipe: Callable[[], tuple[int, int]] = os.pipe,
        stdio: bool = False,
    ) -> WorkerProcess:
        """Start a worker and wait until it is ready.

        Args:
            build_argv: Given the worker-side descriptor numbers (request, event, control),
                returns the argv that starts the worker (through bubblewrap or not).
            prepare: Turns that argv into the one to execute plus descriptors to pass
                (`Launcher.spawnable`).
            preexec_fn: Run in the child before exec (joins the session's cgroups).
            env: Environment of the started process (bubblewrap's own; it clears it inside).
            cwd: Working directory of the started process.
            startup_timeout: Seconds to wait for the worker's ``ready``.
            control_pipe: Makes the control channel, ``(worker's end, host's end)``: a pipe, or
                the FIFO a gVisor container opens by name (`control_pipe`).
            stdio: The requests and events are also the process's stdin and stdout (what
                ``runsc`` hands on to a container).

        Raises:
            IsolationUnavailableError: bubblewrap could not set the sandbox up.
            SandboxError: the worker did not start for another reason.
        """
        try:
            # Off the loop: gVisor's control channel is a FIFO made in the file system.
            control_r, control_w = await asyncio.to_thread(control_pipe)
        except OSError as exc:
            raise IsolationUnavailableError(
                f"Could not start the sandbox: {exc}", provider=LOCAL
            ) from exc
        request_r, request_w = os.pipe()
        event_r, event_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        child_fds = (request_r, event_w, control_r)
        loop = asyncio.get_running_loop()
        try:
            async with entered_off_loop(lambda: prepare(build_argv(*child_fds))) as (
                argv,
                extra_fds,
            ):
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=request_r if stdio else asyncio.subprocess.DEVNULL,
                    stdout=event_w if stdio else asyncio.subprocess.DEVNULL,
                    stderr=stderr_w,
                    pass_fds=(*child_fds, *extra_fds),
                    preexec_fn=preexec_fn,
                    start_new_session=True,
                    env=env if env is not None else {},
                    cwd=cwd,
                )
        except (OSError, subprocess.SubprocessError) as exc:
            # SubprocessError: the preexec_fn failed (e.g. a cgroup refused the new process).
            for fd in (*child_fds, request_w, event_r, control_w, stderr_r, stderr_w):
                os.close(fd)
            raise IsolationUnavailableError(
                f"Could not start the sandbox: {exc}", provider=LOCAL
            ) from exc
        for fd in (*child_fds, stderr_w):
            os.close(fd)
        stderr_transport, stderr = await loop.connect_read_pipe(
            _StderrDrain, os.fdopen(stderr_r, "rb", buffering=0)
        )
        events = asyncio.StreamReader(limit=_MAX_LINE)
        events_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(events), os.fdopen(event_r, "rb", buffering=0)
        )
        transport, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(request_w, "wb", buffering=0)
        )
        os.set_blocking(control_w, False)
        worker = cls(process, events, events_transport, transport, control_w, stderr_transport)
        try:
            await asyncio.wait_for(asyncio.shield(worker._ready), startup_timeout)
        except (WorkerDied, TimeoutError) as exc:
            text = await stderr.head_text()
            await worker.kill()
            raise _startup_error(text, exc) from None
        return worker

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return not self.exited and self._process.returncode is None

    async def _watch_exit(self) -> None:
        await self._process.wait()
        self._fail_all()

    def _fail_all(self, reason: str = "its process was killed or crashed") -> None:
        """Mark the worker gone and wake everything that waits for it, saying why."""
        self.exited = True
        died = WorkerDied(reason, by_host=self.violation is not None)
        for future in (self._ready, *(item.future for item in self._open)):
            if not future.done():
                future.set_exception(died)
                # Mark it retrieved: a request given up after its timeout has nobody waiting
                # any more ("Future exception was never retrieved"); a waiter still gets it.
                future.exception()
        self._open.clear()

    def _violated(self, reason: str) -> None:
        """Kill the worker now for breaking the protocol (its waiters learn ``reason``)."""
        self.violation = reason
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)

    async def _read_events(self) -> None:
        # Whatever the sandbox sends, this task ends only by failing the worker with a reason:
        # an exception escaping it would resurface in every later kill() and close().
        reason = "its process was killed or crashed"
        try:
            while True:
                line = await self._events.readline()
                if not line:
                    break
                event = _parse_event(line)
                violation = (
                    "it sent a malformed message on its event pipe"
                    if event is None
                    else self._dispatch(event)
                )
                if violation is not None:
                    self._violated(violation)
                    reason = violation
                    break
        except (ValueError, asyncio.LimitOverrunError):
            reason = f"it sent a message larger than the {_MAX_LINE // (1024 * 1024)} MB limit"
            self._violated(reason)
        except OSError as exc:
            reason = f"its event pipe failed ({exc})"
        except Exception as exc:
            reason = f"its events could not be handled ({type(exc).__name__})"
            logger.exception("the event reader of a sandbox worker failed")
        finally:
            self._fail_all(reason)

    def _dispatch(self, event: dict[str, Any]) -> str | None:
        """Route one event; returns why it breaks the protocol (the worker is then killed)."""
        if event["ev"] == "ready":
            if self._ready.done():
                return "it sent a second 'ready' (sandboxed code wrote on its event pipe)"
            self._ready.set_result(event)
            return None
        current = self._open[0] if self._open else None
        if current is None or event["id"] != (
            current.request_id if current.reply is None else current.fence_id
        ):
            answered = event["id"] in self._answered or (
                current is not None and event["id"] == current.request_id
            )
            return _out_of_sequence(event["ev"], answered=answered)
        if current.reply is not None:  # the fence: only its empty done may come
            if event["ev"] != "done" or len(event) != 2:
                return _out_of_sequence(event["ev"], answered=False)
            self._open.popleft()
            self._answered.append(current.request_id)
            if not current.future.done():
                current.future.set_result(current.reply)
        elif event["ev"] == "done":
            current.reply = event
        elif current.on_event is not None:
            try:
                current.on_event(event)
            except Exception:
                # A failing output callback must not take the worker's event stream down.
                logger.exception("on_output callback failed; output keeps being captured")
        return None

    def send(
        self, op: str, payload: dict[str, Any], on_event: EventHandler | None = None
    ) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Send a request and its fence; returns the request's id and a future for its
        ``done`` reply, set once the fence's reply confirms it (see the module docstring).

        The future raises `WorkerDied` if the worker ends first.
        """
        # Random ids: sandboxed code that writes to the event pipe cannot aim a forged reply at a
        # later request (or a fence) by guessing its number.
        request_id, fence_id = self._ids.getrandbits(62), self._ids.getrandbits(62)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if not self.alive:
            future.set_exception(WorkerDied("the worker is not running"))
            return request_id, future
        self._open.append(_Open(request_id, fence_id, future, on_event))
        self._requests.write(
            _frame({**payload, "id": request_id, "op": op}) + _frame({"id": fence_id, "op": _FENCE})
        )
        return request_id, future

    def answer_tool(self, request_id: int, reply: dict[str, Any]) -> None:
        """Send the result of a tool the code of request ``request_id`` called (a ``tool``
        event, passed to that request's ``on_event``); ``reply`` carries the event's ``seq``.
        A worker that is gone gets nothing."""
        if self.alive:
            self._requests.write(_frame({**reply, "id": request_id, "op": "tool_result"}))

    def interrupt(self, request_id: int) -> None:
        """Ask the worker to stop request ``request_id`` (SIGINT for code, SIGKILL for commands)."""
        line = f"interrupt {request_id}\n".encode()
        with contextlib.suppress(OSError):
            os.write(self._control_fd, line)

    async def kill(self, reason: str | None = None) -> None:
        """Kill the worker and its sandbox (bubblewrap's namespace dies with it). Idempotent.

        ``reason``, if given, is what a request still waiting learns (`WorkerDied`).
        """
        if reason is not None:
            self._fail_all(reason)
        self.exited = True
        if self._process.returncode is None:
            # The process leads its own group. Not Process.kill(): Popen.send_signal polls, which
            # can reap the child behind asyncio's child watcher ("Unknown child process").
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            await self._process.wait()
        self._requests.close()
        with contextlib.suppress(OSError):
            os.close(self._control_fd)
        self._control_fd = -1
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self._events_transport.close()
        self._stderr_transport.close()
        await self._watcher


class _StderrDrain(asyncio.Protocol):
    """Reads bubblewrap's stderr for the whole life of the sandbox, keeping only its head.

    bubblewrap reports set-up failures there, so the head explains a failed start. The pipe stays
    reachable from inside (``/proc/1/fd/2``): if nobody read it, sandboxed code could fill it and
    the host would wait for its end forever. So it is read to the end and the rest discarded;
    it is also kept out of the subprocess transport, whose ``wait()`` would wait for its EOF.
    """

    _KEEP = 8192

    def __init__(self) -> None:
        self._head = bytearray()
        self._closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        room = self._KEEP - len(self._head)
        if room > 0:
            self._head += data[:room]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)

    async def head_text(self) -> str:
        """What bubblewrap wrote first, once it exited (or after 2 s, whatever is there)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._closed), 2.0)
        return self._head.decode("utf-8", errors="replace").strip()


_EVENT_KINDS = frozenset({"ready", "out", "tool", "done"})


def _out_of_sequence(kind: str, *, answered: bool) -> str:
    """Why an event out of the worker's sequence kills it, in the host's words."""
    if not answered:
        what = "a message for a request it was not running"
    elif kind == "done":
        what = "a second reply to one request"
    else:
        what = "output for a request it had already answered"
    return f"it sent {what} (sandboxed code wrote on its event pipe)"


def _frame(request: dict[str, Any]) -> bytes:
    body = marshal.dumps(request)
    return len(body).to_bytes(4, "little") + body


def _parse_event(line: bytes) -> dict[str, Any] | None:
    """One event line as a dict with a known ``ev`` (and an int ``id`` unless it is ``ready``),
    or ``None`` for anything else the sandbox may have written there."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: deeply nested JSON
        return None
    if not isinstance(event, dict) or event.get("ev") not in _EVENT_KINDS:
        return None
    request_id = event.get("id")
    if event["ev"] != "ready" and (type(request_id) is not int):
        return None
    return event


def _startup_error(stderr: str, exc: BaseException) -> SandboxError:
    reason = stderr or (
        "it did not become ready in time" if isinstance(exc, TimeoutError) else "it exited"
    )
    if stderr.startswith("bwrap:"):
        return IsolationUnavailableError(
            f"bubblewrap cannot create a sandbox here ({stderr}). Unprivileged user namespaces "
            "may be disabled: enable them (sysctl kernel.unprivileged_userns_clone=1, or "
            "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04+), or run in a "
            "container started with --security-opt seccomp=unconfined. "
            "`langchain-sandbox doctor` shows what works here.",
            provider=LOCAL,
        )
    return SandboxError(
        f"The sandbox's Python worker did not start: {reason}", provider=LOCAL, retryable=True
    )


__all__ = ["EventHandler", "WorkerDied", "WorkerProcess"]
