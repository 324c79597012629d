"""The program the Runloop and Kubernetes providers run inside a devbox or pod (stdlib only).

Neither has a kernel API, only shell commands. Stateful Python therefore needs a process that
outlives one command: ``serve`` is that process, a small Python interpreter listening on a Unix
socket, started in the background by the first ``code`` call and found again by later ones. Every
other operation is a short-lived command that prints exactly one result line (prefixed with
`RESULT_MARKER`) so the provider can pick it out of whatever a login shell prints.

Operations (``main(["-", OP, REQUEST])``; the provider imports this file as a module so its
bytecode is cached; ``REQUEST`` is base64 JSON, or ``@path`` of a JSON file the worker deletes
after reading):

* ``code`` / ``dump`` / ``load`` / ``save``: talk to the persistent interpreter (``save`` writes the
  variables to disk so they survive a suspend, which keeps the disk but not the memory; a ``dump``
  larger than `INLINE_DUMP_BYTES` is left in files (`DUMP_NAME` ``.0``, ``.1``...)
  for the provider to download, not put in the answer line);
* ``cmd``: run ``bash -c`` with a cwd, extra environment, a timeout and capped output;
* ``ls``: list a directory without following symlinks;
* ``changes``: how the workspace differs from the listing the host knows
  (`changes`: changed entries, gone paths, the
  contents of changed regular files), and with ``variables_max_bytes`` the interpreter's ``dump``
  too, so a capture is one call. The host sends its listing as ``known``, or as ``since``: the
  token of the listing this worker answered last, which it keeps in `LISTING_NAME` (an
  unknown token is answered ``{"stale": true}``, and the host sends the listing itself);
* ``unpack``: write the files of the tar archive at ``path`` (one upload) into the workspace and
  delete it (`unpack_files`), so a batch of files costs one command, not one upload each;
* ``serve``: the interpreter itself (internal).

Any request may carry ``head`` (``{"name": ..., "value": ...}``): the interpreter sets that global
before the operation (for ``cmd`` and ``ls``, the short-lived client hands it over first), so the
sandbox's head marker travels with the user's call instead of costing a call of its own.

The provider sends this file together with `kernel_state` and
the cloudpickle it pickles with, `guest` (how a cell runs, the
same in every sandbox) and `OutputCapture` (one implementation of
each, see `langchain_sandbox.providers.worker_session.worker_script`; the modules'
sources compressed); the lines between the ``package-imports`` markers below are cut out when it
does.

Why one module over 500 lines: it is shipped into the devbox as one script, so the interpreter
server, its short-lived client, commands and listings travel together; how a cell runs is in
`guest`.
"""

from __future__ import annotations

# ruff: noqa: I001 (the package-imports block below must stay apart from the stdlib imports)
import binascii
import builtins
import contextlib
import functools
import json
import os
import signal
import site
import socket
import struct
import sys
import threading
import time
import types

# Every call starts a Python process in the devbox, so imports cost latency on every call: in the
# devbox copy, what only annotations use goes away with this block, and modules only one kind of
# call needs are imported where it runs.
# <package-imports>
from collections.abc import Callable
from typing import Any

from langchain_sandbox.providers.guest import cells as _guest_module
from langchain_sandbox.providers.guest import tool_frames as _guest_tool_frames_module
from langchain_sandbox.providers.guest.changes import answer_changes
from langchain_sandbox.providers.guest import variables as _kernel_state_module
from langchain_sandbox.providers.guest.packer import cloudpickle_source
from langchain_sandbox.providers.guest.process_groups import (
    end_group,
    start_group,
    terminate_group,
)
from langchain_sandbox.providers.guest.unpack import unpack_files
from langchain_sandbox.results import OutputCapture

_SHIPPED: dict[str, Any] = {
    "kernel_state": _kernel_state_module,
    "guest": _guest_module,
    "guest_tool_frames": _guest_tool_frames_module,
}
# The devbox copy carries the modules' sources here instead (zlib-compressed, then base64).
SHIPPED_SOURCES: dict[str, str] = {}


