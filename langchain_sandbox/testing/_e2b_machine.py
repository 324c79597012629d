"""What runs code behind the E2B emulator: one "machine" per emulated sandbox, on the local provider.

Each machine is a `LocalSession`: its bubblewrap sandbox
(private ``/home/user``, non-root user, allow-listed environment, no network unless asked, cgroup
limits) is where everything runs. E2B's protocol needs two things that session's own calls do not
offer: a cell that is *interrupted* when the client closes the ``/execute`` stream, and a command
that can be *killed* by pid (``SendSignal``). So the machine runs one more sandbox of that session
(through its launcher), whose first process is an init (`_machine_init`) that starts every
command (``bash -c``) and every code-interpreter context's persistent Python worker (variables
survive between cells, like E2B's Jupyter kernel, and an interrupt request raises
``KeyboardInterrupt`` in it). They share one VM's worth of namespaces, as on E2B: one ``/tmp``,
one process tree (a daemon a command ``setsid``s outlives the command and dies with the sandbox)
and one loopback (a server one command starts, the next one, a cell and the emulator's edge reach).

Host-side file operations (envd's file API) stay inside the workspace and ``/tmp``: symlinks that
lead out are not followed.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_sandbox.core._event_loop import entered_off_loop
from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.network import NetworkPolicy
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.guest import cells as guest
from langchain_sandbox.providers.guest import packer
from langchain_sandbox.providers.local import INTERRUPT_GRACE, LocalProvider, LocalSession
from langchain_sandbox.testing._machine_init import (
    EDGE_SOCKET,
    INIT_LINE_LIMIT,
    Child,
    InitProcess,
    connect_port,
    init_argv,
)

OutputSink = Callable[[str, str], None]
"""Receives ``(stream, text)`` for each chunk of output; ``stream`` is ``stdout`` or ``stderr``."""

# A command starts in its cwd with its own variables, then runs as E2B runs it (bash -c).
_COMMAND_SHIM = 'cd -- "$1" || exit 1; shift; exec /usr/bin/env "$@"'
_SANDBOX_TIMEOUT = 24 * 3600.0  # the machine never times out by itself: E2B's lease does
# One event line of the kernel carries one write of the cell's output (Jupyter does not split a
# large print either): a variables dump's chunks, a long line of user output.
_MAX_KERNEL_LINE = 64 * 1024 * 1024

# The worker speaks JSON lines: one request per line on stdin, events on its original stdout. Cells
# run with the guest module (prepended by _worker_program()), as in every sandbox of this package.
_KERNEL = r"""
import base64, io, json, linecache, os, queue, signal, sys, threading, time
_pipe = sys.stdout
_pipe_lock = threading.Lock()
def _emit(obj):
    with _pipe_lock:
        _pipe.write(json.dumps(obj) + "\n"); _pipe.flush()
class _Stream(io.TextIOBase):
    # Coalesces writes like ipykernel's OutStream: flushed at 8 KiB, every 50 ms, at cell end.
    def __init__(self, name):
        self._name = name
        self._parts = []
        self._size = 0
        self._lock = threading.Lock()
    def writable(self):
        return True
    def write(self, text):
        if text:
            with self._lock:
                self._parts.append(text)
                self._size += len(text)
            if self._size >= 8192:
                self.flush()
        return len(text)
    def flush(self):
        with self._lock:
            text, self._parts, self._size = "".join(self._parts), [], 0
        if text:
            _emit({"type": self._name, "text": text})
_requests = queue.Queue()
# An interrupt names its cell: one that arrives before the cell starts (a slow machine) still
# stops it, and one that arrives after it ended never stops the next one. The SIGINT handler
# raises only while a cell's code runs (both it and _in_cell live on the main thread): a signal
# that lands as the kernel emits a cell's end would otherwise kill the kernel, or end a cell twice.
_interrupted = 0
_current = 0
_in_cell = False
def _on_sigint(_signum, _frame):
    if _in_cell and _interrupted >= _current:
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, _on_sigint)
def _reader():
    global _interrupted
    # Requests are queued for the main thread; an interrupt is delivered to it at once.
    for line in sys.stdin:
        message = json.loads(line)
        if "interrupt" in message:
            _interrupted = max(_interrupted, message["interrupt"])
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        else:
            _requests.put(message)
    _requests.put(None)
