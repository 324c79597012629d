"""Installing packages into a local session: pip in its own short-lived sandbox.

The session's worker never gets network. pip runs in a separate bubblewrap invocation that has it
(or that is given a local wheel directory), installs into ``/home/user/.packages`` (on the worker's
``sys.path``), and exits. Requirements are validated before anything runs
(:func:`~langchain_sandbox.requirements.validate_requirements`); where pip looks for packages is
decided by the host's trusted :class:`PackageIndex`, never by the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_sandbox.providers.base import OutputCallback
from langchain_sandbox.providers.local._streams import OutputStreams
from langchain_sandbox.results import ExecutionResult

_SANDBOX_FIND_LINKS = "/opt/find-links"


@dataclass(frozen=True)
class PackageIndex:
    """Where pip may fetch packages from; set by the application, never by a model.

    Attributes:
        index_url: Replaces PyPI (``--index-url``).
        extra_index_urls: Searched in addition (``--extra-index-url``).
        find_links: Local directories (bound read-only into pip's sandbox) or URLs of wheels.
        no_index: Use only ``find_links`` (``--no-index``), e.g. offline.
        trusted_hosts: Hosts pip may reach without valid TLS (``--trusted-host``).
    """

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str | os.PathLike[str], ...] = ()
    no_index: bool = False
    trusted_hosts: tuple[str, ...] = ()

    def pip_options(self, *, isolated: bool) -> tuple[list[str], list[tuple[str, str]]]:
        """pip's options and the ``(host, sandbox)`` read-only binds local ``find_links`` need."""
        options: list[str] = []
        binds: list[tuple[str, str]] = []
        if self.no_index:
            options.append("--no-index")
        if self.index_url:
            options += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            options += ["--extra-index-url", url]
        for index, location in enumerate(self.find_links):
            location = os.fspath(location)
            if "://" not in location:
                host_dir = os.path.abspath(location)
                location = f"{_SANDBOX_FIND_LINKS}/{index}" if isolated else host_dir
                if isolated:
                    binds.append((host_dir, location))
            options += ["--find-links", location]
        for host in self.trusted_hosts:
            options += ["--trusted-host", host]
        return options, binds


def pip_install_argv(
    python: str,
    site_packages: Sequence[str],
    target: str,
    requirements: Sequence[str],
    options: Sequence[str],
) -> list[str]:
    """argv (inside the sandbox) of ``pip install --target`` using the session's interpreter.

    pip is found on the interpreter's own path or in the mounted site-packages (a venv's).
    """
    bootstrap = (
        "import runpy, sys;"
        f"sys.path[1:1] = {json.dumps(list(site_packages))};"
        "sys.argv[0] = 'pip';"
        "runpy.run_module('pip', run_name='__main__', alter_sys=True)"
    )
    return [
        python,
        "-I",
        "-c",
        bootstrap,
        "install",
        "--target",
        target,
        "--upgrade",
        "--no-cache-dir",
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        *options,
        "--",
        *requirements,
    ]


async def run_captured(
    argv: Sequence[str],
    *,
    pass_fds: Sequence[int] = (),
    timeout: float,
    limit: int,
    preexec_fn: Callable[[], None] | None,
    env: dict[str, str],
    cwd: str,
    on_output: OutputCallback | None = None,
) -> ExecutionResult:
    """Run a short-lived sandbox process; capture its output (bounded), pass it to ``on_output``
    as it comes, and stop the process on timeout."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        pass_fds=pass_fds,
        preexec_fn=preexec_fn,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )
    streams = OutputStreams(limit, on_output)

    async def pump(stream: asyncio.StreamReader | None, name: Literal["stdout", "stderr"]) -> None:
        while stream is not None and (chunk := await stream.read(65536)):
            streams.write(name, chunk)

    timed_out = False
    pumps = asyncio.gather(pump(process.stdout, "stdout"), pump(process.stderr, "stderr"))
    try:
        await asyncio.wait_for(asyncio.shield(pumps), timeout)
    except TimeoutError:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await pumps
    code = await process.wait()
    return ExecutionResult(
        kind="command",
        exit_code=code if code >= 0 else 128 - code,
        duration_ms=(time.perf_counter() - started) * 1000,
        timed_out=timed_out,
        **streams.result_fields(None),
    )


__all__ = ["PackageIndex", "pip_install_argv", "run_captured"]