def _cloudpickle() -> str:
    return cloudpickle_source()


# </package-imports>

RESULT_MARKER = "LCSB-RESULT:"
WORKSPACE = "/home/user"  # workspace.WORKSPACE_ROOT; this file runs without the package
SOCKET_NAME = "kernel.sock"
PID_NAME = "kernel.pid"
SAVED_NAME = "saved-variables.pkl"
DUMP_NAME = "variables-dump.pkl"
LISTING_NAME = "last-listing.marshal"
INLINE_DUMP_BYTES = 1024 * 1024
DUMP_PART_BYTES = 16 * 1024 * 1024  # a large dump is downloaded in files of this size
KILL_GRACE = 3.0


def _shipped(name: str) -> Any:
    """`kernel_state` or `guest`:
    imported in the package; in a devbox, built from the source the provider inlined, and only by
    the interpreter, so that short-lived calls do not pay for it."""
    module = _SHIPPED.get(name)
    if module is None:
        module = types.ModuleType(name)
        exec(compile(_unpacked(name), f"{name}.py", "exec"), module.__dict__)
        _SHIPPED[name] = module
    return module


def _unpacked(name: str) -> str:
    import zlib

    return zlib.decompress(binascii.a2b_base64(SHIPPED_SOURCES[name])).decode()


def _kernel_state() -> Any:
    """`kernel_state`, ready to pickle."""
    module = _shipped("kernel_state")
    module.prepare(_cloudpickle())
    return module


_OWN_FILE = _shipped.__code__.co_filename


class _CodeTimeout(BaseException):
    """Raised in the interpreter's main thread when a cell runs past its timeout."""


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode()


def _emit(payload: dict[str, Any]) -> None:
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(payload) + "\n")
    sys.stdout.flush()


def _read_request(arg: str) -> dict[str, Any]:
    if arg.startswith("@"):
        with open(arg[1:], "rb") as handle:
            raw = handle.read()
        os.unlink(arg[1:])
        request: dict[str, Any] = json.loads(raw)
    else:
        request = json.loads(binascii.a2b_base64(arg))
    return request


# ---- the persistent interpreter --------------------------------------------------------------