def _flusher():
    while True:
        time.sleep(0.05)
        sys.stdout.flush(); sys.stderr.flush()
sys.stdout, sys.stderr = _Stream("stdout"), _Stream("stderr")
threading.Thread(target=_reader, daemon=True).start()
threading.Thread(target=_flusher, daemon=True).start()
_cells = guest.Cells({"__name__": "__main__", "__builtins__": __builtins__})
def _cell(_req):
    global _in_cell
    _in_cell = True
    try:
        if _interrupted >= _current:  # interrupted before it started
            raise KeyboardInterrupt
        return _cells.run(_req["code"])
    finally:
        _in_cell = False
def _run(_req):
    global _current
    _current = _req["id"]
    _saved_env = guest.apply_env(_req.get("env") or {})
    try:
        if _req.get("cwd"):
            os.chdir(_req["cwd"])  # a new context starts in its own directory
        _text = guest.value_text(_cell(_req))
        if _text is not None:
            _emit({"type": "value", "text": _text})
        for _png in guest.collect_figures()[0]:
            _emit({"type": "display", "png": base64.b64encode(_png).decode()})
    except BaseException as _exc:
        _emit({"type": "error", **guest.describe_exception(_exc, ("<string>",))})
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        guest.restore_env(_saved_env)
_emit({"type": "ready"})
while True:
    _req = _requests.get()
    if _req is None:
        break
    _run(_req)
    _emit({"type": "end"})
