"""Installing packages into a local session: pip in its own short-lived sandbox.

The session's worker never gets network. pip runs in a separate bubblewrap invocation, installs into
``/home/user/.packages`` (on the worker's ``sys.path``), and exits. Requirements are validated
before anything runs (`validate_requirements`). What pip does
is decided by the host's trusted [`PackageIndex`][langchain_sandbox.PackageIndex], never by the model or the sandbox:

* pip reads no configuration: ``--isolated`` (no ``PIP_*`` variables, no user configuration),
  ``PIP_CONFIG_FILE=/dev/null`` (no configuration file at all), ``HOME=/tmp`` (not the workspace
  sandboxed code writes), and the ``PIP_*`` variables of the session's environment dropped;
* wheels only (``--only-binary=:all:``): installing a wheel copies files, so no package code runs
  while pip can reach the network. Source builds happen only when the application allows them
  (``PackageIndex(source_builds=True)``), and then the whole install runs without network;
* pip's sandbox has no network of its own: it reaches the index hosts, and nothing else, through
  the host's `IndexProxy` (under gVisor,
  through its unix socket in pip's channel directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_sandbox.core._event_loop import entered_off_loop
from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.base import OutputCallback
from langchain_sandbox.providers.local._gvisor import CHANNEL_DIR, INDEX_SOCKET
from langchain_sandbox.providers.local._index_proxy import (
    FORWARDER,
    RELAY_FORWARDER,
    IndexProxy,
    allowed_endpoints,
)
from langchain_sandbox.providers.local._launcher import Launcher
from langchain_sandbox.providers.local._streams import OutputStreams
from langchain_sandbox.results import ExecutionResult

_SANDBOX_FIND_LINKS = "/opt/find-links"
_SYSTEM_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


@dataclass(frozen=True)
class PackageIndex:
    """Where pip may fetch packages from; set by the application, never by a model.

    Attributes:
        index_url: Replaces PyPI (``--index-url``).
        extra_index_urls: Searched in addition (``--extra-index-url``).
        find_links: Local directories (bound read-only into pip's sandbox) or URLs of wheels.
        no_index: Use only ``find_links`` (``--no-index``), e.g. offline.
        trusted_hosts: Hosts pip may reach without valid TLS (``--trusted-host``).
        source_builds: Allow building packages from source distributions. Off by default: a
            build runs the package's own code. When on, the index must be local
            (``no_index=True`` with ``find_links`` directories): the install, builds included,
            then runs without any network.
    """

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str | os.PathLike[str], ...] = ()
    no_index: bool = False
    trusted_hosts: tuple[str, ...] = ()
    source_builds: bool = False

    def __post_init__(self) -> None:
        if self.source_builds and self.reaches_network:
            raise InvalidInputError(
                "PackageIndex(source_builds=True) needs a local index (no_index=True and local "
                "find_links directories): a source build runs the package's own code, which must "
                "not run with network. Download the sources into a directory first."
            )

    @property
    def reaches_network(self) -> bool:
        """Whether pip needs the network: a remote index or a find-links URL."""
        return not self.no_index or any("://" in os.fspath(f) for f in self.find_links)

    def urls(self) -> list[str]:
        """Every URL pip may fetch from (pip's default index included, unless replaced)."""
        urls = [*self.extra_index_urls, *(os.fspath(f) for f in self.find_links)]
        if not self.no_index:
            urls += [self.index_url] if self.index_url else _default_index_urls()
        return [url for url in urls if "://" in url]

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
        if not self.source_builds:
            options.append("--only-binary=:all:")
        return options, binds


def _default_index_urls() -> list[str]:
    """pip's own default index and the host its files come from, as pip itself names them."""
    try:
        model = importlib.import_module("pip._internal.models.index")
    except ImportError as exc:
        raise InvalidInputError(
            "pip is not importable here, so its default index is unknown; set "
            "PackageIndex(index_url=...)."
        ) from exc
    default = model.PyPI
    return [str(default.url), f"https://{default.file_storage_domain}/"]


def system_ca_bundle() -> str | None:
    """The system's CA bundle, for pip behind a proxy that re-signs TLS (pip's own otherwise)."""
    return next((path for path in _SYSTEM_CA_BUNDLES if os.path.isfile(path)), None)


def pip_environment(session_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of pip's process: the session's, without what configures pip."""
    env = {k: v for k, v in session_env.items() if not k.upper().startswith("PIP_")}
    env.update(HOME="/tmp", PIP_CONFIG_FILE=os.devnull)
    return env


def pip_install_argv(
    python: str,
    site_packages: Sequence[str],
    target: str,
    requirements: Sequence[str],
    options: Sequence[str],
    *,
    proxy_fd: int | None = None,
    proxy_socket: str | None = None,
) -> list[str]:
    """argv (inside the sandbox) of ``pip install --target`` using the session's interpreter.

    pip is found on the interpreter's own path or in the mounted site-packages (a venv's). With
    ``proxy_fd`` (or ``proxy_socket``: its unix socket inside), the forwarder to the host's
    `IndexProxy` runs first.
    """
    proxy: str | None = None
    forwarder = ""
    if proxy_fd is not None:
        proxy, forwarder = str(proxy_fd), FORWARDER
    elif proxy_socket is not None:
        proxy, forwarder = proxy_socket, RELAY_FORWARDER
    bootstrap = (
        forwarder
        + "import runpy, sys\n"
        + f"sys.path[1:1] = {json.dumps(list(site_packages))}\n"
        + "sys.argv[0] = 'pip'\n"
        + "runpy.run_module('pip', run_name='__main__', alter_sys=True)\n"
    )
    return [
        python,
        "-I",
        "-c",
        bootstrap,
        *([proxy] if proxy is not None else []),
        "install",
        "--isolated",
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


async def install_packages(
    launcher: Launcher,
    index: PackageIndex,
    requirements: Sequence[str],
    *,
    timeout: float,
    limit: int,
    preexec_fn: Callable[[], None] | None,
    on_output: OutputCallback | None = None,
) -> ExecutionResult:
    """Run pip for ``requirements`` in a sandbox of the session (see the module docstring);
    its output goes to ``on_output`` as it comes."""
    argv, proxy, env = await asyncio.to_thread(_pip_command, launcher, index, requirements)
    serving = proxy.serving() if proxy is not None else contextlib.nullcontext()
    proxy_fds = [proxy.sandbox_fd] if proxy is not None and proxy.socket_path is None else []
    async with serving, entered_off_loop(lambda: launcher.spawnable(argv)) as (command, fds):
        result = await run_captured(
            command,
            pass_fds=(*fds, *proxy_fds),
            timeout=timeout,
            limit=limit,
            preexec_fn=preexec_fn,
            env=env if not launcher.isolated else launcher.process_env(),
            cwd=launcher.process_cwd(),
            on_output=on_output,
        )
    if proxy is not None and proxy.refused:
        refused = ", ".join(sorted(set(proxy.refused)))
        rules = "the package index settings"
        if launcher.policy is not None:
            rules += " or the session's network policy"
        result = result.with_notices(f"pip tried to reach {refused}, which {rules} do not allow")
    return result


def _pip_command(
    launcher: Launcher, index: PackageIndex, requirements: Sequence[str]
) -> tuple[list[str], IndexProxy | None, dict[str, str]]:
    """pip's wrapped argv, the proxy it reaches the index through (if it needs one) and its
    environment (touches the filesystem: run off the event loop)."""
    options, binds = index.pip_options(isolated=launcher.isolated)
    proxy: IndexProxy | None = None
    channel: str | None = None
    if launcher.isolated and index.reaches_network:
        if launcher.gvisor is not None:
            channel = launcher.gvisor.channel()
            socket_path = os.path.join(channel, INDEX_SOCKET)
        allowed = allowed_endpoints(index.urls())
        if launcher.policy is not None:  # pip obeys the session's network policy too
            allowed = frozenset(e for e in allowed if launcher.policy.allows(*e))
        proxy = IndexProxy(
            allowed,
            socket_path=socket_path if channel is not None else None,
        )
        bundle = system_ca_bundle()
        if bundle is not None:
            options += ["--cert", bundle]
            binds.append((bundle, bundle))
    inner = pip_install_argv(
        launcher.python_executable,
        launcher.site_packages,
        launcher.packages_dir,
        requirements,
        options,
        proxy_fd=proxy.sandbox_fd if proxy is not None and channel is None else None,
        proxy_socket=f"{CHANNEL_DIR}/{INDEX_SOCKET}" if channel is not None else None,
    )
    env = pip_environment(launcher.environment())
    # Unisolated, pip runs on the host as it is; isolated, it has no network but the proxy.
    argv = launcher.wrap(
        inner,
        network=not launcher.isolated,
        read_only=binds,
        environment=env,
        socket_channel=channel,
    )
    return argv, proxy, env


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


__all__ = [
    "PackageIndex",
    "install_packages",
    "pip_environment",
    "pip_install_argv",
    "run_captured",
    "system_ca_bundle",
]