class _Interpreter:
    """The globals of one session and how a cell runs in them."""

    def __init__(self, state_dir: str) -> None:
        guest = _shipped("guest")
        self.state_dir = state_dir
        self.outputs = guest.FdCapture(1), guest.FdCapture(2)
        self.streams = guest.text_stream(1), guest.text_stream(2)
        self.cells = guest.Cells({"__name__": "__main__", "__builtins__": builtins})
        self.namespace: dict[str, Any] = self.cells.namespace
        self.listener: socket.socket | None = None  # where the next client connects
        # Facts for the host to word (never sentences: see providers/guest_facts.py).
        self.facts: dict[str, Any] = {}

    def restore_saved(self) -> None:
        """Load variables a ``save`` left on disk before a suspend, then forget them."""
        path = os.path.join(self.state_dir, SAVED_NAME)
        if not os.path.exists(path):
            return
        try:
            with open(path, "rb") as handle:
                failed = _kernel_state().load_namespace(self.namespace, handle.read())
            skipped: list[str] = []
            if os.path.exists(path + ".skipped"):
                with open(path + ".skipped", encoding="utf-8") as handle:
                    skipped = json.load(handle)
            self.facts["resumed"] = {"lost": sorted({*skipped, *failed})}
        except Exception:
            self.facts["resumed"] = {"failed": True}
        finally:
            for leftover in (path, path + ".skipped"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)

    def run(
        self,
        request: dict[str, Any],
        echo: Callable[[str, str], None] | None = None,
        conn: socket.socket | None = None,
    ) -> dict[str, Any]:
        """``conn``: the client's, which relays the code's tool calls (``tools`` in the request)."""
        guest = _shipped("guest")
        if request.get("tools") and conn is not None:
            calls = _shipped("guest_tool_frames").RelayedToolCalls(
                lambda frame: _send(conn, {"frame": frame}),
                lambda: _receive(conn).get("tool_result"),
                (conn, self.listener),
            )
            self.namespace["tools"] = guest.Tools(request["tools"], calls)
        limit = int(request.get("max_output_bytes", 1_000_000))
        # With an ``echo``, the head each capture keeps is passed on as it comes.
        out, err = (OutputCapture(limit, _echoer(name, echo)) for name in ("stdout", "stderr"))
        result: dict[str, Any] = {"value": None, "error": None, "timed_out": False}
        saved_env = guest.apply_env(request.get("env", {}))
        for output, capture in zip(self.outputs, (out, err), strict=True):
            output.restore()
            output.attach(capture)
        sys.stdout, sys.stderr = self.streams
        started = time.monotonic()
        timeout = request.get("timeout")
        try:
            # A package installed since the last cell may live in a user site that did not exist
            # when this interpreter started.
            site.addsitedir(site.getusersitepackages())
            __import__("importlib").invalidate_caches()
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, float(timeout))
            value = self.cells.run(request["code"])
            signal.setitimer(signal.ITIMER_REAL, 0)
            result["value"] = guest.value_text(value)
        except _CodeTimeout:
            result["timed_out"] = True
        except BaseException as exc:
            result["error"] = guest.describe_exception(exc, machinery=(_OWN_FILE,))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if request.get("tools"):
                self.namespace.pop("tools", None)  # not a variable: the next call brings its own
            guest.flush_streams()
            for output in self.outputs:
                output.detach()
            guest.restore_env(saved_env)
        pngs, failed, left_out = guest.collect_figures()
        result.update(
            stdout=out.text(),
            stderr=err.text(),
            omitted=out.omitted + err.omitted,
            duration_ms=(time.monotonic() - started) * 1000,
            artifacts=[
                {"name": f"figure-{index}.png", "data": _b64(png)}
                for index, png in enumerate(pngs, start=1)
            ],
            figures_failed=failed,
            figures_left_out=left_out,
            **self.facts,
        )
        self.facts = {}
        return result

    def handle(
        self,
        request: dict[str, Any],
        echo: Callable[[str, str], None] | None = None,
        conn: socket.socket | None = None,
    ) -> dict[str, Any]:
        op = request.get("op")
        head = request.get("head")
        if head:
            # The head marker rides with the call it follows (see the provider's carry_head).
            self.namespace[head["name"]] = head["value"]
        if op == "head":
            return {}
        if op == "code":
            return self.run(request, echo, conn)
        if op == "dump":
            for name in os.listdir(self.state_dir):
                if name.startswith(DUMP_NAME):  # the last dump's parts, downloaded since
                    os.unlink(os.path.join(self.state_dir, name))
            max_bytes = request.get("max_bytes")
            blob, saved, skipped = _kernel_state().dump_namespace(self.namespace, max_bytes)
            answer: dict[str, Any] = {"size": len(blob), "saved": saved, "skipped": skipped}
            if len(blob) <= INLINE_DUMP_BYTES:
                return {**answer, "data": _b64(blob)}
            paths: list[str] = []
            for start in range(0, len(blob), DUMP_PART_BYTES):
                paths.append(os.path.join(self.state_dir, f"{DUMP_NAME}.{len(paths)}"))
                with open(paths[-1], "wb") as handle:
                    handle.write(blob[start : start + DUMP_PART_BYTES])
            return {**answer, "paths": paths}
        if op == "load":
            with open(request["path"], "rb") as handle:
                blob = handle.read()
            os.unlink(request["path"])
            return {"failed": _kernel_state().load_namespace(self.namespace, blob)}
        if op == "save":
            blob, saved, skipped = _kernel_state().dump_namespace(self.namespace)
            path = os.path.join(self.state_dir, SAVED_NAME)
            # The names that cannot be saved go beside the blob, so the notice after the resume
            # can tell the model what was lost.
            with open(path + ".skipped", "w", encoding="utf-8") as handle:
                json.dump(skipped, handle)
            with open(path, "wb") as handle:
                handle.write(blob)
            return {"saved": saved, "skipped": skipped}
        return {"failure": _shipped("guest").failure_facts(ValueError(op))}


