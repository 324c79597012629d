"""The background-process supervisor, run inside the sandbox: ``python3 -I -S -c SOURCE OP JSON``.

Standard library only and self-contained, so every provider runs it unchanged through its own
``run_command`` (`process_control` sends it; `source` is the text sent). One call does one
operation and prints one JSON object:

* ``start``: double-forks a daemon (``setsid``: it outlives the command that started it, whose
  process group the local worker kills when the command ends) that runs ``bash -c COMMAND`` in a
  process group of its own, pumps its merged stdout and stderr into the process's output ring,
  reaps what it leaves (it is a child subreaper) and records how it ended. The call waits up to
  `FIRST_OUTPUT_WAIT` seconds for the first output or the exit, then prints the process.
* ``output``: the ring from a byte offset on. ``stop``: ``SIGTERM`` to the whole process group,
  ``SIGKILL`` after ``grace`` seconds. ``list``: every named process.
* ``relay``: (run as a process's command by the local provider) listens on a unix socket and
  connects each connection to ``127.0.0.1:PORT`` inside the sandbox; see ``docs/processes.md``.

State lives in `ROOT` (``/tmp``: not the workspace, so it is never snapshotted): one directory
per process with its spec, its state, the supervisor's identity (pid and start time: a supervisor
that is gone, or whose pid was reused, makes the process ``lost``) and the ring: the first
`HEAD` bytes in ``head``, the last `TAIL` in the circular ``ring``, the byte count in
``written``, all under an ``flock``. Refusals print ``{"error": ..., "kind": ...}`` and exit 2.

Past 500 lines on purpose: it is sent to the sandbox as one ``-c`` program, so it cannot import a
module of its own.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import select
import shutil
import signal
import socket
import sys
import threading
import time
from typing import Any

ROOT = "/tmp/.langchain_sandbox/processes"
HEAD = 64 * 1024
TAIL = 1024 * 1024
FIRST_OUTPUT_WAIT = 0.5
FIRST_OUTPUT_BYTES = 16 * 1024
_SETTLE = 0.05  # once output started, how long it may pause before start returns
_NAME = re.compile(r"\.?[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_CHUNK = 65536


class Refused(Exception):
    """An operation the caller asked wrongly for; ``kind`` is ``input`` or ``limit``."""

    def __init__(self, message: str, kind: str = "input") -> None:
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------- files


def _directory(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.startswith(".."):
        raise Refused(f"Invalid process name {name!r}.")
    return os.path.join(ROOT, name)


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: str, data: dict[str, Any]) -> None:
    staging = f"{path}.{os.getpid()}.tmp"
    with open(staging, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(staging, path)


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (empty if there is none)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2 :].split()


def _identity(pid: int) -> str | None:
    """A process's start time (field 22 of its stat), which a reused pid does not share."""
    fields = _stat(pid)
    return fields[19].decode() if len(fields) > 19 else None


