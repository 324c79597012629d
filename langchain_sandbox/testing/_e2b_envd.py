"""The E2B emulator's envd and code interpreter: files, processes (Connect streams), the
filesystem service, ``/execute`` (an NDJSON stream) and code contexts; and a sandbox's other
ports, forwarded (see ``_edge``)."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
import posixpath
import queue
import re
import shlex
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.testing._e2b_http import Handler, HttpError, api_error, connect_error
from langchain_sandbox.testing._e2b_machine import CellOutcome, Machine
from langchain_sandbox.testing._e2b_sandboxes import Sandbox, Sandboxes
from langchain_sandbox.testing._e2b_wire import (
    END_STREAM,
    entry_json,
    envelope,
    parse_envelope,
    parse_multipart,
)
from langchain_sandbox.testing._edge import forward

_POLL = 0.05
_DONE = ("", "")  # queued when a run ends


class Envd(Sandboxes):
    """The routes of one sandbox (``E2b-Sandbox-Id``): see `handle_sandbox` and `handle_port`."""

    def handle_sandbox(self, handler: Handler, method: str, path: str, body: bytes) -> None:
        sandbox_id = handler.headers.get("E2b-Sandbox-Id", "")
        sandbox = self._reachable(sandbox_id, handler.headers.get("X-Access-Token"), path)
        machine = sandbox.machine
        query = parse_qs(urlsplit(handler.path).query)
        if path == "/health":
            handler.send_empty(204)
        elif path == "/files" and method == "GET":
            self._read_file(handler, machine, query.get("path", [""])[0])
        elif path == "/files" and method == "POST":
            self._write_files(handler, machine, query.get("path", [None])[0], body)
        elif path == "/process.Process/Start":
            self._start_process(handler, sandbox, parse_envelope(body))
        elif path == "/process.Process/SendSignal":
            pid = int((json.loads(body or b"{}").get("process") or {}).get("pid", 0))
            process = sandbox.processes.get(pid)
            if process is None:
                raise connect_error(404, "not_found", f"process with pid {pid} not found")
            process.cancel()
            handler.send_json(200, {})
        elif path.startswith("/filesystem.Filesystem/"):
            handler.send_json(200, self._filesystem(machine, path.rsplit("/", 1)[1], body))
        elif path == "/execute" and method == "POST":
            self._execute(handler, sandbox, json.loads(body))
        elif path == "/contexts" and method == "POST":
            data = json.loads(body or b"{}")
            if data.get("language") not in (None, "python"):
                raise api_error(400, "the emulator runs Python only")
            context_id = uuid.uuid4().hex
            sandbox.contexts[context_id] = data.get("cwd") or WORKSPACE_ROOT
            handler.send_json(
                200, {"id": context_id, "language": "python", "cwd": sandbox.contexts[context_id]}
            )
        elif path == "/contexts" and method == "GET":
            handler.send_json(
                200,
                [{"id": k, "language": "python", "cwd": v} for k, v in sandbox.contexts.items()],
            )
        elif match := re.fullmatch(r"/contexts/([^/]+)(/restart)?", path):
            context_id, restart = match.groups()
            if context_id not in sandbox.contexts or method != ("POST" if restart else "DELETE"):
                raise api_error(404, f"context {context_id} not found")
            self._submit(machine.drop_context(context_id)).result()
            if not restart:
                del sandbox.contexts[context_id]
            handler.send_empty(204)
        else:
            raise api_error(404, f"no route {method} {path}")

    def _read_file(self, handler: Handler, machine: Machine, path: str) -> None:
        try:
            host = machine.host_path(path)
            if host.is_dir():
                raise api_error(400, f"path '{path}' is a directory")
            data = host.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise api_error(404, f"file '{path}' not found") from None
        handler.send_bytes(200, data, "application/octet-stream")

    def _write_files(
        self, handler: Handler, machine: Machine, path: str | None, body: bytes
    ) -> None:
        content_type = handler.headers.get("Content-Type", "")
        if content_type.startswith("multipart/form-data"):
            parts = parse_multipart(body, content_type)
            files = [(path if path and len(parts) == 1 else name, data) for name, data in parts]
        else:
            if handler.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            files = [(path or "", body)]
        written = []
        for target, data in files:
            target = target if target.startswith("/") else posixpath.join(WORKSPACE_ROOT, target)
            try:
                host = machine.host_path(target)
                host.parent.mkdir(parents=True, exist_ok=True)
                host.write_bytes(data)
                machine.give(host)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                raise api_error(400, f"cannot write '{target}'") from None
            written.append({"name": posixpath.basename(target), "type": "file", "path": target})
        handler.send_json(200, written)

    def _filesystem(self, machine: Machine, method: str, body: bytes) -> dict[str, Any]:
        data = json.loads(body or b"{}")
        try:
            if method == "ListDir":
                depth = int(data.get("depth") or 1)
                entries = machine.list_dir(data.get("path", ""), depth)
                return {"entries": [entry_json(e) for e in entries]}
            if method == "Stat":
                return {"entry": entry_json(machine.entry(_existing(machine, data["path"])))}
            if method == "Remove":
                host = _existing(machine, data["path"])
                if host.is_dir() and not host.is_symlink():
                    shutil.rmtree(host)
                else:
                    host.unlink()
                return {}
            if method == "MakeDir":
                host = machine.host_path(data["path"])
                if host.exists():
                    raise connect_error(409, "already_exists", f"'{data['path']}' exists")
                host.mkdir(parents=True)
                machine.give(host)
                return {"entry": entry_json(machine.entry(host))}
            if method == "Move":
                source = _existing(machine, data["source"])
                destination = machine.host_path(data["destination"])
                destination.parent.mkdir(parents=True, exist_ok=True)
                machine.give(destination.parent)
                source.rename(destination)
                return {"entry": entry_json(machine.entry(destination))}
        except (FileNotFoundError, NotADirectoryError):
            raise connect_error(404, "not_found", "path not found") from None
        raise connect_error(404, "unimplemented", f"filesystem.Filesystem/{method}")

    def handle_port(
        self,
        handler: Handler,
        sandbox_id: str,
        port: int,
        body: bytes,
        on_status: Callable[[int], None],
    ) -> None:
        """Forward a request for ``port`` of a running sandbox there. E2B's edge answers 502
        when the sandbox is not running or nothing listens on the port."""
        self._sweep()
        with self._lock:
            sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None or sandbox.state != "running":
            raise api_error(502, f"The sandbox {sandbox_id} was not found")
        try:
            upstream = sandbox.machine.connect(port)
        except ConnectionRefusedError:
            raise HttpError(
                502,
                {"message": "The sandbox is running but port is not open", "port": port},
            ) from None
        forward(handler, upstream, body, on_status)

    def _start_process(self, handler: Handler, sandbox: Sandbox, request: dict[str, Any]) -> None:
        process = request.get("process") or {}
        argv = [process.get("cmd", "/bin/bash"), *process.get("args", [])]
        # commands.run always sends bash -l -c <cmd>; anything else runs as given.
        is_bash = argv[0] in ("/bin/bash", "bash") and argv[1:3] == ["-l", "-c"] and len(argv) == 4
        command = argv[3] if is_bash else shlex.join(argv)
        cwd = process.get("cwd") or WORKSPACE_ROOT
        try:
            sandbox.machine.host_path(cwd)
        except FileNotFoundError:
            raise connect_error(400, "invalid_argument", f"cwd '{cwd}' not found") from None
        timeout_ms = int(handler.headers.get("connect-timeout-ms") or 0)
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None
        output: queue.Queue[tuple[str, str]] = queue.Queue()
        future = self._submit(
            sandbox.machine.run_command(
                command, process.get("envs") or {}, cwd, lambda s, t: output.put((s, t))
            )
        )
        pid = next(self._pids)
        sandbox.processes[pid] = future
        future.add_done_callback(lambda _f: sandbox.processes.pop(pid, None))
        handler.start_stream(200, "application/connect+json")
        # A client that disconnects leaves the process running, as envd does; it can still be
        # killed with SendSignal or by its deadline.
        writing = handler.write_chunk(envelope({"event": {"start": {"pid": pid}}}))
        for stream, text in _drain(output, future, deadline):
            if writing:
                event = {"data": {stream: base64.b64encode(text.encode()).decode()}}
                writing = handler.write_chunk(envelope({"event": event}))
        trailer: dict[str, Any] = {}
        if not future.done():
            future.cancel()
            end: dict[str, Any] = {"exitCode": -1, "status": "signal: killed"}
            trailer = {
                "error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}
            }
        elif future.cancelled():
            end = {"exitCode": -1, "status": "signal: killed"}
        elif future.exception() is not None:
            end = {"exitCode": -1, "status": "error", "error": str(future.exception())}
        else:
            code = future.result()
            end = {"exited": True, "status": f"exit status {code}"}
            if code:  # proto3 JSON omits zero values
                end["exitCode"] = code
        if writing:
            handler.write_chunk(envelope({"event": {"end": end}}))
            handler.write_chunk(envelope(trailer, END_STREAM))
            handler.end_stream()

    def _execute(self, handler: Handler, sandbox: Sandbox, request: dict[str, Any]) -> None:
        context = request.get("context_id") or "default"
        if context not in sandbox.contexts:
            raise api_error(404, f"context {context} not found")
        if request.get("language") not in (None, "python"):
            raise api_error(400, "the emulator runs Python only")
        output: queue.Queue[tuple[str, str]] = queue.Queue()
        future = self._submit(
            sandbox.machine.run_cell(
                request.get("code", ""),
                request.get("env_vars") or {},
                lambda s, t: output.put((s, t)),
                context,
                cwd=sandbox.contexts[context],
            )
        )
        handler.start_stream(200, "application/x-ndjson")
        for stream, text in _drain(output, future, None, handler.client_gone):
            stamp = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
            if not handler.write_line({"type": stream, "text": text, "timestamp": stamp}):
                future.cancel()
                return
        if not future.done():  # the client went away: the execution is interrupted
            future.cancel()
            return
        if future.cancelled() or sandbox.sandbox_id not in self.sandbox_ids("running"):
            # Killed or expired mid-execution: the edge drops the connection.
            handler.abort()
            return
        outcome: CellOutcome = future.result()
        handler.write_line({"type": "number_of_executions", "execution_count": outcome.count})
        for png in outcome.pngs:
            handler.write_line(_result(text="<Figure>", png=png, is_main_result=False))
        if outcome.value is not None:
            handler.write_line(_result(text=outcome.value, is_main_result=True))
        if outcome.error is not None:
            handler.write_line({"type": "error", **outcome.error})
        handler.write_line({"type": "end_of_execution"})
        handler.end_stream()


def _result(**fields: Any) -> dict[str, Any]:
    blank = dict.fromkeys(
        (
            "html",
            "markdown",
            "svg",
            "png",
            "jpeg",
            "pdf",
            "latex",
            "json",
            "javascript",
            "data",
            "chart",
        )
    )
    return {"type": "result", **blank, "extra": {}, **fields}


def _existing(machine: Machine, path: str) -> Path:
    """An existing entry, not followed if it is a link (stat, remove and move act on the link)."""
    host = machine.host_path(path, follow=False)
    if not host.exists() and not host.is_symlink():
        raise FileNotFoundError(path)
    return host


def _drain(
    output: queue.Queue[tuple[str, str]],
    future: Future[Any],
    deadline: float | None,
    gone: Callable[[], bool] | None = None,
) -> Iterator[tuple[str, str]]:
    """Yield output until the run ends, its deadline passes or the client goes away."""
    future.add_done_callback(lambda _f: output.put(_DONE))  # wakes the wait below at once
    while True:
        try:
            item = output.get(timeout=_POLL)
        except queue.Empty:
            item = None
        if item is _DONE:
            while not output.empty():
                item = output.get_nowait()
                if item is not _DONE:
                    yield item
            return
        if item is not None:
            yield item
            continue
        if deadline is not None and time.monotonic() >= deadline:
            return
        if gone is not None and gone():
            return


__all__ = ["Envd"]