_SENDING = threading.Lock()  # output pumps, the cell's tool calls and the reply relay share conns


def _send(conn: socket.socket, payload: dict[str, Any]) -> None:
    data = json.dumps(payload).encode()
    with _SENDING:
        conn.sendall(struct.pack(">Q", len(data)) + data)


def _relay_reply(conn: socket.socket, reply: Any) -> None:
    _send(conn, {"tool_result": reply})  # a reply the host wrote to this command's stdin


def _send_output(conn: socket.socket, name: str, text: str) -> None:
    if text:
        _send(conn, {"stream": name, "data": text})


def _receive(conn: socket.socket) -> dict[str, Any]:
    header = _receive_exactly(conn, 8)
    message: dict[str, Any] = json.loads(_receive_exactly(conn, struct.unpack(">Q", header)[0]))
    return message


def _receive_exactly(conn: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = conn.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks += chunk
    return bytes(chunks)


def _on_alarm(signum: int, frame: Any) -> None:
    raise _CodeTimeout()


def serve(state_dir: str) -> None:
    """Run the persistent interpreter: one request at a time, for as long as the devbox lives."""
    signal.signal(signal.SIGALRM, _on_alarm)
    os.chdir(WORKSPACE)
    sys.path.insert(0, WORKSPACE)
    interpreter = _Interpreter(state_dir)
    interpreter.restore_saved()
    path = os.path.join(state_dir, SOCKET_NAME)
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    interpreter.listener = listener
    with open(os.path.join(state_dir, PID_NAME), "w") as handle:
        handle.write(str(os.getpid()))
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                request = _receive(conn)
            except (OSError, ValueError):
                continue
            try:
                echo = functools.partial(_send_output, conn) if request.get("stream") else None
                response = interpreter.handle(request, echo, conn)
            except BaseException as exc:
                response = {"failure": _shipped("guest").failure_facts(exc)}
            try:
                _send(conn, response)
            except OSError:
                continue


# ---- the short-lived client side -------------------------------------------------------------


def _start_server(state_dir: str) -> None:
    import subprocess

    env = dict(os.environ, MPLBACKEND=os.environ.get("MPLBACKEND", "Agg"), PYTHONUNBUFFERED="1")
    with open(os.devnull, "rb") as devnull_in, open(os.devnull, "wb") as devnull_out:
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "serve", state_dir],
            stdin=devnull_in,
            stdout=devnull_out,
            stderr=devnull_out,
            cwd=WORKSPACE,
            env=env,
            **start_group(),
        )
    deadline = time.monotonic() + 30
    path = os.path.join(state_dir, SOCKET_NAME)
    while time.monotonic() < deadline:
        if os.path.exists(path):
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                    probe.connect(path)
                return
            except OSError:
                pass
        time.sleep(0.02)
    raise RuntimeError("the Python worker did not start")


def _kill_server(state_dir: str) -> None:
    try:
        with open(os.path.join(state_dir, PID_NAME)) as handle:
            pid = int(handle.read().strip())
        # A pid file restored from a disk snapshot names a process of another boot: kill only
        # if that pid is still this interpreter.
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if b"serve" in handle.read().split(b"\0"):
                end_group(pid)
    except (OSError, ValueError):
        pass
    for name in (SOCKET_NAME, PID_NAME):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(state_dir, name))