def _alive(pid: object, identity: object) -> bool:
    """Whether ``pid`` is still the process with ``identity``, and has not ended (a zombie)."""
    if not isinstance(pid, int) or pid <= 0 or identity is None:
        return False
    fields = _stat(pid)
    return len(fields) > 19 and fields[19].decode() == identity and fields[0] != b"Z"


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Ring:
    """A process's bounded output: the first `HEAD` bytes, and the last `TAIL` at ``offset %
    TAIL`` of a circular file; ``written`` is every byte ever appended."""

    def __init__(self, directory: str) -> None:
        def opened(name: str) -> int:
            return os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT, 0o600)

        self.head, self.ring, self.count, self.lock = (
            opened(name) for name in ("head", "ring", "written", "lock")
        )

    def close(self) -> None:
        for fd in (self.head, self.ring, self.count, self.lock):
            os.close(fd)

    def _written(self) -> int:
        text = os.pread(self.count, 32, 0).strip()
        return int(text) if text else 0

    def append(self, data: bytes) -> None:
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            written = self._written()
            if written < HEAD:
                os.pwrite(self.head, data[: HEAD - written], written)
            start, kept = written, data
            if len(kept) > TAIL:
                start, kept = start + len(kept) - TAIL, kept[-TAIL:]
            position = start % TAIL
            first = kept[: TAIL - position]
            os.pwrite(self.ring, first, position)
            if len(first) < len(kept):
                os.pwrite(self.ring, kept[len(first) :], 0)
            os.pwrite(self.count, b"%-20d" % (written + len(data)), 0)
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)

    def read(self, since: int, limit: int) -> tuple[bytes, int, int, int]:
        """``(data, first offset, dropped, written)`` from ``since`` on, at most ``limit``
        bytes, stopping where the head ends if the tail does not follow it."""
        fcntl.flock(self.lock, fcntl.LOCK_SH)
        try:
            written = self._written()
            since = min(max(since, 0), written)
            head_end, tail_start = min(written, HEAD), max(0, written - TAIL)
            first = since if since < head_end or since >= tail_start else tail_start
            end = written if first >= head_end or tail_start <= head_end else head_end
            end = min(end, first + limit)
            data = b""
            if first < head_end:
                data = os.pread(self.head, min(end, head_end) - first, first)
            offset = max(first, head_end)
            while offset < end:
                position = offset % TAIL
                piece = os.pread(self.ring, min(end - offset, TAIL - position), position)
                if not piece:
                    break
                data += piece
                offset += len(piece)
            return data, first, first - since, written
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)


def _whole_characters(data: bytes) -> bytes:
    """``data`` without a UTF-8 sequence cut at its end (the next read starts with it)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:
            need = 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4 if byte >> 3 == 30 else 1
            return data[:-back] if need > back and back < len(data) else data
    return data


# ---------------------------------------------------------------- state


def _state(directory: str) -> dict[str, Any]:
    """The process's state, ``lost`` when its supervisor is gone."""
    state = _read_json(os.path.join(directory, "state.json"))
    if state.get("state") in ("running", "starting") and not _alive(
        state.get("supervisor"), state.get("supervisor_id")
    ):
        state["state"] = "lost"
    return state


def _info(directory: str, output: str = "") -> dict[str, Any]:
    spec = _read_json(os.path.join(directory, "spec.json"))
    state = _state(directory)
    return {
        "name": spec.get("name", os.path.basename(directory)),
        "command": spec.get("command", ""),
        "cwd": spec.get("cwd", ""),
        "state": state.get("state", "lost") if state.get("state") != "starting" else "running",
        "exit_code": state.get("exit_code"),
        "started_at": spec.get("started_at", 0.0),
        "pid": state.get("pid"),
        "restart": spec.get("restart", True),
        "output": output,
    }


def _running(directory: str) -> bool:
    return _state(directory).get("state") in ("running", "starting")


def _end_leftovers(directory: str) -> None:
    """Kill the group of a lost process whose leader still runs (its supervisor was killed)."""
    state = _read_json(os.path.join(directory, "state.json"))
    if _alive(state.get("pid"), state.get("pid_id")):
        with contextlib.suppress(OSError):
            os.killpg(state["pid"], signal.SIGKILL)


# ---------------------------------------------------------------- the daemon


