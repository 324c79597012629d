"""The persistent Python worker that runs inside a local sandbox (stdlib only).

One worker per session plays the part of a Jupyter kernel: it keeps the user's globals between
calls, returns the value of a last bare expression, captures stdout and stderr, turns exceptions
into results, and sends matplotlib figures back as PNG bytes. It also spawns shell commands, so a
command sees the same ``/tmp`` and processes as the code.

The host talks to it on three dedicated pipes, never on stdin/stdout/stderr, so nothing user code
prints (or closes) can break the protocol. Every message is one JSON line:

* requests (host -> worker): ``{"id", "op": "exec" | "command" | "dump" | "load" | "ping", ...}``;
* control (host -> worker): ``{"op": "interrupt", "id"}``, read by a thread so it arrives while
  the main thread is busy running user code;
* events (worker -> host): ``{"ev": "ready"}`` once, then per request any number of
  ``{"id", "ev": "out", "stream", "data"}`` and one ``{"id", "ev": "done", ...}``.

Output bytes travel as latin-1 text (one character per byte), so they round-trip exactly through
JSON and the host decodes them once, whole. Each stream is capped here, inside the sandbox: the
first half of the budget is forwarded as it is produced, then only the most recent bytes are kept,
so printing gigabytes costs the host nothing.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import importlib
import io
import json
import linecache
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from typing import Any

_READ_CHUNK = 65536


class _Events:
    """The event pipe to the host; writes whole lines under a lock (several threads send)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("ascii")
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]


class _StreamLimiter:
    """Forwards the head of one output stream as it comes, then keeps only its tail.

    The host rebuilds head + tail with :class:`~langchain_sandbox.results.OutputCapture` and adds
    :attr:`dropped` to what it reports as omitted.
    """

    def __init__(self, events: _Events, request_id: int, stream: str, limit: int) -> None:
        self._events = events
        self._id = request_id
        self._stream = stream
        self._head_room = limit // 2
        self._tail_keep = limit - limit // 2
        self._tail = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        if self._head_room > 0:
            head = data[: self._head_room]
            self._head_room -= len(head)
            self._forward(head)
            data = data[len(head) :]
        if not data:
            return
        self._tail += data
        excess = len(self._tail) - self._tail_keep
        if excess > 0:
            del self._tail[:excess]
            self.dropped += excess

    def finish(self) -> int:
        """Forward the kept tail; return how many bytes were dropped in the middle."""
        if self._tail:
            self._forward(bytes(self._tail))
            self._tail.clear()
        return self.dropped

    def _forward(self, data: bytes) -> None:
        if data:
            self._events.send(
                {
                    "id": self._id,
                    "ev": "out",
                    "stream": self._stream,
                    "data": data.decode("latin-1"),
                }
            )


