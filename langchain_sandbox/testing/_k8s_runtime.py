"""The sandbox runtime of the Kubernetes emulator: agent-sandbox's legacy Python runtime, as the
SDK reaches it through the sandbox router.

The router picks the pod by the ``X-Sandbox-ID`` / ``X-Sandbox-Namespace`` headers the SDK sends
on every request; the runtime in the pod answers:

* ``POST /execute`` ``{"command", "timeout_seconds"?}`` -> ``{"stdout", "stderr", "exit_code",
  "timed_out"}``. Like the real runtime, the command is split with ``shlex`` and run without a
  shell (the provider sends ``bash -c ...``);
* ``POST /upload`` (multipart, one ``file`` part whose filename is the path, joined to the
  runtime's root: an absolute filename is that path);
* ``GET /download/<path>`` (raw bytes, or 404 ``{"message": "File not found"}``);
* ``GET /exists/<path>`` -> ``{"exists": bool}``; ``GET /list/<path>`` -> entries
  ``{"name", "size", "type", "mod_time"}``.

The real runtime's root is ``/app``; the emulated pod's is the workspace (``/home/user``), the only
directory a local machine runs commands in. The provider sends absolute paths only.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.testing import _machine_files
from langchain_sandbox.testing._e2b_wire import parse_multipart
from langchain_sandbox.testing._http_emulator import Reply
from langchain_sandbox.testing._k8s_cluster import Pod

_COMMAND_LIMIT_SECONDS = 24 * 3600.0
_LIST_PROGRAM = (
    "import json, os, sys\n"
    "p = sys.argv[1]\n"
    "out = []\n"
    "for e in os.scandir(p):\n"
    "    s = e.stat(follow_symlinks=False)\n"
    "    out.append({'name': e.name, 'size': s.st_size, 'mod_time': s.st_mtime,\n"
    "                'type': 'directory' if e.is_dir(follow_symlinks=False) else 'file'})\n"
    "print(json.dumps(out))\n"
)

Run = Callable[[Any], Any]


def _path(raw: str) -> str:
    return posixpath.normpath(posixpath.join(WORKSPACE_ROOT, unquote(raw)))


def execute(run: Run, pod: Pod, body: bytes) -> Reply:
    request = json.loads(body or b"{}")
    try:
        argv = shlex.split(str(request["command"]))
    except ValueError as exc:
        return Reply({"stdout": "", "stderr": f"Failed to execute command: {exc}", "exit_code": 1})
    limit = request.get("timeout_seconds") or _COMMAND_LIMIT_SECONDS
    result = run(pod.machine.run_command(shlex.join(argv), timeout=float(limit)))
    return Reply(
        {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_code": -1 if result.exit_code is None else result.exit_code,
            "timed_out": result.timed_out,
        }
    )


def upload(run: Run, pod: Pod, body: bytes, content_type: str) -> Reply:
    parts = parse_multipart(body, content_type)
    if not parts or not parts[0][0]:
        return Reply({"message": "A file part with a filename is required"}, status=422)
    filename, data = parts[0]
    try:
        _machine_files.write_file(run, pod.machine, _path(filename), data)
    except _machine_files.MachineFileError as exc:
        return Reply({"message": f"File upload failed: {exc}"}, status=500)
    return Reply({"message": f"File '{filename}' uploaded successfully."})


def download(run: Run, pod: Pod, raw: str) -> Reply:
    try:
        data = _machine_files.read_file(run, pod.machine, _path(raw))
    except FileNotFoundError:
        return Reply({"message": "File not found"}, status=404)
    return Reply(raw=data, content_type="application/octet-stream")


def exists(run: Run, pod: Pod, raw: str) -> Reply:
    result = run(pod.machine.run_command(f"test -e {shlex.quote(_path(raw))}", timeout=60))
    return Reply({"path": unquote(raw), "exists": result.exit_code == 0})


def listing(run: Run, pod: Pod, raw: str) -> Reply:
    command = f"python3 -c {shlex.quote(_LIST_PROGRAM)} {shlex.quote(_path(raw))}"
    result = run(pod.machine.run_command(command, timeout=60))
    if result.exit_code != 0:
        return Reply({"message": "Path not found"}, status=404)
    return Reply(json.loads(result.stdout))


__all__ = ["download", "execute", "exists", "listing", "upload"]
