"""One process inside an emulated E2B sandbox that starts every other one there, and reaches its ports.

A real E2B sandbox is one VM: a command, the Jupyter kernel and a server a command left running
share its processes and its network. A daemon a command starts with ``setsid`` or ``nohup``
outlives the command; ``localhost:8000`` is the same port for all of them; killing the sandbox
kills them all. The emulator plays that with one bubblewrap sandbox per machine, whose first
process is this *init*: the host asks it (JSON lines on its stdin) to start a program, and it
sends the program's output and exit back (JSON lines on its stdout), so everything runs in the
init's pid and network namespaces. It also listens on a Unix socket in the machine's ``/tmp``
(a host directory) and connects each client to a TCP port on its loopback: how the emulator's
edge reaches a port of the sandbox, as E2B's edge reaches ``PORT-SANDBOXID.e2b.app``.

`InitProcess` is the host side; `Child` looks like the ``asyncio`` subprocess it replaces
(``stdin``, ``stdout``, ``stderr``, ``pid``, ``returncode``, ``wait``), plus ``kill``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import signal
import socket
from typing import Any

EDGE_SOCKET = ".e2b-emulator-edge"
"""Name of the init's Unix socket in the machine's ``/tmp``."""

INIT_LINE_LIMIT = 1024 * 1024
"""Longest line the init sends (a 64 KiB chunk of output in base64, and its envelope)."""

# Stdlib only: it runs with the sandbox's python. Children start in a session of their own (one
# group to signal); their orphans are reaped by bubblewrap, pid 1 of the namespace.
_INIT = r"""
import base64, json, os, signal, socket, subprocess, sys, threading
_out = sys.stdout.buffer
_lock = threading.Lock()
_children = {}
def emit(obj):
    line = (json.dumps(obj) + "\n").encode()
    with _lock:
        _out.write(line); _out.flush()
def pump(cid, stream, fd):
    while True:
        data = os.read(stream.fileno(), 65536)
        if not data:
            break
        emit({"id": cid, "fd": fd, "data": base64.b64encode(data).decode()})
    emit({"id": cid, "fd": fd, "eof": True})
def run(cid, argv):
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        emit({"id": cid, "error": str(exc)}); return
    _children[cid] = proc
    emit({"id": cid, "pid": proc.pid})
    pumps = [threading.Thread(target=pump, args=(cid, s, fd), daemon=True)
             for s, fd in ((proc.stdout, 1), (proc.stderr, 2))]
    for t in pumps: t.start()
    for t in pumps: t.join()
    code = proc.wait()
    emit({"id": cid, "exit": 128 - code if code < 0 else code})
