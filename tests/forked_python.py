"""Python processes of ours, forked from a pre-imported "zygote" instead of a new interpreter.

The durable-session tests run their workers (``python tests/durable/agent_worker.py ...``,
``python -m langchain_sandbox.cli gc ...``) as real, separate processes, hundreds of them per
run, and each new interpreter spent 1 to 5 s of CPU importing LangChain, LangGraph and this
package before doing anything. :func:`popen` and :func:`run` take the same arguments as
``subprocess.Popen`` and ``subprocess.run`` for such a command and fork it from one process per
pytest worker that has done those imports and nothing else (no thread, no event loop, no open
file or socket: the zygote checks), so every worker is still a process of its own, with its own
pipes, environment, directory, ``__main__`` and exit status, whose sandboxes die with it.

The zygote runs this file as a script. It serves forks over a Unix socket: a request carries the
argv, environment and directory, and the child's stdin, stdout and stderr as file descriptors
(``SCM_RIGHTS``). It answers with the pid and a pidfd (signals can never reach a recycled pid), keeps
the connection and writes the wait status there when it reaps the child. It exits when the pipe
from its pytest worker closes (the session ended, or the worker died).

What differs from a new interpreter, and why it does not matter here, is in ``docs/testing.md``
("Forked workers"). Environment variables read by the preloaded modules at import time are
recorded: a request whose environment differs in one of them, or in any ``PYTHON*`` variable
(those act at interpreter start-up), is refused rather than run in a stale process.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import gc
import importlib
import importlib.util
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_PRELOAD = (
    "argparse", "asyncio", "sqlite3", "psycopg",
    "langchain_core.messages", "langchain_core.tools", "langchain_core.tracers.event_stream",
    "langchain_core.tracers.stdout",
    "langchain.agents", "langchain.agents.middleware",
    "langgraph.graph", "langgraph.prebuilt", "langgraph.types", "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.sqlite.aio", "langgraph.checkpoint.postgres",
    "langgraph.checkpoint.postgres.aio",
    "langgraph.store.postgres",
    "langchain_sandbox", "langchain_sandbox.runtime", "langchain_sandbox.graph",
    "langchain_sandbox.graph.turn_lease", "langchain_sandbox.gc", "langchain_sandbox.snapshots",
    "langchain_sandbox.tools", "langchain_sandbox.providers.local.provider",
    "langchain_sandbox.testing.scripted_model",
)  # fmt: skip
"""What the workers import that costs (``-X importtime``). Not ``langchain_sandbox.cli``: ``python
-m`` runs a module that is already imported with a warning a new interpreter would not print. Not
``pyseccomp``: it runs ``ldconfig`` at import."""

_OPTIONAL = ("deepagents", "langchain_sandbox.deepagents")
"""Preloaded when installed (the ``deepagents`` extra)."""

_STATUS = struct.Struct("!i")
_HEADER = struct.Struct("!I")


# -- the zygote ------------------------------------------------------------------------------


@dataclass
class _Request:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]


class _Recording(os._Environ):  # type: ignore[type-arg]
    """``os.environ`` while the preload runs: notes every variable read, and which module read it."""

    read: dict[str, set[str]] = {}

    @staticmethod
    def _note(key: str) -> None:
        frame = sys._getframe(2)
        while frame.f_back and frame.f_globals.get("__name__") in ("os", "_collections_abc"):
            frame = frame.f_back
        _Recording.read.setdefault(key, set()).add(str(frame.f_globals.get("__name__")))

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return str(super().__getitem__(key))

    def __iter__(self) -> Iterator[str]:
        self._note("*")
        return super().__iter__()


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _preload() -> dict[str, list[str]]:
    """Import the preload list; return the environment variables read meanwhile, and by whom."""
    fds = _open_fds()
    os.environ.__class__ = _Recording
    try:
        for name in _PRELOAD:
            importlib.import_module(name)
        for name in _OPTIONAL:
            if importlib.util.find_spec(name.partition(".")[0]) is not None:
                importlib.import_module(name)
    finally:
        os.environ.__class__ = os._Environ
    # Forking is only safe from one thread, and a child must not share a file or socket that an
    # import opened: refuse to serve rather than hand out such a process.
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1 or threading.active_count() != 1:
        raise RuntimeError(f"the preload started threads: {threads}")
    opened = _open_fds() - fds
    if opened:
        targets = [os.readlink(f"/proc/self/fd/{fd}") for fd in opened if fd.isdigit()]
        raise RuntimeError(f"the preload left files open: {targets}")
    return {key: sorted(readers) for key, readers in _Recording.read.items()}


def _receive(conn: socket.socket) -> _Request:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    (size,) = _HEADER.unpack_from(data)
    while len(data) < _HEADER.size + size:
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise EOFError("the client hung up mid-request")
        data += chunk
    fields = json.loads(data[_HEADER.size :])
    return _Request(fields["argv"], fields["env"], fields["cwd"], fds)


def _serve(path: str) -> _Request:
    """The zygote's loop. Returns only in a forked child, with its request; the zygote itself
    exits here when its pytest worker's pipe closes."""
    env_read = _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    poller = select.poll()
    for fd in (0, listener.fileno(), wake_r):
        poller.register(fd, select.POLLIN)
    gc.collect()
    gc.freeze()  # the preloaded objects stay shared with every child, never copied by its GC
    print(json.dumps({"env_read": env_read}), flush=True)
    while True:
        ready = {fd for fd, _event in poller.poll()}
        if 0 in ready and not os.read(0, 1 << 10):
            raise SystemExit(0)
        if wake_r in ready:
            _reap(wake_r, children)
        if listener.fileno() not in ready:
            continue
        conn, _addr = listener.accept()
        request = _accepted(conn)
        if request is None:
            continue
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for sock in (listener, *children.values()):
                sock.close()
            os.close(wake_r)
            os.close(wake_w)
            conn.close()
            return request
        for fd in request.fds:
            os.close(fd)
        _answer(conn, pid, children)