def _supervise(directory: str, command: str, cwd: str, env: dict[str, Any]) -> None:
    """Run the command and pump its output until it ends; record how (runs as the daemon)."""
    ring = Ring(directory)
    state_path = os.path.join(directory, "state.json")
    me = os.getpid()
    record = {"supervisor": me, "supervisor_id": _identity(me)}
    try:  # orphans of the command reparent to us, and are reaped here
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError, ImportError):
        pass
    reader, writer = os.pipe()
    wake_reader, wake_writer = os.pipe()
    os.set_blocking(wake_writer, False)
    signal.set_wakeup_fd(wake_writer)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    leader = os.fork()
    if leader == 0:
        try:
            os.setsid()
            os.close(reader)
            os.dup2(writer, 1)
            os.dup2(writer, 2)
            for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(number, signal.SIG_DFL)
            os.chdir(cwd)
            os.execvpe("bash", ["bash", "-c", command], env)
        except BaseException as exc:
            os.write(2, f"could not start the process: {exc}\n".encode())
        os._exit(127)
    os.close(writer)
    _write_json(
        state_path, {**record, "state": "running", "pid": leader, "pid_id": _identity(leader)}
    )
    status = None
    open_output = True
    deadline = None
    poller = select.poll()
    poller.register(reader, select.POLLIN)
    poller.register(wake_reader, select.POLLIN)
    while open_output:
        if deadline is not None and time.monotonic() >= deadline:
            break
        timeout: int | None = (
            None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
        )
        for fd, _events in poller.poll(timeout):
            if fd == wake_reader:
                os.read(wake_reader, 4096)
                continue
            chunk = os.read(reader, _CHUNK)
            if chunk:
                ring.append(chunk)
            else:
                open_output = False
        for pid, child_status in _reap():
            if pid == leader:
                status = child_status
                # What the command left in its group ends with it, as a command's does.
                with contextlib.suppress(OSError):
                    os.killpg(leader, signal.SIGKILL)
                deadline = time.monotonic() + 1.0  # then read what is left in the pipe
    if status is None:  # the output closed first: wait for the leader
        _pid, status = os.waitpid(leader, 0)
    _end_group(leader)
    stopped = os.path.exists(os.path.join(directory, "stop"))
    _write_json(
        state_path,
        {
            **record,
            "state": "stopped" if stopped else "exited",
            "pid": leader,
            "exit_code": _exit_code(status),
        },
    )
    ring.close()


def _reap() -> list[tuple[int, int]]:
    """Reap every child that has ended: ``(pid, wait status)`` of each."""
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, status))


def _group_runs(group: int) -> bool:
    """Whether a process of the group still runs (a zombie does not: without a subreaper, as
    under gVisor, the ended ones wait for the sandbox's first process to reap them)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] != b"Z":
                return True
    return False


def _end_group(group: int) -> None:
    """Kill what is left of the process group and reap what is this subreaper's, so that a
    process recorded as ended has no member left running."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            return
        _reap()
        if not _group_runs(group):
            return
        time.sleep(0.005)