def call_interpreter(state_dir: str, request: dict[str, Any]) -> dict[str, Any]:
    """Hand ``request`` to the interpreter (starting it if needed) and return its answer.

    With ``if_running`` set, an interpreter that is not running is not started (``save`` before a
    suspend has nothing to save then).
    """
    facts: dict[str, Any] = {}
    path = os.path.join(state_dir, SOCKET_NAME)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        if request.get("if_running"):
            return {"not_running": True}
        restarting = os.path.exists(os.path.join(state_dir, PID_NAME))
        if restarting and not os.path.exists(os.path.join(state_dir, SAVED_NAME)):
            facts["restarted"] = True
        if restarting:
            _kill_server(state_dir)
        _start_server(state_dir)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    timeout = request.get("timeout")
    deadline = time.monotonic() + float(timeout) + KILL_GRACE if timeout else None
    with conn:
        _send(conn, request)
        if request.get("tools"):
            deliver = functools.partial(_relay_reply, conn)
            relay = _shipped("guest_tool_frames").relay_lines
            threading.Thread(target=relay, args=(0, deliver), daemon=True).start()
        try:
            response = _receive_answer(conn, deadline)
        except TimeoutError:
            # The cell ignored the interrupt (a long call in C code): only a kill stops it.
            _kill_server(state_dir)
            return {
                "timed_out": True,
                "stdout": "",
                "stderr": "",
                "killed_after_timeout": True,
                **facts,
            }
        except ConnectionError:
            # The code ended the interpreter itself (os._exit, a crash): a user-code failure.
            _kill_server(state_dir)
            return {
                "stdout": "",
                "stderr": "",
                "error": {
                    "name": "InterpreterExited",
                    "value": "the Python interpreter exited while running the code; "
                    "variables defined earlier are gone",
                    "traceback": "",
                },
                **facts,
            }
    return {**response, **facts}


def _receive_answer(conn: socket.socket, deadline: float | None) -> dict[str, Any]:
    """The interpreter's answer; output it streams first is written to this process's own
    stdout and stderr, where the caller watches the execution's output live."""
    while True:
        if deadline is not None:
            conn.settimeout(max(deadline - time.monotonic(), 0.001))
        message = _receive(conn)
        if "frame" in message:  # a tool call of the code, for the host reading this output
            message = {"stream": "stdout", "data": message["frame"]}
        if "stream" not in message:
            return message
        target = sys.stdout if message["stream"] == "stdout" else sys.stderr
        target.write(message["data"])
        target.flush()