def _accepted(conn: socket.socket) -> _Request | None:
    conn.settimeout(30)
    try:
        return _receive(conn)
    except (OSError, EOFError, ValueError) as exc:
        print(f"forked_python: bad request: {exc!r}", file=sys.stderr)
        conn.close()
        return None


def _answer(conn: socket.socket, pid: int, children: dict[int, socket.socket]) -> None:
    # The child cannot be reaped before this pidfd exists: only this loop reaps.
    pidfd = os.pidfd_open(pid)
    try:
        socket.send_fds(conn, [_STATUS.pack(pid)], [pidfd])
        children[pid] = conn
    except OSError:
        conn.close()  # the client is gone; the child still gets reaped
    finally:
        os.close(pidfd)


def _reap(wake_r: int, children: dict[int, socket.socket]) -> None:
    while True:
        try:
            os.read(wake_r, 1 << 10)
        except BlockingIOError:
            break
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        with contextlib.suppress(OSError):  # the client is gone and wants no status
            conn.sendall(_STATUS.pack(status))
        conn.close()


def _become(request: _Request) -> None:
    """Turn this fork into ``python <argv>`` in the request's directory and environment."""
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
    for fd in set(request.fds):
        os.close(fd)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    if request.env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()  # again: to the child's stderr
    else:
        faulthandler.disable()
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # type: ignore[union-attr]
    importlib.invalidate_caches()
    sys.orig_argv = [sys.executable, *request.argv]
    if request.argv[0] == "-m":
        sys.argv = ["-m", *request.argv[2:]]  # run_module puts the module's file first
        sys.path[0] = os.getcwd()
        runpy.run_module(request.argv[1], run_name="__main__", alter_sys=True)
    else:
        if not os.path.isfile(request.argv[0]):
            where = os.path.abspath(request.argv[0])
            print(
                f"{sys.executable}: can't open file {where!r}: [Errno 2] No such file or directory",
                file=sys.stderr,
            )
            sys.exit(2)
        sys.argv = list(request.argv)
        sys.path[0] = os.path.dirname(os.path.realpath(request.argv[0]))
        runpy.run_path(request.argv[0], run_name="__main__")


# -- the client ------------------------------------------------------------------------------


class _Zygote:
    """One pytest worker's zygote, started on first use, stopped when the worker exits."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="zygote-")
        self.path = os.path.join(self._dir, "socket")
        self.env = dict(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        self.process.stdout.close()
        if not line:
            raise RuntimeError(f"the zygote failed to start ({self.process.wait()}); see stderr")
        self.env_read: dict[str, list[str]] = json.loads(line)["env_read"]
        """The environment variables the preloaded modules read, each with the modules that did."""
        atexit.register(self.stop)

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        os.unlink(self.path)
        os.rmdir(self._dir)

    def refusal(self, env: Mapping[str, str]) -> str | None:
        """Why a child with ``env`` would not be what a new interpreter is (``None``: it would)."""
        if "*" in self.env_read:
            return "a preloaded module read the whole environment at import"
        keys = set(self.env_read) | {k for k in (*env, *self.env) if k.startswith("PYTHON")}
        keys.discard("PYTHONFAULTHANDLER")  # the child sets it up anew
        changed = sorted(k for k in keys if env.get(k) != self.env.get(k))
        if changed:
            return f"the environment changes {changed}, which the zygote read at start-up"
        return None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, fds: list[int]) -> _Child:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            body = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
            message = _HEADER.pack(len(body)) + body
            sent = socket.send_fds(conn, [message], fds)
            conn.sendall(message[sent:])
            data, pidfds, _flags, _addr = socket.recv_fds(conn, _STATUS.size, 1)
            if len(data) != _STATUS.size or not pidfds:
                raise RuntimeError("the zygote did not fork (see its stderr)")
        except BaseException:
            conn.close()
            raise
        return _Child(_STATUS.unpack(data)[0], pidfds[0], conn)


@dataclass
class _Child:
    pid: int
    pidfd: int
    conn: socket.socket


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None:
            _zygote = _Zygote()
        return _zygote


def _argv(args: Sequence[str | os.PathLike[str]]) -> list[str]:
    """``[sys.executable, script, *args]`` or ``[sys.executable, "-m", module, *args]`` as the
    zygote's request; anything else is refused (it is not a process of ours to fork)."""
    argv = [os.fspath(a) for a in args]
    if len(argv) < 2 or argv[0] != sys.executable:
        raise ValueError(f"not a command of this interpreter: {argv[:2]}")
    if (argv[1] == "-m" and len(argv) > 2) or not argv[1].startswith("-"):
        return argv[1:]
    raise ValueError(f"only a script or -m module can be forked, not {argv[1]!r}")