def _daemonize(directory: str, command: str, env: dict[str, Any]) -> None:
    """Start `_supervise` as a daemon (its own session, no descriptor of the caller's) in this
    process's working directory, and return once it is on its own."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        _supervise(directory, command, os.getcwd(), env)
    finally:
        os._exit(0)


# ---------------------------------------------------------------- operations


def start(request: dict[str, Any]) -> dict[str, Any]:
    directory = _directory(request.get("name"))
    name = os.path.basename(directory)
    os.makedirs(ROOT, mode=0o700, exist_ok=True)
    lock = os.open(os.path.join(ROOT, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # one start at a time: the cap counts what runs
    try:
        if os.path.isdir(directory):
            if _running(directory) and request.get("existing_ok"):
                return _info(directory)  # a port relay asked for again
            if _running(directory):
                raise Refused(
                    f"A process named {name!r} is already running; stop it first or pick "
                    "another name."
                )
            _end_leftovers(directory)
            shutil.rmtree(directory)
        if not name.startswith("."):
            running = [
                other
                for other in os.listdir(ROOT)
                if not other.startswith(".") and _running(os.path.join(ROOT, other))
            ]
            cap = int(request.get("cap", 8))
            if len(running) >= cap:
                raise Refused(
                    f"{len(running)} background processes are running, the most this sandbox "
                    f"allows ({cap}); stop one first ({', '.join(sorted(running))}).",
                    "limit",
                )
        os.mkdir(directory, 0o700)
        command = str(request["command"])
        spec = {
            "name": name,
            "command": command,
            "cwd": str(request.get("cwd") or os.getcwd()),  # as the caller names it
            "restart": bool(request.get("restart", True)),
            "started_at": time.time(),
        }
        _write_json(os.path.join(directory, "spec.json"), spec)
        # Until the daemon records itself, this call stands for it (if both die: lost).
        me = os.getpid()
        starting = {"state": "starting", "supervisor": me, "supervisor_id": _identity(me)}
        _write_json(os.path.join(directory, "state.json"), starting)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
        began = time.monotonic()
        _daemonize(directory, command, env)
        while _read_json(os.path.join(directory, "state.json")).get("state") == "starting":
            if time.monotonic() - began > 10:
                break
            time.sleep(0.002)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    return _info(directory, _first_output(directory, began))


def _first_output(directory: str, began: float) -> str:
    ring = Ring(directory)
    try:
        seen, changed = 0, began
        while _running(directory) and time.monotonic() - began < FIRST_OUTPUT_WAIT:
            written = ring.read(0, 0)[3]
            now = time.monotonic()
            if written != seen:
                seen, changed = written, now
            elif seen and now - changed >= _SETTLE:
                break
            time.sleep(0.01)
        data = ring.read(0, FIRST_OUTPUT_BYTES)[0]
        return data.decode("utf-8", "replace")
    finally:
        ring.close()


def _existing(request: dict[str, Any]) -> str:
    directory = _directory(request.get("name"))
    if not os.path.isfile(os.path.join(directory, "spec.json")):
        known = ", ".join(_names()) or "none"
        raise Refused(f"No process named {os.path.basename(directory)!r} (known: {known}).")
    return directory


def _names() -> list[str]:
    try:
        return sorted(name for name in os.listdir(ROOT) if not name.startswith("."))
    except OSError:
        return []


def output(request: dict[str, Any]) -> dict[str, Any]:
    directory = _existing(request)
    state = _info(directory)  # before the read: output of an ended process is all there
    ring = Ring(directory)
    try:
        data, first, dropped, written = ring.read(
            int(request.get("since", 0)), int(request["limit"])
        )
    finally:
        ring.close()
    if state["state"] == "running" or first + len(data) < written:
        data = _whole_characters(data)
    return {
        "name": state["name"],
        "data": base64.b64encode(data).decode(),
        "next_offset": first + len(data),
        "dropped": dropped,
        "state": state["state"],
        "exit_code": state["exit_code"],
    }


def stop(request: dict[str, Any]) -> dict[str, Any]:
    directory = _existing(request)
    grace = float(request.get("grace", 3.0))
    state = _state(directory)
    if state.get("state") == "lost":
        _end_leftovers(directory)
    elif state.get("state") == "running" and isinstance(state.get("pid"), int):
        open(os.path.join(directory, "stop"), "w").close()
        group = state["pid"]
        for number, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(group, number)
            except OSError:
                break
            if _group_ends(group, wait):
                break
        began = time.monotonic()
        while _running(directory) and time.monotonic() - began < 5:
            time.sleep(0.01)
    return _info(directory)


def _group_ends(group: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while _group_runs(group):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def list_processes(request: dict[str, Any]) -> dict[str, Any]:
    infos = [_info(os.path.join(ROOT, name)) for name in _names()]
    return {"processes": sorted(infos, key=lambda info: info["started_at"])}


def relay(request: dict[str, Any]) -> None:
    """Serve the unix socket ``request["socket"]``: each connection to ``127.0.0.1:PORT``."""
    path, port = str(request["socket"]), int(request["port"])
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Only this sandbox's own directory holds it (gVisor refuses a chmod of a host socket).
    listener.bind(path)
    listener.listen(128)
    print(f"relaying to 127.0.0.1:{port}", flush=True)

    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def serve(connection: socket.socket) -> None:
        with connection:
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError:
                return
            upstream.settimeout(None)
            with upstream:
                back = threading.Thread(target=pump, args=(upstream, connection), daemon=True)
                back.start()
                pump(connection, upstream)
                back.join()

    while True:
        connection, _address = listener.accept()
        threading.Thread(target=serve, args=(connection,), daemon=True).start()


OPS = {"start": start, "output": output, "stop": stop, "list": list_processes, "relay": relay}


def main(argv: list[str]) -> int:
    try:
        operation = OPS[argv[1]]
        reply = operation(json.loads(argv[2]))
    except Refused as exc:
        print(json.dumps({"error": str(exc), "kind": exc.kind}))
        return 2
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        print(json.dumps({"error": f"bad request: {exc!r}", "kind": "input"}))
        return 2
    print(json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
