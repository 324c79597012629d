"""The persistent Python worker that runs inside a local sandbox (stdlib only).

One worker per session plays the part of a Jupyter kernel: it keeps the user's globals between
calls, returns the value of a last bare expression, captures stdout and stderr, turns exceptions
into results, and sends matplotlib figures back as PNG bytes. It also spawns shell commands, so a
command sees the same ``/tmp`` and processes as the code.

The host talks to it on three dedicated pipes, never on stdin/stdout/stderr, so nothing user code
prints (or closes) can break the protocol:

* requests (host -> worker): frames of a 4-byte little-endian length and a ``marshal``-encoded dict
  ``{"id", "op": "exec" | "command" | "dump" | "load" | "invalidate_caches" | "fence", ...}``
  (the host is trusted, and marshal needs no import); the host sends a ``fence`` behind every
  request, answered with an empty ``done`` (see ``_worker_process``);
* control (host -> worker): lines ``interrupt <id>``, read by a thread so they arrive while the
  main thread is busy running user code;
* events (worker -> host): JSON lines, because the host must parse what a hostile sandbox sends:
  ``{"ev": "ready"}`` once, then per request any number of ``{"id", "ev": "out", "stream",
  "data"}`` and one ``{"id", "ev": "done", ...}``. A variables dump travels as ``out`` events of
  the ``variables`` stream (base64 chunks of `_DUMP_CHUNK` bytes), never as one line.
  User code runs in this process and can write these events too, so a ``done`` carries data
  and typed facts only (counts, figure numbers, an exception's class name): never a sentence
  the host would show as its own.

Code run with host tools (an ``exec`` carrying ``tools``) calls them in the middle of the request:
the worker sends ``{"id", "ev": "tool", "seq", "name", "args"}`` and reads the request pipe until
the host's ``{"op": "tool_result", "id", "seq", "ok", ...}`` frame comes; frames read meanwhile
(the fence, a queued dump) wait in `Worker.pending` for the request loop. A result that comes
after its call was interrupted is dropped there.

Output bytes travel as latin-1 text (one character per byte), so they round-trip exactly through
JSON and the host decodes them once, whole. Each stream is capped here, inside the sandbox: the
first half of the budget is forwarded as it is produced, then only the most recent bytes are kept,
so printing gigabytes costs the host nothing.

A persistent-shell command (a request marked ``warm``) runs in a *spare* when there is one: a
``bash`` the worker started while it was idle after the previous one, waiting for its script, so
the command does not wait for a process to start (see `spare_shells`).

Start-up time is part of every session's cold start, so this module imports only built-in or
already-loaded modules up front (no ``json``, ``ast``, ``re``, ``typing``, ``subprocess``); heavier
ones are imported when a request first needs them. What is not the request loop is loaded beside
it from copies (`main`): how a cell runs (`cells`), spare shells (`spare_shells`), process groups
(`process_groups`) and the output capper.

Past 500 lines on purpose: the request loop, the three pipes' framing and the interrupts are one
protocol, read together with ``_worker_process`` on the host; each further split would be one
more file to copy into every sandbox and load at every cold start.
"""

from __future__ import annotations

import _thread
import marshal
import os
import select
import signal
import sys
import time
from _json import encode_basestring_ascii

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    import types
    from collections.abc import Callable
    from typing import Any

_READ_CHUNK = 65536
_TOOL_RESULT = "tool_result"
_DUMP_CHUNK = 4 * 1024 * 1024


def _to_json(value: Any) -> str:
    """JSON text of the plain values events carry (``json`` itself would import ``re``)."""
    if isinstance(value, str):
        return str(encode_basestring_ascii(value))
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        items = (f"{encode_basestring_ascii(str(k))}:{_to_json(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_to_json(item) for item in value) + "]"
    return str(encode_basestring_ascii(repr(value)))