class ForkedPopen(subprocess.Popen[str]):
    """``subprocess.Popen`` whose child is forked by the zygote: pipes, ``communicate``, text
    mode and the rest are Popen's own; only starting, waiting and signalling differ."""

    _child: _Child

    def _execute_child(
        self,
        args: Sequence[str],
        executable: str | None,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Sequence[int],
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        startupinfo: Any,
        creationflags: int,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *unsupported: Any,
    ) -> None:
        try:
            if shell or executable or preexec_fn or pass_fds or not close_fds:
                raise ValueError("shell, executable, preexec_fn and pass_fds cannot be forked")
            # restore_signals, then gid, gids, uid, umask, start_new_session, process_group
            if unsupported[1:] != (None, None, None, -1, False, -1):
                raise ValueError("a forked child keeps the user, umask and process group")
            zygote = _the_zygote()
            child_env = {str(k): str(v) for k, v in (os.environ if env is None else env).items()}
            refusal = zygote.refusal(child_env)
            if refusal:
                raise ValueError(f"cannot fork {list(args)[:2]}: {refusal}")
            fds = [p2cread, c2pwrite, errwrite]
            fds = [fd if fd != -1 else std for std, fd in enumerate(fds)]
            cwd = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
            self._child = zygote.spawn(_argv(args), child_env, cwd, fds)
            self.pid = self._child.pid
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]

    def _status(self, timeout: float | None) -> int | None:
        """The child's wait status once the zygote reaped it (``None`` while it runs)."""
        conn = self._child.conn
        conn.settimeout(timeout)
        data = b""
        try:
            while len(data) < _STATUS.size:
                chunk = conn.recv(_STATUS.size - len(data))
                if not chunk:
                    raise ChildProcessError(f"the zygote ended before child {self.pid} did")
                data += chunk
        except (TimeoutError, BlockingIOError):  # BlockingIOError: a poll (timeout 0)
            return None
        conn.close()
        os.close(self._child.pidfd)
        status: int = _STATUS.unpack(data)[0]
        return status

    def _internal_poll(self, _deadstate: int | None = None, **_kw: Any) -> int | None:
        if self.returncode is None and self._waitpid_lock.acquire(False):  # type: ignore[attr-defined]
            try:
                if self.returncode is None:
                    status = self._status(0)
                    if status is not None:
                        self._handle_exitstatus(status)  # type: ignore[attr-defined]
            except ChildProcessError:
                if _deadstate is None:
                    raise
                self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        with self._waitpid_lock:  # type: ignore[attr-defined]
            if self.returncode is None:
                status = self._status(timeout)
                if status is None:
                    raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
                self._handle_exitstatus(status)  # type: ignore[attr-defined]
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # died: its status is on the way
                signal.pidfd_send_signal(self._child.pidfd, sig)


def popen(args: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.Popen[str]:
    """``subprocess.Popen(args, text=True, **kwargs)`` for ``[sys.executable, script, ...]`` or
    ``[sys.executable, "-m", module, ...]``, forked from the zygote."""
    if kwargs.pop("text", True) is not True:
        raise ValueError("forked children speak text")
    return ForkedPopen(args, text=True, **kwargs)


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    input: str | None = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` for :func:`popen`'s commands: a timeout kills the child and raises
    ``subprocess.TimeoutExpired``; ``check`` raises ``subprocess.CalledProcessError``."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()  # type: ignore[assignment]  # str: text mode
            raise
        except BaseException:
            process.kill()
            raise
        code = process.wait()
    if check and code:
        raise subprocess.CalledProcessError(code, process.args, stdout, stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)


if __name__ == "__main__":
    # No try/except around the program: SystemExit, an uncaught exception's traceback and exit
    # status 1, atexit and the join of non-daemon threads are the interpreter's own, as they are
    # for ``python script.py``.
    _become(_serve(sys.argv[1]))