"""


def _worker_program() -> str:
    """The kernel as ``python -c`` runs it: the guest module built from its source, then the
    kernel loop."""
    return (
        "import types as _types\n"
        "guest = _types.ModuleType('guest')\n"
        f"exec(compile({packer.module_source(guest)!r}, 'guest.py', 'exec'), guest.__dict__)\n"
        + _KERNEL
    )


@dataclass
class CellOutcome:
    """What a cell produced besides its streamed output."""

    value: str | None = None
    pngs: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None
    count: int = 0


@dataclass(frozen=True)
class Entry:
    """One filesystem entry as envd describes it."""

    name: str
    path: str
    kind: str
    size: int
    mode: int
    mtime_ns: int
    symlink_target: str | None = None


class Machine:
    """The execution backend of one emulated sandbox, inside a local-provider session."""

    def __init__(self, session: LocalSession) -> None:
        self._session = session
        self.workspace = Path(session.workspace_dir)
        self._workers: dict[str, _Worker] = {}
        self._closed = False
        self._init: InitProcess | None = None
        self._tmp = tempfile.mkdtemp(prefix="e2b-machine-tmp-")
        os.chmod(self._tmp, 0o1777)  # like /tmp, whichever uid the sandbox's user maps to

    @classmethod
    async def create(
        cls, provider: LocalProvider, env: Mapping[str, str], *, network: bool | NetworkPolicy
    ) -> Machine:
        spec = SessionSpec(env=dict(env), network=network, limits=Limits(timeout=_SANDBOX_TIMEOUT))
        return cls(await provider.create(spec))

    # -- files, seen from the host -----------------------------------------------------------

    def host_path(self, path: str, *, follow: bool = True) -> Path:
        """Map an absolute sandbox path to the host: the workspace, and ``/tmp`` (shared by
        every process of the VM, as on E2B) exist in the emulator.

        Symlinks must not lead out of their root: the parent always resolves inside it, and
        the path itself too when it will be followed (read, written, listed).
        """
        for root, base in ((WORKSPACE_ROOT, self.workspace), ("/tmp", Path(self._tmp))):
            if path == root:
                return base
            if path.startswith(root + "/"):
                break
        else:
            raise FileNotFoundError(path)
        parts = [p for p in path[len(root) + 1 :].split("/") if p not in ("", ".")]
        if ".." in parts:
            raise FileNotFoundError(path)
        host = base.joinpath(*parts)
        real_base = os.path.realpath(base)
        for checked in (host.parent, host) if follow else (host.parent,):
            real = os.path.realpath(checked)
            if real != real_base and not real.startswith(real_base + "/"):
                raise FileNotFoundError(path)
        return host

    def give(self, host: Path) -> None:
        """Make ``host`` and the directories above it, up to its root, the sandbox's: it owns
        the workspace (a dedicated uid when the host is root), so it can change what the
        emulator wrote there from the host, as it can on E2B."""
        owner = self.workspace.stat()
        root = self.workspace if host.is_relative_to(self.workspace) else Path(self._tmp)
        path = host
        while path != root and path.is_relative_to(root):
            os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
            path = path.parent

    def sandbox_path(self, host: Path) -> str:
        if not host.is_relative_to(self.workspace):
            rel = host.relative_to(self._tmp).as_posix()
            return "/tmp" if rel == "." else f"/tmp/{rel}"
        rel = host.relative_to(self.workspace).as_posix()
        return WORKSPACE_ROOT if rel == "." else f"{WORKSPACE_ROOT}/{rel}"

    def entry(self, host: Path) -> Entry:
        """As envd's ``EntryInfo`` describes it: a FIFO, socket or device is of no known type,
        and ``mode`` is Go's ``FileMode.Perm()`` (no setuid, setgid or sticky bit)."""
        st = host.lstat()
        target = None
        if stat.S_ISLNK(st.st_mode):
            kind, target = "symlink", os.readlink(host)
        elif stat.S_ISDIR(st.st_mode):
            kind = "dir"
        elif stat.S_ISREG(st.st_mode):
            kind = "file"
        else:
            kind = "other"
        return Entry(
            name=host.name or "user",
            path=self.sandbox_path(host),
            kind=kind,
            size=0 if kind == "dir" else st.st_size,
            mode=st.st_mode & 0o777,
            mtime_ns=st.st_mtime_ns,
            symlink_target=target,
        )

    def list_dir(self, path: str, depth: int) -> list[Entry]:
        base = self.host_path(path)
        if not base.is_dir():
            raise FileNotFoundError(path)
        entries: list[Entry] = []
        pending = [(base, 1)]
        while pending:
            directory, level = pending.pop()
            for child in sorted(directory.iterdir()):
                entries.append(self.entry(child))
                if level < depth and child.is_dir() and not child.is_symlink():
                    pending.append((child, level + 1))
        return entries

    # -- processes, inside the session's sandbox ------------------------------------------

    async def _start_init(self) -> None:
        session = self._session
        launcher = session.launcher
        argv = init_argv(launcher.python_executable, f"/tmp/{EDGE_SOCKET}")
        async with entered_off_loop(
            lambda: launcher.spawnable(
                launcher.wrap_networked(argv, read_write=[(self._tmp, "/tmp")])
            )
        ) as (command, fds):
            proc = await asyncio.create_subprocess_exec(
                *command,
                limit=INIT_LINE_LIMIT,
                pass_fds=fds,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=launcher.process_env(),
                cwd=launcher.process_cwd(),
                preexec_fn=session.cgroup.preexec(),
                start_new_session=True,  # one group to kill: bubblewrap takes its sandbox along
            )
        self._init = InitProcess(proc)
        await self._init.wait_ready()

    async def _spawn(self, argv: list[str]) -> Child:
        """Start ``argv`` inside the machine's one sandbox, beside everything else it runs."""
        if self._init is None:
            await self._start_init()
        assert self._init is not None
        return await self._init.spawn(argv, limit=_MAX_KERNEL_LINE)

    def connect(self, port: int) -> socket.socket:
        """A connection to ``port`` on the sandbox's loopback (``ConnectionRefusedError`` if
        nothing listens there): what the emulator's edge forwards a request to."""
        if self._init is None:
            raise ConnectionRefusedError(f"nothing listens on port {port}")
        return connect_port(os.path.join(self._tmp, EDGE_SOCKET), port)

    async def run_command(
        self, command: str, env: Mapping[str, str], cwd: str, sink: OutputSink
    ) -> int:
        """Run ``bash -c command`` in ``cwd``; cancelling kills its process group.

        A command that ends leaves what it started running, as envd does (it waits for the
        output pipes to close, so a background job must redirect them to be left behind).
        """
        self.host_path(cwd)
        assignments = [f"{key}={value}" for key, value in env.items()]
        argv = ["/bin/bash", "-c", _COMMAND_SHIM, "shim", cwd, *assignments]
        proc = await self._spawn([*argv, "/bin/bash", "-c", command])
        proc.stdin.close()
        try:
            await asyncio.gather(
                _pump(proc.stdout, lambda text: sink("stdout", text)),
                _pump(proc.stderr, lambda text: sink("stderr", text)),
            )
            return int(await proc.wait())
        except BaseException:
            proc.kill()
            await proc.wait()
            raise

    async def run_cell(
        self,
        code: str,
        env: Mapping[str, str],
        sink: OutputSink,
        context: str = "default",
        *,
        cwd: str = WORKSPACE_ROOT,
    ) -> CellOutcome:
        """Run a cell in the context's persistent worker; cancelling interrupts it."""
        worker = self._workers.get(context)
        if worker is None or worker.proc.returncode is not None:
            python = self._session.launcher.python_executable
            # The guest module's source is read from disk the first time: off the loop.
            program = await asyncio.to_thread(_worker_program)
            worker = await _Worker.start(await self._spawn([python, "-u", "-c", program]), cwd)
            self._workers[context] = worker
        return await worker.run(code, env, sink)

    async def drop_context(self, context: str) -> None:
        """Stop a context's worker (its variables are lost; the next cell starts afresh)."""
        worker = self._workers.pop(context, None)
        if worker is not None:
            await worker.stop()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for worker in self._workers.values():
            await worker.stop()
        self._workers.clear()
        if self._init is not None:
            _kill_group(self._init.proc.pid)  # the sandbox, and every process left in it
            with contextlib.suppress(ProcessLookupError):
                await self._init.proc.wait()
        await self._session.close()
        await asyncio.to_thread(shutil.rmtree, self._tmp, True)