def run_command(request: dict[str, Any]) -> dict[str, Any]:
    """Run ``bash -c`` with output capped at the source and a timeout that kills the group."""
    import subprocess

    limit = int(request.get("max_output_bytes", 1_000_000))
    # Streaming, each capture's head is passed on to this command's own stdout or stderr live.
    echoes = (1, 2) if request.get("stream") else (None, None)
    captures = [
        OutputCapture(limit, None if fd is None else functools.partial(os.write, fd))
        for fd in echoes
    ]
    env = dict(os.environ, **request.get("env", {}))
    cwd = request.get("cwd", WORKSPACE)
    if not os.path.isdir(cwd):
        return {"missing": cwd}
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            ["bash", "-c", request["command"]],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **start_group(),
        )
    except OSError as exc:
        return {"failure": _shipped("guest").failure_facts(exc)}
    readers = [
        threading.Thread(target=_pump, args=(stream, capture), daemon=True)
        for stream, capture in zip((process.stdout, process.stderr), captures, strict=True)
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        process.wait(timeout=request.get("timeout"))
    except subprocess.TimeoutExpired:
        timed_out = True
        terminate_group(process, KILL_GRACE)
    # A background child the command left running may hold the pipes open: read what is there,
    # then stop waiting for it.
    drained = time.monotonic() + 1.0
    for reader in readers:
        reader.join(timeout=max(0.0, drained - time.monotonic()))
    return {
        "stdout": captures[0].text(),
        "stderr": captures[1].text(),
        "omitted": captures[0].omitted + captures[1].omitted,
        "exit_code": None if timed_out else process.returncode,
        "timed_out": timed_out,
        "duration_ms": (time.monotonic() - started) * 1000,
    }


def _pump(stream: Any, capture: OutputCapture) -> None:
    """Feed one pipe to its capture."""
    for chunk in iter(lambda: stream.read1(65536), b""):
        capture.write(chunk)


def _echoer(name: str, echo: Callable[[str, str], None] | None) -> Callable[[bytes], None] | None:
    """What passes a capture's head of stream ``name`` to ``echo`` (as text) live."""
    if echo is None:
        return None
    return lambda data: echo(name, data.decode("utf-8", errors="ignore"))


def list_directory(request: dict[str, Any]) -> dict[str, Any]:
    """Entries under ``path`` (workspace-relative paths), symlinks listed and never followed."""
    top = request["path"]
    try:
        info = os.lstat(top)
    except OSError as exc:
        return {"missing": str(exc)}
    if not os.path.isdir(top) or os.path.islink(top):
        return {"entries": [_entry(top, info)]}
    entries: list[dict[str, Any]] = []
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            children = sorted(os.scandir(directory), key=lambda item: item.name)
        except OSError:
            continue
        for child in children:
            try:
                child_info = child.stat(follow_symlinks=False)
            except OSError:
                continue
            entries.append(_entry(child.path, child_info))
            if request.get("recursive") and child.is_dir(follow_symlinks=False):
                pending.append(child.path)
    return {"entries": entries}


def list_changes(state_dir: str, request: dict[str, Any]) -> dict[str, Any]:
    """The ``changes`` answer of `answer_changes`, the listing it leaves kept in a file of the
    worker's state directory (each call is a new process)."""
    import marshal

    path = os.path.join(state_dir, LISTING_NAME)

    def remembered() -> Any:
        try:
            with open(path, "rb") as handle:
                return marshal.load(handle)
        except (OSError, EOFError, ValueError, TypeError):
            return None

    def remember(last: Any) -> None:
        with open(path + ".tmp", "wb") as handle:
            marshal.dump(last, handle)
        os.replace(path + ".tmp", path)

    return answer_changes(request, remembered, remember)


def changes_and_variables(
    state_dir: str, request: dict[str, Any], head: dict[str, str] | None
) -> dict[str, Any]:
    """``list_changes``, then, when the request has ``variables_max_bytes``, the interpreter's
    ``dump`` under ``variables``: a capture's listing, files and variables in one call. The head
    marker rides with the dump (or on its own when there is none)."""
    answer = list_changes(state_dir, request)
    limit = request.get("variables_max_bytes")
    if limit is not None and "stale" not in answer and "missing" not in answer:
        dump = {"op": "dump", "max_bytes": limit, "head": head}
        answer["variables"] = call_interpreter(state_dir, dump)
    elif head is not None:
        call_interpreter(state_dir, {"op": "head", "head": head})
    return answer


def _entry(path: str, info: os.stat_result) -> dict[str, Any]:
    import stat

    kind = (
        "dir" if stat.S_ISDIR(info.st_mode) else "symlink" if stat.S_ISLNK(info.st_mode) else "file"
    )
    return {
        "path": os.path.relpath(path, WORKSPACE),
        "size": 0 if kind == "dir" else info.st_size,
        "mtime_ns": info.st_mtime_ns,
        "mode": stat.S_IMODE(info.st_mode),
        "kind": kind,
    }


def main(argv: list[str]) -> None:
    """``argv[1]`` is the operation, ``argv[2]`` its request (``argv[0]`` is ignored)."""
    op, argument = argv[1], argv[2]
    if op == "serve":
        serve(argument)
        return
    state_dir = os.path.dirname(os.path.abspath(__file__))
    request = _read_request(argument)
    if op in ("code", "dump", "load", "save"):
        _emit(call_interpreter(state_dir, dict(request, op=op)))
        return
    head = request.pop("head", None)
    if op == "changes":
        _emit(changes_and_variables(state_dir, request, head))
        return
    if head is not None:
        call_interpreter(state_dir, {"op": "head", "head": head})
    if op == "cmd":
        _emit(run_command(request))
    elif op == "ls":
        _emit(list_directory(request))
    elif op == "unpack":
        try:
            _emit(unpack_files(request["path"], WORKSPACE))
        except Exception as exc:  # an unreadable archive: the host words what failed
            _emit({"failure": _shipped("guest").failure_facts(exc)})
    else:
        _emit({"failure": _shipped("guest").failure_facts(ValueError(op))})


if __name__ == "__main__":
    main(sys.argv)