def copy(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try: s.shutdown(how)
        except OSError: pass
def relay(client):
    with client:
        port = b""
        while not port.endswith(b"\n") and len(port) < 8:
            chunk = client.recv(1)
            if not chunk: return
            port += chunk
        try:
            upstream = socket.create_connection(("127.0.0.1", int(port)))
        except (OSError, ValueError):
            client.sendall(b"refused\n"); return
        with upstream:
            client.sendall(b"ok\n")
            back = threading.Thread(target=copy, args=(upstream, client), daemon=True)
            back.start(); copy(client, upstream); back.join()
def edge(path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(path); server.listen(64)
    while True:
        client, _ = server.accept()
        threading.Thread(target=relay, args=(client,), daemon=True).start()
threading.Thread(target=edge, args=(sys.argv[1],), daemon=True).start()
emit({"ready": True})
for line in sys.stdin.buffer:
    msg = json.loads(line)
    op, cid = msg["op"], msg.get("id")
    if op == "spawn":
        threading.Thread(target=run, args=(cid, msg["argv"]), daemon=True).start()
        continue
    proc = _children.get(cid)
    if proc is None:
        continue
    try:
        if op == "stdin":
            proc.stdin.write(base64.b64decode(msg["data"])); proc.stdin.flush()
        elif op == "close":
            proc.stdin.close()
        elif op == "signal":
            os.killpg(proc.pid, msg["sig"])
    except (OSError, ValueError):
        pass
"""


def init_argv(python: str, socket_path: str) -> list[str]:
    """The argv of the init inside the sandbox; ``socket_path`` is its edge socket there."""
    return [python, "-u", "-c", _INIT, socket_path]


class _Stdin:
    """A child's stdin, written through the init."""

    def __init__(self, init: InitProcess, cid: int) -> None:
        self._init, self._cid = init, cid

    def write(self, data: bytes) -> None:
        self._init.send({"op": "stdin", "id": self._cid, "data": base64.b64encode(data).decode()})

    async def drain(self) -> None:
        await self._init.drain()

    def close(self) -> None:
        self._init.send({"op": "close", "id": self._cid})


class Child:
    """A program the init started, seen from the host."""

    def __init__(self, init: InitProcess, cid: int, limit: int) -> None:
        self._init = init
        self._cid = cid
        self.stdin = _Stdin(init, cid)
        self.stdout = asyncio.StreamReader(limit=limit)
        self.stderr = asyncio.StreamReader(limit=limit)
        self.pid: int | None = None
        self.returncode: int | None = None
        self.started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._exited = asyncio.Event()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the child's process group (a no-op once the sandbox is gone)."""
        self._init.send({"op": "signal", "id": self._cid, "sig": int(sig)})

    def _event(self, event: dict[str, Any]) -> None:
        if "pid" in event:
            self.pid = event["pid"]
            self.started.set_result(None)
        elif "error" in event:
            self.started.set_exception(OSError(event["error"]))
            self._exit(127)
        elif "exit" in event:
            self._exit(int(event["exit"]))
        else:
            stream = self.stdout if event["fd"] == 1 else self.stderr
            if event.get("eof"):
                stream.feed_eof()
            else:
                stream.feed_data(base64.b64decode(event["data"]))

    def _exit(self, code: int) -> None:
        for stream in (self.stdout, self.stderr):
            if not stream.at_eof():
                stream.feed_eof()
        if not self.started.done():
            self.started.set_exception(OSError("the sandbox is gone"))
        self.returncode = code
        self._exited.set()


class InitProcess:
    """The host's end of a machine's init: start programs in the sandbox, hear from them."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self._ids = itertools.count(1)
        self._children: dict[int, Child] = {}
        self._reader: asyncio.Task[None] | None = None

    async def wait_ready(self) -> None:
        line = await self.proc.stdout.readline()
        if not line:
            stderr = (await self.proc.stderr.read()).decode(errors="replace")
            raise RuntimeError(f"the emulated sandbox did not start: {stderr.strip()}")
        self._reader = asyncio.create_task(self._read())

    def send(self, message: dict[str, Any]) -> None:
        if self.proc.stdin.is_closing():
            return
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    async def drain(self) -> None:
        with contextlib.suppress(ConnectionError):
            await self.proc.stdin.drain()

    async def spawn(self, argv: list[str], *, limit: int) -> Child:
        """Start ``argv`` in the sandbox; returns once it runs (``OSError`` if it cannot)."""
        cid = next(self._ids)
        child = Child(self, cid, limit)
        self._children[cid] = child
        if self._reader is None or self._reader.done():
            child._exit(137)
        else:
            self.send({"op": "spawn", "id": cid, "argv": argv})
        await child.started
        return child

    async def _read(self) -> None:
        try:
            while line := await self.proc.stdout.readline():
                event = json.loads(line)
                child = self._children.get(event["id"])
                if child is not None:
                    child._event(event)
                    if child.returncode is not None:
                        del self._children[event["id"]]
        finally:
            for child in self._children.values():
                child._exit(137)  # the sandbox died: every program in it with it
            self._children.clear()


def connect_port(socket_path: str, port: int, *, timeout: float = 10.0) -> socket.socket:
    """A connection to ``port`` on the sandbox's loopback, through its init's edge socket.

    Raises ``ConnectionRefusedError`` when nothing listens there (or the sandbox is gone).
    """
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(timeout)
    try:
        conn.connect(socket_path)
        conn.sendall(f"{port}\n".encode())
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = conn.recv(1)
            if not chunk:
                break
            answer += chunk
    except OSError:
        conn.close()
        raise ConnectionRefusedError(f"nothing listens on port {port}") from None
    if answer != b"ok\n":
        conn.close()
        raise ConnectionRefusedError(f"nothing listens on port {port}")
    conn.settimeout(None)
    return conn


__all__ = ["EDGE_SOCKET", "INIT_LINE_LIMIT", "Child", "InitProcess", "connect_port", "init_argv"]