class _Worker:
    def __init__(self, proc: Child, cwd: str) -> None:
        self.proc = proc
        self._cwd: str | None = cwd  # sent with the first cell
        self._count = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls, proc: Child, cwd: str) -> _Worker:
        line = await proc.stdout.readline()
        if not line:
            stderr = (await proc.stderr.read()).decode(errors="replace")
            raise RuntimeError(f"the emulated kernel did not start: {stderr.strip()}")
        return cls(proc, cwd)

    async def run(self, code: str, env: Mapping[str, str], sink: OutputSink) -> CellOutcome:
        async with self._lock:
            self._count += 1
            outcome = CellOutcome(count=self._count)
            cwd, self._cwd = self._cwd, None
            try:
                # Inside the try: a cancel while the request is being written still interrupts
                # the cell (and collects its end) instead of leaving it running under the next.
                await self._send({"code": code, "env": dict(env), "cwd": cwd, "id": self._count})
                await self._collect(outcome, sink)
            except asyncio.CancelledError:
                await self._interrupt(self._count)
                raise
            return outcome

    async def _send(self, message: dict[str, Any]) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        await self.proc.stdin.drain()

    async def _collect(self, outcome: CellOutcome, sink: OutputSink) -> None:
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                outcome.error = {
                    "name": "KernelDied",
                    "value": "the Python worker exited",
                    "traceback": "",
                }
                return
            event = json.loads(line)
            kind = event["type"]
            if kind == "end":
                return
            if kind in ("stdout", "stderr"):
                sink(kind, event["text"])
            elif kind == "value":
                outcome.value = event["text"]
            elif kind == "display":
                outcome.pngs.append(event["png"])
            elif kind == "error":
                outcome.error = {k: event[k] for k in ("name", "value", "traceback")}

    async def _interrupt(self, cell: int) -> None:
        """Interrupt first so variables survive; kill the worker if the cell ignores it."""
        try:
            await self._send({"interrupt": cell})
            async with asyncio.timeout(INTERRUPT_GRACE):
                await self._collect(CellOutcome(), lambda _s, _t: None)
        except (TimeoutError, OSError):
            await self.stop()

    async def stop(self) -> None:
        self.proc.kill()
        self.proc.stdin.close()
        await self.proc.wait()


async def _pump(stream: Any, write: Callable[[str], None]) -> None:
    decoder = _Utf8()
    while chunk := await stream.read(65536):
        if text := decoder.feed(chunk):
            write(text)
    if text := decoder.feed(b"", final=True):
        write(text)


class _Utf8:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> str:
        return str(self._decoder.decode(data, final))


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
