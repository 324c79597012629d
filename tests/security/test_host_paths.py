"""Attack class 8: host paths seen from inside the sandbox.

Sandboxed code reads everything procfs tells it about every process it can see: environment,
command line, working directory, root, executable, open descriptors and mount table. No host path
may appear (the host's temporary directories, its home, the host venv's ``sys.prefix``, the
provider's base directory, the session's directory, the host's working directory), with one
documented exception the kernel imposes: ``mountinfo`` prints, for a directory bound from the host,
that directory's path within its file system. Those are exactly the workspace, the interpreter's
prefix and the site-packages (the host virtualenv's, or the session's sandbox environment), and they
must be the only place a host path shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

import langchain_sandbox
from langchain_sandbox.providers.local import LocalProvider, LocalSession
from langchain_sandbox.providers.local._launcher import PORTS_DIR, SANDBOX_ENVIRONMENT_DIR

_INSPECT = r"""
import json, os, subprocess
# A shell and a child of it too, so more than the worker's own processes are inspected.
sleeper = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & echo ready; wait"], stdout=subprocess.PIPE)
sleeper.stdout.readline()
seen = {"environ": [], "cmdline": [], "links": [], "mountinfo": []}
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    base = f"/proc/{pid}"
    for name, kind in (("environ", "environ"), ("cmdline", "cmdline"), ("mountinfo", "mountinfo")):
        try:
            with open(f"{base}/{name}", "rb") as handle:
                seen[kind].append(handle.read().decode(errors="replace"))
        except OSError:
            pass
    links = ["cwd", "root", "exe"]
    try:
        links += [f"fd/{fd}" for fd in os.listdir(f"{base}/fd")]
    except OSError:
        pass
    for link in links:
        try:
            seen["links"].append(os.readlink(f"{base}/{link}"))
        except OSError:
            pass
sleeper.kill()
sleeper.wait()
print(json.dumps(seen))
"""


def _host_paths(provider: LocalProvider, session: LocalSession) -> set[str]:
    paths = {
        session.directory,
        str(provider.base_dir),
        os.getcwd(),
        str(Path.home()),
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(langchain_sandbox.__file__),
    }
    if tempfile.gettempdir() != "/tmp":  # /tmp itself exists inside (a private one)
        paths.add(tempfile.gettempdir())
    return {os.path.realpath(path) for path in paths} | paths


def _documented_binds(session: LocalSession) -> set[tuple[str, str]]:
    """(host directory, sandbox path) of the directory binds whose source the kernel shows."""
    launcher = session.launcher
    binds = {(session.workspace_dir, "/home/user"), *launcher.python.binds()}
    if launcher.ports_dir is not None and not os.path.ismount(launcher.ports_dir):
        # Not root: the port directory is a bind like the workspace beside it, and shows the
        # same session directory the workspace does.
        binds.add((launcher.ports_dir, PORTS_DIR))
    if launcher.sandbox_environment is not None:
        binds.add((launcher.sandbox_environment, SANDBOX_ENVIRONMENT_DIR))
    return binds


async def test_no_host_path_is_visible_in_proc(
    provider: LocalProvider, session: LocalSession
) -> None:
    result = await session.run_code(_INSPECT)
    assert result.ok, result.render()
    seen = json.loads(result.stdout)
    # bubblewrap (pid 1, bubblewrap only), the worker, the shell, its sleep. bubblewrap's environ
    # is readable only where the sandbox is the host user who started it: not when the host is
    # root (test_host_root), and gVisor has no bubblewrap.
    assert len(seen["cmdline"]) >= (4 if session.launcher.isolation == "bubblewrap" else 3)
    bubblewrap_seen = session.launcher.isolation == "bubblewrap" and os.geteuid() != 0
    assert len(seen["environ"]) >= (4 if bubblewrap_seen else 3)
    host_paths = _host_paths(provider, session)

    for kind in ("environ", "cmdline", "links"):
        text = "\n".join(seen[kind])
        leaked = sorted(path for path in host_paths if path in text)
        assert leaked == [], f"{kind} shows host paths {leaked}"

    documented = _documented_binds(session)
    for table in seen["mountinfo"]:
        for line in table.splitlines():
            fields = line.split()
            root, mount_point = fields[3], fields[4]
            if (root, mount_point) in documented:
                continue
            leaked = sorted(path for path in host_paths if path in line)
            assert leaked == [], f"mountinfo shows host paths {leaked} in {line!r}"
    # What the exception covers really is only those binds: the session directory shows only
    # through its workspace.
    assert {bind for bind in documented if bind[0].startswith(session.directory)} <= {
        (session.workspace_dir, "/home/user"),
        (str(session.launcher.ports_dir), PORTS_DIR),
    }
    if os.geteuid() == 0:  # the port directory is a file system of its own: no host path
        assert await asyncio.to_thread(os.path.ismount, str(session.launcher.ports_dir))