class _Events:
    """The event pipe to the host; writes whole lines under a lock (several threads send)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = _thread.allocate_lock()

    def send(self, *messages: dict[str, Any]) -> None:
        """Write ``messages`` as lines in one write: the host wakes once for all of them."""
        data = "".join(_to_json(message) + "\n" for message in messages).encode("ascii")
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]


class _Interrupter:
    """Delivers SIGINT to the main thread for the request the host names, and no other.

    A stray interrupt that arrives after its request finished is ignored, so it can never hit the
    worker's own loop.
    """

    def __init__(self, end_group: Any) -> None:
        self._end_group = end_group
        self._lock = _thread.allocate_lock()
        self._main_thread = _thread.get_ident()
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
                self._end_group(self._command.pid)
                return
            signal.pthread_kill(self._main_thread, signal.SIGINT)

    def _on_sigint(self, signum: int, frame: types.FrameType | None) -> None:
        if self._running_id is not None and self._command is None:
            raise KeyboardInterrupt


class Worker:
    """The worker's state: the user's namespace, captures, and the request loop."""

    def __init__(
        self,
        request_fd: int,
        event_fd: int,
        control_fd: int,
        kernel_state: tuple[str, str],
        guest: Any,
        groups: Any,
        spare_shells: Any,
        capture: Any,
    ) -> None:
        # The modules beside this file (`cells`, `process_groups`, `spare_shells`, the output
        # capper), loaded by `main` from their copies in the sandbox.
        self.guest = guest
        self.groups = groups
        self.spare_shells = spare_shells
        self.capture = capture
        self.events = _Events(event_fd)
        # Unbuffered, so polling the descriptor tells whether a request is waiting.
        self.requests = os.fdopen(request_fd, "rb", buffering=0)
        self.control_fd = control_fd
        self.kernel_state_path, self.cloudpickle_path = kernel_state
        self.module = type(sys)("__main__")
        self.module.__dict__["__builtins__"] = __builtins__
        # Pickle and inspect look user classes and functions up in sys.modules["__main__"].
        sys.modules["__main__"] = self.module
        self.namespace: dict[str, Any] = self.module.__dict__
        self.cells = guest.Cells(self.namespace)
        self.pid = os.getpid()
        self._pids_seen: bytes | None = None
        self.stdout = guest.FdCapture(1)
        self.stderr = guest.FdCapture(2)
        self.interrupter = _Interrupter(groups.end_group)
        self._install_streams(replace=True)
        self.spares = spare_shells.Spares(groups.end_group)
        # The last persistent-shell command, while the next may be one: a spare is started
        # like it when the worker is idle.
        self._spare_for: dict[str, Any] | None = None
        # Requests read while code waited for a tool's result, in the order they came.
        self.pending: list[dict[str, Any]] = []
        self._tool_seq = 0
        # A request read while looking for a fence (`_answer`), or why reading failed: what
        # the request loop takes next instead of reading the pipe.
        self._next: dict[str, Any] | Exception | None = None

    def _install_streams(self, *, replace: bool = False) -> None:
        """Point fds 1 and 2 at the captures again and give ``sys.stdout``/``stderr`` fresh
        line-buffered streams where needed (``replace``: at start; else if user code closed them).
        """
        for capture, name in ((self.stdout, "stdout"), (self.stderr, "stderr")):
            capture.restore()
            current = getattr(sys, name, None)
            if replace or current is None or getattr(current, "closed", True):
                current = self.guest.text_stream(capture.target_fd)
                setattr(sys, name, current)
                setattr(sys, f"__{name}__", current)

    def serve(self) -> None:
        _thread.start_new_thread(self._control_loop, ())
        self.events.send({"ev": "ready"})
        while True:
            try:
                if (
                    self._spare_for is not None
                    and not self.spares.waiting
                    and self._next is None
                    and self._idle()
                ):
                    shell, cwd, env = _command_context(self._spare_for)
                    if not self.spares.start(shell, cwd, env, _preamble(self._spare_for)):
                        self._spare_for = None
                request = self._take_next()
            except KeyboardInterrupt:
                continue  # a stray interrupt between requests
            except (EOFError, ValueError):
                return  # the host closed the pipe (or broke the framing): nothing left to do
            if request.get("op") == _TOOL_RESULT:
                continue  # the result of a tool call its code stopped waiting for
            if request.get("op") == "fence":
                # The host sends one behind every request: its reply shows the request's own
                # reply was the worker's last word on it (a forged one comes before the real).
                self.events.send({"id": request.get("id", 0), "ev": "done"})
                continue
            self._handle(request)

    def _idle(self) -> bool:
        """Whether no request arrives within `spare_shells.SPARE_IDLE_MS`. A request that follows
        its predecessor at once (the variables dump after a command) goes first: starting a
        spare would delay it."""
        if self.pending:
            return False
        poller = select.poll()
        poller.register(self.requests.fileno(), select.POLLIN)
        return not poller.poll(self.spare_shells.SPARE_IDLE_MS)

    def _take_next(self) -> dict[str, Any]:
        waiting, self._next = self._next, None
        if isinstance(waiting, Exception):
            raise waiting
        return waiting if waiting is not None else self._read_request()

    def _answer(self, reply: dict[str, Any]) -> None:
        """Send a request's reply and, when the host's fence for it is already in the pipe (it
        is sent in the same write as the request), the fence's empty ``done`` in the same write:
        the host wakes once per call instead of twice. The fence is read only now, after the
        request ran, so the code it ran never had the fence's id in this process to forge."""
        fence_id = None
        poller = select.poll()
        poller.register(self.requests.fileno(), select.POLLIN)
        # A fence read while the code waited for a tool's result is already in `pending`.
        if self.pending or poller.poll(0):
            try:
                following = self._read_request()
            except (EOFError, ValueError) as exc:
                self._next = exc
            else:
                if following.get("op") == "fence":
                    fence_id = following.get("id", 0)
                else:  # sandboxed code took the fence off the pipe: the loop handles this one
                    self._next = following
        if fence_id is None:
            self.events.send(reply)
        else:
            self.events.send(reply, {"id": fence_id, "ev": "done"})

    def _read_request(self) -> dict[str, Any]:
        if self.pending:
            return self.pending.pop(0)
        return self._read_frame()

    def _read_frame(self) -> dict[str, Any]:
        size = int.from_bytes(self._read_exactly(4), "little")
        request = marshal.loads(self._read_exactly(size))
        if not isinstance(request, dict):
            raise ValueError("a request is a dict")
        return request

    def _read_exactly(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.requests.read(size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    def _control_loop(self) -> None:
        control = os.fdopen(self.control_fd, "rb")
        for line in control:
            words = line.split()
            if len(words) == 2 and words[0] == b"interrupt" and words[1].isdigit():
                self.interrupter.interrupt(int(words[1]))

    def _handle(self, request: dict[str, Any]) -> None:
        request_id = int(request.get("id", 0))
        op = request.get("op")
        if op not in ("command", "dump"):
            # The user's code runs in this process (a cell, unpickling, an import finder's hook)
            # and may change what a spare inherited; no spare until the next shell command. A
            # dump's pickling hooks are the user's code too, but rarely change anything: a
            # spare is checked against what it inherited instead.
            self.spares.drop()
            self._spare_for = None
        try:
            if op == "exec":
                reply = self._exec(request_id, request)
            elif op == "command":
                reply = self._command(request_id, request)
            elif op == "dump":
                reply = self._dump(request_id, request)
            elif op == "load":
                reply = self._load(request)
            elif op == "invalidate_caches":
                import importlib

                importlib.invalidate_caches()
                reply = {}
            else:
                reply = {"failure": self.guest.failure_facts(ValueError(op))}
        except KeyboardInterrupt:
            # An interrupt that raced the end of a request: still reply, or the host would wait.
            reply = {}
        except BaseException as exc:
            # Facts only (class name, errno): the host words the failure itself.
            reply = {"failure": self.guest.failure_facts(exc)}
        finally:
            self.interrupter.stop()
        if os.getpid() != self.pid:
            # A child user code forked (os.fork without exec) came back into the worker: it must
            # neither reply nor read the next request.
            os._exit(0)
        reply.update(id=request_id, ev="done")
        self._answer(reply)
        if op == "command":
            self._spare_for = request if request.get("warm") else None

    # ------------------------------------------------------------------ code

    def _exec(self, request_id: int, request: dict[str, Any]) -> dict[str, Any]:
        guest = self.guest
        limit = int(request.get("limit", 1_000_000))
        out, err = (
            self.capture.OutputCapture(limit, on_head=self._sender(request_id, name))
            for name in ("stdout", "stderr")
        )
        self._install_streams()
        self.stdout.attach(out)
        self.stderr.attach(err)
        saved_env = guest.apply_env(request.get("env") or {})
        reply: dict[str, Any] = {}
        started = time.perf_counter()
        tools = self._install_tools(request_id, request.get("tools"))
        try:
            self.interrupter.start(request_id)
            try:
                value = self.cells.run(str(request.get("code", "")))
            finally:
                self.interrupter.stop()
                if tools is not None and self.namespace.get("tools") is tools:
                    # Not a variable of the session: the next call brings its own (or none).
                    del self.namespace["tools"]
            text = guest.value_text(value)
            if text is not None:
                reply["value"] = text
        except BaseException as exc:
            reply["error"] = guest.describe_exception(exc, machinery=(_OWN_FILE,))
        reply["duration_ms"] = (time.perf_counter() - started) * 1000
        guest.restore_env(saved_env)
        guest.flush_streams()
        pngs, failed, left_out = guest.collect_figures()
        if pngs:
            reply["figures"] = [_base64(png) for png in pngs]
        if failed:
            reply["figures_failed"] = failed
        if left_out:
            reply["figures_left_out"] = left_out
        self.stdout.detach()
        self.stderr.detach()
        reply["dropped"] = {
            "stdout": self._finish(request_id, "stdout", out),
            "stderr": self._finish(request_id, "stderr", err),
        }
        if os.getpid() == self.pid:
            self._end_strays()
        return reply

    def _install_tools(self, request_id: int, specs: Any) -> Any:
        """Put a ``tools`` object for this request in the namespace, if it carries tools."""
        if not specs:
            return None
        tools = self.guest.Tools(
            list(specs), lambda name, args: self._call_tool(request_id, name, args)
        )
        self.namespace["tools"] = tools
        return tools

    def _call_tool(self, request_id: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Ask the host to run tool ``name`` and wait for its result (see the module docstring).

        An interrupt (the call's timeout) ends the wait with ``KeyboardInterrupt`` while no
        frame is half read: SIGINT is blocked from a frame's first byte to its last.
        """
        self._tool_seq += 1
        seq = self._tool_seq
        self.events.send({"id": request_id, "ev": "tool", "seq": seq, "name": name, "args": args})
        poller = select.poll()
        poller.register(self.requests.fileno(), select.POLLIN)
        while True:
            poller.poll()  # interruptible: nothing of a frame has been read yet
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                frame = self._read_frame()
                answer = (
                    frame.get("op") == _TOOL_RESULT
                    and frame.get("id") == request_id
                    and frame.get("seq") == seq
                )
                if not answer and frame.get("op") != _TOOL_RESULT:
                    self.pending.append(frame)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            if answer:
                return frame

    def _end_strays(self) -> None:
        """`process_groups.end_strays`, unless no process was made since it last ran.

        Walking ``/proc`` is most of a warm call's time in here. Every process needs a pid, so
        when the pid namespace's counter has not moved since the last walk (which ended the
        strays there were), nothing new can be running. The counter is read before the walk:
        a process forked during it moves the counter, and the next call walks again.
        """
        counter = self.groups.pid_counter()
        if counter is not None and counter == self._pids_seen:
            return
        self._pids_seen = counter
        self.groups.end_strays()

    # --------------------------------------------------------------- commands

    def _command(self, request_id: int, request: dict[str, Any]) -> dict[str, Any]:
        limit = int(request.get("limit", 1_000_000))
        # Each stream's head goes to the host as it comes; its tail when the command ends.
        captures = {
            name: self.capture.OutputCapture(limit, on_head=self._sender(request_id, name))
            for name in ("stdout", "stderr")
        }
        import subprocess

        shell, cwd, env = _command_context(request)
        script = os.fsencode(str(request["command"]))
        started = time.perf_counter()
        process = None
        if request.get("warm"):
            process = self.spares.run(shell, cwd, env, script, _preamble(request))
        if process is None:
            process = subprocess.Popen(
                [shell, "-c", script],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                **self.groups.start_group(),
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
                    captures[open_fds[fd]].write(chunk)
                else:
                    poller.unregister(fd)
                    del open_fds[fd]
        exit_code = process.wait()
        self.interrupter.stop()
        # What the command left running in its process group ends with it (a fork bomb too);
        # long-lived services are started with setsid or from Python with start_new_session.
        self.groups.end_group(process.pid, wait=2.0)
        process.stdout.close()
        process.stderr.close()
        return {
            "exit_code": exit_code,
            "duration_ms": (time.perf_counter() - started) * 1000,
            "dropped": {name: self._finish(request_id, name, c) for name, c in captures.items()},
        }

    def _sender(self, request_id: int, stream: str) -> Callable[[bytes], None]:
        """Sends bytes of one stream of a request as ``out`` events (latin-1: one character a
        byte, so they round-trip exactly through JSON)."""

        def send(data: bytes) -> None:
            if data:
                out = {"id": request_id, "ev": "out", "stream": stream}
                self.events.send({**out, "data": data.decode("latin-1")})

        return send

    def _finish(self, request_id: int, stream: str, capture: Any) -> int:
        """Send a stream's kept tail; how many bytes were dropped before it."""
        self._sender(request_id, stream)(capture.tail)
        return int(capture.omitted)

    # -------------------------------------------------------------- variables

    def _kernel_state(self) -> types.ModuleType:
        module = sys.modules.get("_sandbox_kernel_state")
        if module is None:
            module = type(sys)("_sandbox_kernel_state")
            module.__file__ = self.kernel_state_path
            with open(self.kernel_state_path, encoding="utf-8") as handle:
                source = handle.read()
            exec(compile(source, self.kernel_state_path, "exec"), module.__dict__)
            with open(self.cloudpickle_path, encoding="utf-8") as handle:
                module.prepare(handle.read())
            sys.modules["_sandbox_kernel_state"] = module
        return module

    def _dump(self, request_id: int, request: dict[str, Any]) -> dict[str, Any]:
        max_bytes = request.get("max_bytes")
        blob, saved, skipped = self._kernel_state().dump_namespace(self.namespace, max_bytes)
        view = memoryview(blob)
        for start in range(0, len(blob), _DUMP_CHUNK):
            chunk = _base64(view[start : start + _DUMP_CHUNK])
            self.events.send({"id": request_id, "ev": "out", "stream": "variables", "data": chunk})
        return {"size": len(blob), "saved": saved, "skipped": skipped}

    def _load(self, request: dict[str, Any]) -> dict[str, Any]:
        blob = bytes(request["data"])
        failed = self._kernel_state().load_namespace(self.namespace, blob)
        return {"failed": failed}


def _preamble(request: dict[str, Any]) -> bytes:
    """The start of a warm command's script that a spare may run before the command arrives
    (the persistent shell's setup: it depends on nothing but the environment)."""
    return os.fsencode(str(request.get("preamble", "")))


def _command_context(request: dict[str, Any]) -> tuple[str, str | None, dict[str, str]]:
    """The shell, working directory (``None``: the worker's) and environment of a command."""
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
    return str(request.get("shell", "/bin/bash")), request.get("cwd") or None, env


def _base64(data: bytes | memoryview) -> str:
    import binascii

    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _load_guest(path: str, name: str) -> Any:
    """A guest module from its source or its precompiled bytecode, as ``sys.modules[name]``."""
    module = type(sys)(name)
    module.__file__ = path
    with open(path, "rb") as handle:
        data = handle.read()
    # A .pyc is its 16-byte header and the marshalled module code (the format py_compile writes).
    code = marshal.loads(data[16:]) if path.endswith(".pyc") else compile(data, path, "exec")
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


# As compiled: the source path, or the name given when the worker was compiled ahead of time.
_OWN_FILE = _load_guest.__code__.co_filename


def main(argv: list[str]) -> None:
    """Entry point: ``local_worker.py REQUEST_FD EVENT_FD CONTROL_FD KERNEL_STATE CLOUDPICKLE
    CELLS PROCESS_GROUPS SPARE_SHELLS OUTPUT_CAPTURE [SYS_PATH...]`` (the last four: those
    modules' sources or bytecode; ``CLOUDPICKLE``: the source kernel_state pickles with)."""
    request_fd, event_fd, control_fd = (int(arg) for arg in argv[:3])
    for fd in (request_fd, event_fd, control_fd):
        os.set_inheritable(fd, False)
    sys.path[:0] = argv[9:]
    sys.dont_write_bytecode = True
    guest = _load_guest(argv[5], "_sandbox_guest")
    groups = _load_guest(argv[6], "_sandbox_process_groups")
    spare_shells = _load_guest(argv[7], "_sandbox_spare_shells")
    capture = _load_guest(argv[8], "_sandbox_output_capture")
    modules = (guest, groups, spare_shells, capture)
    worker = Worker(request_fd, event_fd, control_fd, (argv[3], argv[4]), *modules)
    worker.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