class _FdCapture:
    """Captures everything written to file descriptor 1 or 2, by Python or by child processes.

    The descriptor is the write end of a pipe; a daemon thread drains the read end into the
    limiter of the running request (or discards it between requests). :meth:`drain` takes what is
    still in the pipe after a request, under the same lock, so nothing is lost or reordered.
    """

    def __init__(self, target_fd: int) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self.target_fd = target_fd
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._lock = threading.Lock()
        self.sink: _StreamLimiter | None = None
        self.restore()
        threading.Thread(target=self._pump, name=f"capture-{target_fd}", daemon=True).start()

    def restore(self) -> None:
        """(Re)point the target descriptor at the pipe, in case user code closed or replaced it."""
        os.dup2(self._write_fd, self.target_fd, inheritable=True)

    def _pump(self) -> None:
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        while True:
            poller.poll()
            with self._lock:
                self._read_available()

    def drain(self) -> None:
        with self._lock:
            self._read_available()

    def _read_available(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, _READ_CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                return
            if self.sink is not None:
                self.sink.feed(chunk)


def _text_stream(fd: int) -> io.TextIOWrapper:
    """A line-buffered UTF-8 text stream on ``fd`` that never closes the descriptor."""
    return io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


class _Interrupter:
    """Delivers SIGINT to the main thread for the request the host names, and no other.

    A stray interrupt that arrives after its request finished is ignored, so it can never hit the
    worker's own loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running_id: int | None = None
        self._command: subprocess.Popen[bytes] | None = None
        signal.signal(signal.SIGINT, self._on_sigint)

    def start(self, request_id: int, command: subprocess.Popen[bytes] | None = None) -> None:
        with self._lock:
            self._running_id = request_id
            self._command = command

    def stop(self) -> None:
        with self._lock:
            self._running_id = None
            self._command = None

    def interrupt(self, request_id: int) -> None:
        with self._lock:
            if self._running_id != request_id:
                return
            if self._command is not None:
                # A command is stopped with its whole process group, not interrupted.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._command.pid, signal.SIGKILL)
                return
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    def _on_sigint(self, signum: int, frame: types.FrameType | None) -> None:
        if self._running_id is not None and self._command is None:
            raise KeyboardInterrupt


class Worker:
    """The worker's state: the user's namespace, captures, and the request loop."""

    def __init__(self, request_fd: int, event_fd: int, control_fd: int, kernel_state: str) -> None:
        self.events = _Events(event_fd)
        self.requests = os.fdopen(request_fd, "rb")
        self.control_fd = control_fd
        self.kernel_state_path = kernel_state
        self.module = types.ModuleType("__main__")
        self.module.__dict__["__builtins__"] = __builtins__
        # Pickle and inspect look user classes and functions up in sys.modules["__main__"].
        sys.modules["__main__"] = self.module
        self.namespace: dict[str, Any] = self.module.__dict__
        self.cell_count = 0
        self.stdout = _FdCapture(1)
        self.stderr = _FdCapture(2)
        self.interrupter = _Interrupter()
        self._install_streams(replace=True)

    def _install_streams(self, *, replace: bool = False) -> None:
        """Point fds 1 and 2 at the captures again and give ``sys.stdout``/``stderr`` fresh
        line-buffered streams where needed (``replace``: at start; else if user code closed them).
        """
        for capture, name in ((self.stdout, "stdout"), (self.stderr, "stderr")):
            capture.restore()
            current = getattr(sys, name, None)
            if replace or current is None or getattr(current, "closed", True):
                current = _text_stream(capture.target_fd)
                setattr(sys, name, current)
                setattr(sys, f"__{name}__", current)

    def serve(self) -> None:
        threading.Thread(target=self._control_loop, name="control", daemon=True).start()
        self.events.send({"ev": "ready", "pid": os.getpid()})
        buffer = b""
        while True:
            try:
                chunk = self.requests.readline()
            except KeyboardInterrupt:
                continue
            if not chunk:
                return
            buffer += chunk
            if not buffer.endswith(b"\n"):
                continue
            line, buffer = buffer, b""
            try:
                request = json.loads(line)
            except ValueError:
                continue
            self._handle(request)

    def _control_loop(self) -> None:
        control = os.fdopen(self.control_fd, "rb")
        for line in control:
            try:
                message = json.loads(line)
                if message.get("op") == "interrupt":
                    self.interrupter.interrupt(int(message["id"]))
            except (ValueError, KeyError, TypeError):
                continue

    def _handle(self, request: dict[str, Any]) -> None:
        request_id = int(request.get("id", 0))
        op = request.get("op")
        try:
            if op == "exec":
                reply = self._exec(request_id, request)
            elif op == "command":
                reply = self._command(request_id, request)
            elif op == "dump":
                reply = self._dump()
            elif op == "load":
                reply = self._load(request)
            elif op == "invalidate_caches":
                importlib.invalidate_caches()
                reply = {}
            elif op == "ping":
                reply = {}
            else:
                reply = {"failure": f"unknown operation {op!r}"}
        except KeyboardInterrupt:
            # An interrupt that raced the end of a request: report it rather than lose the reply.
            reply = {"interrupted": True}
        except BaseException as exc:
            reply = {"failure": f"{type(exc).__name__}: {exc}"}
        finally:
            self.interrupter.stop()
        reply.update(id=request_id, ev="done")
        self.events.send(reply)

    # ------------------------------------------------------------------ code

    def _exec(self, request_id: int, request: dict[str, Any]) -> dict[str, Any]:
        limit = int(request.get("limit", 1_000_000))
        out = _StreamLimiter(self.events, request_id, "stdout", limit)
        err = _StreamLimiter(self.events, request_id, "stderr", limit)
        self._install_streams()
        self.stdout.drain()
        self.stderr.drain()
        self.stdout.sink, self.stderr.sink = out, err
        saved_env = self._apply_env(request.get("env") or {})
        reply: dict[str, Any] = {}
        started = time.perf_counter()
        try:
            self.interrupter.start(request_id)
            try:
                value = self._run_cell(str(request.get("code", "")))
            finally:
                self.interrupter.stop()
            if value is not None:
                reply["value"] = _safe_repr(value)
        except BaseException as exc:
            reply["error"] = _describe_exception(exc)
            reply["interrupted"] = isinstance(exc, KeyboardInterrupt)
        reply["duration_ms"] = (time.perf_counter() - started) * 1000
        self._restore_env(saved_env)
        self._flush_streams()
        figures = self._collect_figures()
        if figures:
            reply["figures"] = figures
        self.stdout.drain()
        self.stderr.drain()
        self.stdout.sink = self.stderr.sink = None
        reply["dropped"] = {"stdout": out.finish(), "stderr": err.finish()}
        return reply

    def _run_cell(self, code: str) -> Any:
        self.cell_count += 1
        filename = f"<cell-{self.cell_count}>"
        # Registered so tracebacks show the user's lines and inspect.getsource finds functions.
        linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
        tree = ast.parse(code, filename=filename, mode="exec")
        last: ast.expr | None = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = tree.body.pop().value  # type: ignore[attr-defined]
        if tree.body:
            exec(compile(tree, filename, "exec"), self.namespace)
        if last is None:
            return None
        expression = ast.Expression(body=last)
        return eval(compile(expression, filename, "eval"), self.namespace)

    def _flush_streams(self) -> None:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            with contextlib.suppress(Exception):
                stream.flush()

    def _collect_figures(self) -> list[str]:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return []
        figures: list[str] = []
        try:
            for number in pyplot.get_fignums():
                buffer = io.BytesIO()
                pyplot.figure(number).savefig(buffer, format="png")
                figures.append(base64.b64encode(buffer.getvalue()).decode("ascii"))
            pyplot.close("all")
        except Exception:
            traceback.print_exc()
        return figures

    @staticmethod
    def _apply_env(env: dict[str, str]) -> dict[str, str | None]:
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update({str(k): str(v) for k, v in env.items()})
        return saved

    @staticmethod
    def _restore_env(saved: dict[str, str | None]) -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    # --------------------------------------------------------------- commands

    def _command(self, request_id: int, request: dict[str, Any]) -> dict[str, Any]:
        limit = int(request.get("limit", 1_000_000))
        limiters = {
            "stdout": _StreamLimiter(self.events, request_id, "stdout", limit),
            "stderr": _StreamLimiter(self.events, request_id, "stderr", limit),
        }
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
        started = time.perf_counter()
        process = subprocess.Popen(
            [request.get("shell", "/bin/bash"), "-c", str(request["command"])],
            cwd=request.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.interrupter.start(request_id, process)
        assert process.stdout is not None
        assert process.stderr is not None
        open_fds = {process.stdout.fileno(): "stdout", process.stderr.fileno(): "stderr"}
        for fd in open_fds:
            os.set_blocking(fd, False)
        poller = select.poll()
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        while open_fds:
            # Once bash has exited, stop waiting for background children that keep the pipes open.
            exited = process.poll() is not None
            ready = poller.poll(0 if exited else 100)
            if exited and not ready:
                break
            for fd, _ in ready:
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if chunk:
                    limiters[open_fds[fd]].feed(chunk)
                else:
                    poller.unregister(fd)
                    del open_fds[fd]
        exit_code = process.wait()
        self.interrupter.stop()
        # What the command left running in its process group ends with it (a fork bomb too);
        # long-lived services are started with setsid or from Python with start_new_session.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.stdout.close()
        process.stderr.close()
        return {
            "exit_code": exit_code,
            "duration_ms": (time.perf_counter() - started) * 1000,
            "dropped": {name: limiter.finish() for name, limiter in limiters.items()},
        }

    # -------------------------------------------------------------- variables

    def _kernel_state(self) -> types.ModuleType:
        module = sys.modules.get("_sandbox_kernel_state")
        if module is None:
            module = types.ModuleType("_sandbox_kernel_state")
            module.__file__ = self.kernel_state_path
            with open(self.kernel_state_path, encoding="utf-8") as handle:
                source = handle.read()
            exec(compile(source, self.kernel_state_path, "exec"), module.__dict__)
            sys.modules["_sandbox_kernel_state"] = module
        return module

    def _dump(self) -> dict[str, Any]:
        blob, saved, skipped = self._kernel_state().dump_namespace(self.namespace)
        return {"data": base64.b64encode(blob).decode("ascii"), "saved": saved, "skipped": skipped}

    def _load(self, request: dict[str, Any]) -> dict[str, Any]:
        blob = base64.b64decode(request["data"])
        failed = self._kernel_state().load_namespace(self.namespace, blob)
        return {"failed": failed}


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:
        return f"<repr of {type(value).__name__} failed: {type(exc).__name__}: {exc}>"


def _describe_exception(exc: BaseException) -> dict[str, str]:
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
        return {"name": type(exc).__name__, "value": str(exc), "traceback": "".join(lines)}
    frames = traceback.extract_tb(exc.__traceback__)
    # Drop the worker's own frames: the model should see its code, not the machinery.
    skip = 0
    while skip < len(frames) and frames[skip].filename == __file__:
        skip += 1
    tb = exc.__traceback__
    for _ in range(skip):
        tb = tb.tb_next if tb is not None else None
    lines = traceback.format_exception(type(exc), exc, tb)
    try:
        value = str(exc)
    except Exception:
        value = "<unprintable>"
    return {"name": type(exc).__name__, "value": value, "traceback": "".join(lines)}


def main(argv: list[str]) -> None:
    """Entry point: ``_worker.py REQUEST_FD EVENT_FD CONTROL_FD KERNEL_STATE_PATH [SYS_PATH...]``."""
    request_fd, event_fd, control_fd = (int(arg) for arg in argv[:3])
    for fd in (request_fd, event_fd, control_fd):
        os.set_inheritable(fd, False)
    sys.path[:0] = argv[4:]
    sys.dont_write_bytecode = True
    worker = Worker(request_fd, event_fd, control_fd, argv[3])
    worker.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
