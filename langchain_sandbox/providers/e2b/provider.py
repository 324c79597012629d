"""The E2B provider: sessions on E2B cloud sandboxes through ``e2b-code-interpreter``.

* Python runs in the sandbox's Jupyter kernel (``AsyncSandbox.run_code``): variables persist, the
  last expression's value comes back, matplotlib figures come back as PNG artifacts.
* Commands run through envd (``sandbox.commands``); a non-zero exit is a result.
* Files move through envd's file API (``sandbox.files``), always inside ``/home/user``.
* The sandbox's lease (E2B's sandbox timeout) is tracked locally and extended only when it is about
  to run out, so a warm ``run_code`` costs exactly one HTTP request.
* ``pause()`` keeps the sandbox, memory included; [`E2BProvider.attach`][langchain_sandbox.E2BProvider.attach] resumes it, from any
  process. ``close()`` kills it. Sandboxes carry metadata tags so ``gc`` can find orphans.

Retries: the SDK's own control-plane retries are switched off (``retries=0``) so that one policy,
`retry_async`, decides, bounded by a deadline; it retries only
operations that are safe to repeat. Running code or a command is never retried: the SDK sends
``/execute`` and ``process.Process/Start`` once (its only transport retry is for connections that
could not be established, before anything was sent).

The SDK is an optional extra (``pip install 'langchain-sandbox[e2b]'``), imported when a provider
is built. Credentials come from ``api_key=`` or the SDK's ``E2B_API_KEY``; they are never part of a
record, a result, a log line or a repr.

Why one module over 500 lines: it is the binding of one SDK, and most of it is the contract's
methods of `E2BSession`, each a few lines around one SDK call.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import functools
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

from langchain_sandbox.environment import validate_env
from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    InvalidPathError,
    ProviderUnavailableError,
    ProviderUnreachableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
    SandboxTimeoutError,
    SessionClosedError,
)
from langchain_sandbox.network import network_record
from langchain_sandbox.providers.base import (
    Capabilities,
    ChangeListing,
    FileInfo,
    Limits,
    OutputCallback,
    Session,
    SessionRecord,
    SessionSpec,
    VariablesDump,
    check_port,
    install_spec_packages,
)
from langchain_sandbox.providers.e2b._network import create_network, recorded_network
from langchain_sandbox.providers.e2b._streams import Streams
from langchain_sandbox.providers.e2b._tool_channel import run_code_with_tools
from langchain_sandbox.providers.guest import changes as guest_changes
from langchain_sandbox.providers.guest import packer
from langchain_sandbox.providers.guest import variables as kernel_state
from langchain_sandbox.providers.names import E2B as PROVIDER_NAME
from langchain_sandbox.providers.remote import (
    SESSION_KEY,
    TAG_KEY,
    RemoteProvider,
    RemoteSession,
    change_listing,
    known_reference,
    load_sdk,
    read_tags,
    tag_metadata,
)
from langchain_sandbox.providers.tool_channel import FrameFilter
from langchain_sandbox.results import Artifact, ExecutionError, ExecutionResult
from langchain_sandbox.retries import DEFAULT_ATTEMPTS, DEFAULT_DEADLINE
from langchain_sandbox.workspace import WORKSPACE_ROOT, relative_path, resolve_path

T = TypeVar("T")

logger = logging.getLogger(__name__)


CAPABILITIES = Capabilities(
    stateful_python=True,
    shell=True,
    network_control=True,
    install_packages=True,
    figures=True,
    variables=True,
    pause=True,
    pause_keeps_memory=True,
    attach_across_processes=True,
    native_snapshots=False,
    processes=True,
    ports=True,
    tools_from_code=True,
)

_BACKSTOP = 30.0  # the SDK's own deadline sits behind ours, only to never hang
_LIST_DEPTH = 64  # "recursive" listing depth; envd needs a number
_MARKER = "__langchain_sandbox_kernel_state__"
_CHUNK_BYTES = 4 * 1024 * 1024  # of a variables dump, per line of output or per upload
# Named as before the guest package: tests and benchmarks tell the capture's cell by it.
_CHANGES_MODULE, _CHANGES_PACKED = packer.shipped_module(guest_changes, "guest_changes")
# A change listing carries each changed file up to this size, and no more in all than this
# (the rest is read one request per file, as before); envd's listing rounds mtimes to
# microseconds and reports Go's FileMode.Perm(), and the kernel's listing says the same.
_BUNDLE_FILE_BYTES = _CHUNK_BYTES
_BUNDLE_BYTES = 16 * 1024 * 1024
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_LISTED_MTIME_UNIT_NS = 1000
_LISTED_MODE_MASK = 0o777


@functools.cache
def _shipped_kernel_state() -> tuple[str, bytes, bytes]:
    """The kernel_state module as the kernel builds it: its name (versioned by its source and
    cloudpickle's), its source and cloudpickle's, compressed (they travel with each call).

    Read from files once, off the event loop (`E2BProvider` warms it when it makes or attaches
    a session): a runtime may be built, and this module imported, inside a coroutine.
    """
    source, pickler = packer.module_source(kernel_state), packer.cloudpickle_source()
    return (
        packer.versioned_name("kernel_state", source, pickler),
        packer.packed_source(source).encode(),
        packer.packed_source(pickler).encode(),
    )


def _load_sdk() -> Any:
    return load_sdk(
        "e2b_code_interpreter",
        package="e2b-code-interpreter",
        extra="e2b",
        purpose="The E2B provider",
    )


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    # The code interpreter and the control plane put the status first: "503 Service ...", "429: ..."
    match = re.match(r"\s*(\d{3})\b", str(exc))
    return int(match.group(1)) if match else None


def _translate(
    exc: BaseException, what: str, *, secret: str | None, path: str | None = None
) -> SandboxError:
    """Map an SDK or transport exception to the package's taxonomy. The one place that does."""
    if isinstance(exc, SandboxError):
        return exc
    import e2b
    import httpx

    message = str(exc) or type(exc).__name__
    if secret:
        message = message.replace(secret, "<redacted>")
    text = f"E2B: {what} failed: {message}"
    details = {"sdk_error": type(exc).__name__}
    status = _status_of(exc)
    if status is not None:
        details["status"] = str(status)

    def make(cls: type[SandboxError], retryable: bool | None = None) -> SandboxError:
        return cls(text, retryable=retryable, provider=PROVIDER_NAME, details=details)

    if path is not None and isinstance(exc, e2b.FileNotFoundException):
        return InvalidPathError(f"{path!r} does not exist in the sandbox.", provider=PROVIDER_NAME)
    if path is not None and isinstance(exc, e2b.InvalidArgumentException):
        return InvalidPathError(f"{path!r} cannot be used here: {message}", provider=PROVIDER_NAME)
    if isinstance(exc, e2b.AuthenticationException) or status in (401, 403):
        return make(AuthenticationError)
    if isinstance(exc, e2b.RateLimitException) or status == 429:
        return make(QuotaExceededError)
    if isinstance(exc, (e2b.NotFoundException, e2b.SandboxNotRunningException)) or status == 404:
        return make(SandboxGoneError)
    # The edge's 502 for a sandbox that no longer exists arrives, through the code interpreter,
    # as a plain exception whose text is all there is; the SDK itself tells envd's case by it.
    if "was not found" in message or "was killed" in message:
        return make(SandboxGoneError)
    if isinstance(exc, e2b.SandboxUnreachableException) or (status is not None and status >= 500):
        return make(ProviderUnavailableError)
    if isinstance(exc, e2b.TimeoutException | httpx.TimeoutException | TimeoutError):
        return make(SandboxTimeoutError)
    if isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
        return make(ProviderUnreachableError)
    if isinstance(exc, httpx.TransportError | ConnectionError | OSError):
        return make(ProviderUnavailableError)
    if isinstance(exc, e2b.InvalidArgumentException | e2b.TemplateException):
        return make(InvalidInputError)
    return make(SandboxError, retryable=False)


class E2BSession(RemoteSession):
    """One E2B sandbox. Build it with [`E2BProvider.create`][langchain_sandbox.E2BProvider.create] or [`E2BProvider.attach`][langchain_sandbox.E2BProvider.attach]."""

    provider_name = PROVIDER_NAME
    capabilities = CAPABILITIES
    lists_variables = True

    def __init__(
        self,
        provider: E2BProvider,
        sandbox: Any,
        spec: SessionSpec,
        *,
        session_id: str,
        created_at: float,
    ) -> None:
        self._provider = provider
        self._sandbox = sandbox
        self.spec = spec
        self.session_id = session_id
        self._created_at = created_at
        self._lease_end = time.monotonic() + provider.lease_seconds
        self._lease_lock = asyncio.Lock()
        self._paused = False
        self._closed = False

    def __repr__(self) -> str:
        return f"E2BSession(session_id={self.session_id!r}, sandbox_id={self.sandbox_id!r})"

    @property
    def sandbox_id(self) -> str:
        return str(self._sandbox.sandbox_id)

    @property
    def record(self) -> SessionRecord:
        limits = self.spec.limits
        return SessionRecord(
            provider=PROVIDER_NAME,
            session_id=self.session_id,
            sandbox_id=self.sandbox_id,
            created_at=self._created_at,
            metadata=dict(self.spec.metadata),
            state={
                "template": self.spec.template,
                "network": network_record(self.spec.network),
                "paused": self._paused,
                "limits": {
                    "timeout": limits.timeout,
                    "max_output_bytes": limits.max_output_bytes,
                    "max_file_bytes": limits.max_file_bytes,
                },
            },
        )

    # -- plumbing --------------------------------------------------------------------------

    async def _ready(self, needed: float = 0.0) -> None:
        """Check the session is usable, resume it if paused, and keep its lease long enough."""
        if self._closed:
            raise SessionClosedError(f"E2B session {self.session_id} is closed.")
        if self._paused:
            await self._provider._retry(
                "resume the sandbox",
                lambda: self._sandbox.connect(timeout=self._provider.lease_seconds),
            )
            self._paused = False
            self._lease_end = time.monotonic() + self._provider.lease_seconds
        await self._keep_lease(needed)

    async def _keep_lease(self, needed: float) -> None:
        """Extend E2B's sandbox timeout only when what is left would not cover the next call."""
        provider = self._provider
        want = max(provider.lease_refresh_below, needed + provider.lease_refresh_below)
        if self._lease_end - time.monotonic() >= want:
            return
        async with self._lease_lock:
            if self._lease_end - time.monotonic() >= want:
                return
            seconds = max(provider.lease_seconds, math.ceil(want))
            await provider._retry("extend the lease", lambda: self._sandbox.set_timeout(seconds))
            self._lease_end = time.monotonic() + seconds

    async def _failure(self, exc: BaseException, what: str) -> SandboxError:
        """Translate a failure of a call that is not retried; tell "gone" from "unreachable"."""
        error = _translate(exc, what, secret=self._provider._api_key)
        if isinstance(error, ProviderUnavailableError | SandboxTimeoutError):
            try:
                running = await self._sandbox.is_running(request_timeout=10)
            except Exception:
                running = True
            if not running:
                return SandboxGoneError(
                    f"E2B sandbox {self.sandbox_id} is gone ({what}).", provider=PROVIDER_NAME
                )
        return error

    # -- code and commands -------------------------------------------------------------------

    async def _run_code(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
        frames: FrameFilter | None = None,
    ) -> ExecutionResult:
        """``frames``: code that calls host tools (see `_tool_channel`)."""
        import httpx

        await self._ready(timeout)
        streams = Streams(self.spec.limits.max_output_bytes, on_output, frames)
        started = time.monotonic()
        execution: Any = None
        try:
            async with asyncio.timeout(timeout) as deadline:
                execution = await self._sandbox.run_code(
                    code,
                    envs=env or None,
                    on_stdout=streams.sink("stdout"),
                    on_stderr=streams.sink("stderr"),
                    timeout=timeout + _BACKSTOP,
                )
        except Exception as exc:
            # Our deadline, or the SDK's own one (its ReadTimeout, when a busy stream kept the
            # event loop from firing ours first). Closing the stream interrupts the cell.
            if not (deadline.expired() or isinstance(exc.__context__, httpx.ReadTimeout)):
                raise await self._failure(exc, "run code") from exc
        fields: dict[str, Any] = {
            "duration_ms": (time.monotonic() - started) * 1000,
            **streams.fields(),
            **(
                {"timed_out": True, "exit_code": None}
                if execution is None
                else _execution_fields(execution)
            ),
        }
        return ExecutionResult(kind="code", **fields)

    _run_code_with_tools = run_code_with_tools  # over the provider's channel

    async def _run_command(
        self,
        command: str,
        *,
        timeout: float,
        env: dict[str, str],
        cwd: str,
        on_output: OutputCallback | None,
    ) -> ExecutionResult:
        import e2b

        await self._ready(timeout)
        streams = Streams(self.spec.limits.max_output_bytes, on_output)
        started = time.monotonic()
        try:
            handle = await self._sandbox.commands.run(
                command,
                background=True,
                envs=env or None,
                cwd=cwd,
                on_stdout=streams.sink("stdout"),
                on_stderr=streams.sink("stderr"),
                timeout=timeout + _BACKSTOP,
                retain_output=False,
            )
        except Exception as exc:
            raise await self._failure(exc, "start the command") from exc
        exit_code: int | None
        timed_out = False
        try:
            async with asyncio.timeout(timeout) as deadline:
                exit_code = (await handle.wait()).exit_code
        except e2b.CommandExitException as exc:
            exit_code = exc.exit_code
        except TimeoutError as exc:
            if not deadline.expired():
                raise await self._failure(exc, "run the command") from exc
            timed_out, exit_code = True, None
            await self._kill(handle)
        except Exception as exc:
            raise await self._failure(exc, "run the command") from exc
        return ExecutionResult(
            kind="command",
            exit_code=exit_code,
            timed_out=timed_out,
            duration_ms=(time.monotonic() - started) * 1000,
            **streams.fields(),
        )

    async def _kill(self, handle: Any) -> None:
        """Stop a command that ran past its timeout; the session stays usable either way."""
        try:
            await handle.kill()
        except Exception as exc:
            logger.debug("E2B: killing a timed-out command failed: %s", type(exc).__name__)
        await handle.disconnect()

    # -- files -----------------------------------------------------------------------------

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        entries = [{"path": resolve_path(p), "data": bytes(d)} for p, d in files.items()]
        if not entries:
            return
        await self._ready()
        await self._provider._retry("write files", lambda: self._sandbox.files.write_files(entries))

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        resolved = {p: resolve_path(p) for p in paths}
        await self._ready()
        return {p: await self._read_one(p, absolute) for p, absolute in resolved.items()}

    async def _read_one(self, given: str, absolute: str) -> bytes:
        limit = self.spec.limits.max_file_bytes

        async def read() -> bytes:
            data = bytearray()
            async with await self._sandbox.files.read(absolute, format="stream") as stream:
                async for chunk in stream:
                    data += chunk
                    if len(data) > limit:
                        raise InvalidInputError(
                            f"{given!r} is larger than the {limit}-byte limit for reading files."
                        )
            return bytes(data)

        return await self._provider._retry(f"read {given!r}", read, path=given)

    async def list_files(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        absolute = resolve_path(path)
        await self._ready()
        entries = await self._provider._retry(
            f"list {path!r}",
            lambda: self._sandbox.files.list(absolute, depth=_LIST_DEPTH if recursive else 1),
            path=path,
        )
        listed = (_file_info(entry) for entry in entries)
        return sorted((info for info in listed if info is not None), key=lambda info: info.path)

    async def list_changes(
        self,
        known: Mapping[str, FileInfo],
        *,
        max_bytes: int,
        variables_max_bytes: int | None = None,
        since: object | None = None,
    ) -> ChangeListing:
        """One code execution in the kernel: it lists the workspace, compares it with ``known``
        (named by the kernel's token when ``since`` is the cursor it returned, see
        `known_reference`), reads the changed regular
        files (opened without blocking: a FIFO cannot hang it) and, when asked, dumps the
        variables; entries are what `list_files` would report for them."""
        request: dict[str, Any] = {
            "max_bytes": min(max_bytes, _BUNDLE_BYTES),
            "max_file_bytes": _BUNDLE_FILE_BYTES,
            "mtime_unit_ns": _LISTED_MTIME_UNIT_NS,
            "mode_mask": _LISTED_MODE_MASK,
        }
        lines = await self._changes(
            {**request, **known_reference(known, since)}, variables_max_bytes
        )
        if json.loads(lines[-1]).get("stale"):  # a new kernel: it never saw the token
            lines = await self._changes(
                {**request, **known_reference(known, None)}, variables_max_bytes
            )
        # Lines: one per bundled file (a JSON pair), the dump's base64 chunks, the answer.
        *rest, described = lines
        files = [json.loads(line) for line in rest if line.startswith("[")]
        chunks = [line for line in rest if not line.startswith("[")]
        answer = json.loads(described)
        variables = (
            None
            if variables_max_bytes is None
            else _variables_dump(chunks, answer["variables"], variables_max_bytes)
        )
        contents = {path: base64.b64decode(data) for path, data in files}
        return change_listing(answer, contents, variables)

    async def _changes(self, request: dict[str, Any], variables_max_bytes: int | None) -> list[str]:
        packed = base64.b64encode(json.dumps(request).encode()).decode()
        dump = (
            ""
            if variables_max_bytes is None
            else _DUMP_LINES.format(limit=variables_max_bytes)
            + "    answer['variables'] = described\n"
        )
        return await self._kernel_call(
            f"    request = json.loads(base64.b64decode({packed!r}))\n"
            "    known = request.pop('known', None)\n"
            "    if known is None:\n"
            "        token, known = getattr(changes, 'last_answered', (None, None))\n"
            "        if token != request.pop('since'):\n"
            f"            print({_MARKER!r} + json.dumps({{'stale': True}}))\n"
            "            return\n"
            f"    answer, listing = changes.changes({WORKSPACE_ROOT!r}, known, **request)\n"
            "    answer['token'] = __import__('os').urandom(8).hex()\n"
            "    changes.last_answered = (answer['token'], listing)\n"
            # each file on a line of its own: no output line is over a file's cap (4 MB) in base64
            "    for path, data in answer.pop('contents').items():\n"
            f"        print({_MARKER!r} + json.dumps([path, data]))\n"
            f"{dump}"
            f"    print({_MARKER!r} + json.dumps(answer))\n",
            "list changes",
            kernel_state=variables_max_bytes is not None,
            changes=True,
        )

    async def remove_files(self, paths: Sequence[str]) -> None:
        import e2b

        resolved = [resolve_path(p) for p in paths]
        if WORKSPACE_ROOT in resolved:
            raise InvalidPathError("The workspace root itself cannot be removed.")
        await self._ready()
        for absolute in resolved:

            async def remove(target: str = absolute) -> None:
                try:
                    await self._sandbox.files.remove(target)
                except e2b.FileNotFoundException:
                    return

            await self._provider._retry(f"remove {absolute!r}", remove)

    # -- variables ---------------------------------------------------------------------------

    async def _kernel_call(
        self, body: str, what: str, *, kernel_state: bool = True, changes: bool = False
    ) -> list[str]:
        """Run ``body`` in the kernel, inside a function (the user's globals keep no name of
        ours); return what it printed behind the marker, line by line.

        In scope: ``ks``, the kernel_state module, with ``kernel_state``; ``changes``, the
        guest_changes module, with ``changes``. Each is built from its source once per kernel
        and kept in ``sys.modules`` (its compressed source travels with every call that needs
        it: the host cannot know whether the kernel was restarted).
        """
        ks = ""
        if kernel_state:
            name, packed, pickler = _shipped_kernel_state()
            ks = f"    ks = module({name!r}, {packed!r}, {pickler!r})\n"
        code = (
            "def _langchain_sandbox_call():\n"
            "    import base64, json, sys, types, zlib\n"
            "    def source(packed):\n"
            "        return zlib.decompress(base64.b64decode(packed)).decode()\n"
            "    def module(name, packed, prepare=None):\n"
            "        found = sys.modules.get(name)\n"
            "        if found is None:\n"
            "            found = types.ModuleType(name)\n"
            "            exec(compile(source(packed), '<' + name + '>', 'exec'), found.__dict__)\n"
            "            if prepare is not None:\n"
            "                found.prepare(source(prepare))\n"
            "            sys.modules[name] = found\n"
            "        return found\n"
            + ks
            + (
                f"    changes = module({_CHANGES_MODULE!r}, {_CHANGES_PACKED!r})\n"
                if changes
                else ""
            )
            + f"{body}"
            "_langchain_sandbox_call()\n"
            "del _langchain_sandbox_call\n"
        )
        limit = self.spec.limits.timeout
        await self._ready(limit)
        try:
            execution = await self._sandbox.run_code(code, timeout=limit)
        except Exception as exc:
            raise await self._failure(exc, what) from exc
        if execution.error is not None:
            raise SandboxError(
                f"E2B: {what} failed in the kernel: {execution.error.name}: {execution.error.value}",
                provider=PROVIDER_NAME,
            )
        lines = [
            line[len(_MARKER) :]
            for line in "".join(execution.logs.stdout).splitlines()
            if line.startswith(_MARKER)
        ]
        if not lines:
            raise SandboxError(f"E2B: {what} returned nothing.", provider=PROVIDER_NAME)
        return lines

    async def _dump_variables(self, max_bytes: int) -> VariablesDump:
        lines = await self._kernel_call(
            _DUMP_LINES.format(limit=max_bytes)
            + f"    print({_MARKER!r} + json.dumps(described))\n",
            "dump variables",
        )
        *chunks, described = lines
        return _variables_dump(chunks, json.loads(described), max_bytes)

    async def _load_variables(self, data: bytes) -> dict[str, str]:
        # A large dump goes up in several calls, each adding a chunk to a buffer in the kernel.
        view = memoryview(data)
        chunks = [view[start : start + _CHUNK_BYTES] for start in range(0, len(data), _CHUNK_BYTES)]
        for chunk in chunks[:-1]:
            await self._kernel_call(
                f"    ks.incoming = getattr(ks, 'incoming', b'') + "
                f"base64.b64decode({base64.b64encode(chunk).decode()!r})\n"
                f"    print({_MARKER!r} + 'ok')\n",
                "load variables",
            )
        last = base64.b64encode(chunks[-1] if chunks else b"").decode()
        (answer,) = await self._kernel_call(
            f"    blob = getattr(ks, 'incoming', b'') + base64.b64decode({last!r})\n"
            "    ks.incoming = b''\n"
            "    failed = ks.load_namespace(globals(), blob)\n"
            f"    print({_MARKER!r} + json.dumps(failed))\n",
            "load variables",
        )
        return {str(name): str(why) for name, why in json.loads(answer).items()}

    # -- lifecycle ---------------------------------------------------------------------------

    async def is_alive(self) -> bool:
        if self._closed:
            return False
        try:
            if self._paused:
                info = await self._sandbox.get_info()
                return str(getattr(info.state, "value", info.state)) in ("running", "paused")
            return bool(await self._sandbox.is_running(request_timeout=10))
        except Exception:
            return False

    async def expose_port(self, port: int) -> str:
        """``https://{port}-{sandbox_id}.{domain}`` (``sandbox.get_host``, no API call): E2B's
        edge routes that host name to the port, for anyone who has the URL. A paused sandbox
        is resumed first (its processes, kept in its memory, still listen)."""
        check_port(port)
        await self._ready()
        return f"https://{self._sandbox.get_host(port)}"

    async def pause(self) -> None:
        if self._closed:
            raise SessionClosedError(f"E2B session {self.session_id} is closed.")
        if self._paused:
            return
        await self._provider._retry("pause the sandbox", self._sandbox.pause)
        self._paused = True

    async def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(SandboxGoneError):  # already gone is what close wants
            await self._provider._retry("kill the sandbox", self._sandbox.kill)
        self._closed = True


# Kernel lines that dump the variables: the dump's base64 chunks, each printed behind the marker,
# and ``described``, what the host checks them against (the caller prints it).
_DUMP_LINES = (
    "    blob, saved, skipped = ks.dump_namespace(globals(), {limit})\n"
    f"    for start in range(0, len(blob), {_CHUNK_BYTES}):\n"
    f"        chunk = base64.b64encode(blob[start : start + {_CHUNK_BYTES}]).decode()\n"
    f"        print({_MARKER!r} + chunk)\n"
    "    described = {{'size': len(blob), 'saved': saved, 'skipped': skipped}}\n"
)


def _variables_dump(chunks: list[str], described: dict[str, Any], max_bytes: int) -> VariablesDump:
    """The dump the kernel printed as ``chunks`` of base64, checked against ``described``."""
    data = b"".join(base64.b64decode(chunk) for chunk in chunks)
    if len(data) != described["size"] or len(data) > max_bytes:
        raise SandboxError(
            f"E2B: the variables dump is {len(data)} bytes, not the {described['size']} announced.",
            provider=PROVIDER_NAME,
        )
    reasons = {str(name): str(why) for name, why in described["skipped"].items()}
    return VariablesDump(
        data=data, saved=tuple(described["saved"]), skipped=tuple(reasons), reasons=reasons
    )


def _execution_fields(execution: Any) -> dict[str, Any]:
    """Result fields from the SDK's ``Execution``: the last value, figures, the exception."""
    value: str | None = None
    artifacts: list[Artifact] = []
    for result in execution.results:
        if result.is_main_result and result.text is not None:
            value = result.text
        if result.png:
            name = f"figure-{len(artifacts) + 1}.png"
            artifacts.append(Artifact(name=name, mime_type="image/png", data=result.png))
    error = execution.error
    return {
        "value": value,
        "artifacts": artifacts,
        "error": (
            ExecutionError(name=error.name, value=error.value, traceback=error.traceback or "")
            if error is not None
            else None
        ),
        "exit_code": 1 if error is not None else 0,
    }


def _listed_path(path: str) -> str:
    """The workspace-relative form of a path the sandbox listed, not checked against the rules
    for paths a caller gives: a listing reports every name in the workspace, those the session
    API refuses (a backslash, say) included, so a snapshot can name them instead of failing."""
    prefix = WORKSPACE_ROOT.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else relative_path(path)


def _file_info(entry: Any) -> FileInfo | None:
    """An envd entry as a [`FileInfo`][langchain_sandbox.FileInfo], in exactly the form the kernel's change listing
    gives it (`guest_changes` with microsecond mtimes and
    permission bits), so an unchanged file compares equal; ``None`` for an entry of no known
    type (FIFOs, sockets, devices: never listed)."""
    if entry.type is None:
        return None
    kind: Literal["file", "dir", "symlink"] = entry.type.value
    # The SDK's datetime has microseconds; counted exactly (a float timestamp would be off by
    # up to a few hundred nanoseconds, and then differ from the kernel's listing).
    micros = (entry.modified_time - _EPOCH) // dt.timedelta(microseconds=1)
    return FileInfo(
        path=_listed_path(entry.path),
        size=0 if kind == "dir" else int(entry.size),
        mtime_ns=micros * _LISTED_MTIME_UNIT_NS,
        # Newer envd reports a symlink's target's permissions; the link's own are always these.
        mode=0o777 if kind == "symlink" else int(entry.mode) & _LISTED_MODE_MASK,
        kind=kind,
    )


class E2BProvider(RemoteProvider):
    """Sessions on E2B sandboxes.

    Args:
        api_key: E2B API key; defaults to the SDK's ``E2B_API_KEY``. Never stored in records.
        template: Sandbox template; defaults to the code-interpreter template.
        domain: E2B domain (self-hosted deployments); defaults to the SDK's ``E2B_DOMAIN``.
        api_url, sandbox_url: Explicit endpoints (the emulator, a proxy); default to the SDK's
            ``E2B_API_URL`` / ``E2B_SANDBOX_URL``, else the E2B cloud.
        lease_seconds: Sandbox timeout set on create, resume and each extension. An idle sandbox
            stops costing money at most this long after its last use.
        lease_refresh_below: Extend the lease only when less than this many seconds are left
            (beyond what the next call needs).
        on_timeout: What E2B does when the lease runs out: ``"kill"``, or ``"pause"`` (the
            sandbox and its memory are kept, and `attach` resumes it).
        request_timeout: Per-request timeout of control-plane and file calls, seconds.
        retry_attempts, retry_deadline: Bounds of the retries of safe operations.
    """

    name = PROVIDER_NAME
    capabilities = CAPABILITIES

    def __init__(
        self,
        *,
        api_key: str | None = None,
        template: str | None = None,
        domain: str | None = None,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        lease_seconds: int = 300,
        lease_refresh_below: float = 60.0,
        on_timeout: Literal["kill", "pause"] = "kill",
        request_timeout: float = 30.0,
        retry_attempts: int = DEFAULT_ATTEMPTS,
        retry_deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        if lease_seconds <= 0 or lease_refresh_below < 0:
            raise InvalidInputError("lease_seconds must be positive and lease_refresh_below >= 0.")
        sdk = _load_sdk()
        if not (api_key or os.environ.get("E2B_API_KEY")):
            raise AuthenticationError(
                "No E2B API key: pass api_key= to E2BProvider or set E2B_API_KEY.",
                provider=PROVIDER_NAME,
            )
        self._api_key = api_key
        self.template = template
        self.lease_seconds = int(lease_seconds)
        self.lease_refresh_below = float(lease_refresh_below)
        self.on_timeout = on_timeout
        self._api_url = api_url
        super().__init__(retry_attempts=retry_attempts, retry_deadline=retry_deadline)
        params: dict[str, Any] = {
            "api_key": api_key,
            "domain": domain,
            "api_url": api_url,
            "sandbox_url": sandbox_url,
            "request_timeout": request_timeout,
            "retries": 0,
        }
        self._sandbox_cls = sdk.E2B(
            **{k: v for k, v in params.items() if v is not None}
        ).AsyncSandbox

    def __repr__(self) -> str:
        return f"E2BProvider(template={self.template!r}, api_url={self._api_url!r})"

    def _translate(self, exc: BaseException, what: str, *, path: str | None) -> SandboxError:
        return _translate(exc, what, secret=self._api_key, path=path)

    async def create(self, spec: SessionSpec | None = None) -> Session:
        spec = spec or SessionSpec()
        network = create_network(spec.network)
        session_id = uuid.uuid4().hex
        metadata = tag_metadata(spec.metadata, session_id)
        env = validate_env(spec.env)
        # Retries of a create reuse one idempotency key, so E2B never makes a second sandbox.
        idempotency_key = str(uuid.uuid4())
        await asyncio.to_thread(_shipped_kernel_state)
        sandbox = await self._retry(
            "create a sandbox",
            lambda: self._sandbox_cls.create(
                template=spec.template or self.template,
                timeout=self.lease_seconds,
                metadata=metadata,
                envs=env,
                **network,
                lifecycle={"on_timeout": self.on_timeout},
                idempotency_key=idempotency_key,
            ),
        )
        logger.debug("E2B: created sandbox %s for session %s", sandbox.sandbox_id, session_id)
        session = E2BSession(self, sandbox, spec, session_id=session_id, created_at=time.time())
        await install_spec_packages(session)
        return session

    async def _attach(self, record: SessionRecord) -> Session | None:
        sandbox_id = record["sandbox_id"]
        await asyncio.to_thread(_shipped_kernel_state)
        try:
            sandbox = await self._retry(
                "connect to the sandbox",
                lambda: self._sandbox_cls.connect(sandbox_id, timeout=self.lease_seconds),
            )
        except SandboxGoneError:
            return None
        state = record.get("state") or {}
        limits = Limits(**{**(state.get("limits") or {})})
        spec = SessionSpec(
            template=state.get("template"),
            limits=limits,
            network=recorded_network(state),
            metadata=dict(record.get("metadata") or {}),
        )
        return E2BSession(
            self,
            sandbox,
            spec,
            session_id=record.get("session_id") or uuid.uuid4().hex,
            created_at=float(record.get("created_at") or time.time()),
        )

    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        from e2b import SandboxQuery

        query = SandboxQuery(metadata={**dict(metadata or {}), TAG_KEY: "1"})
        paginator = self._sandbox_cls.list(query=query)
        records: list[SessionRecord] = []
        while paginator.has_next:
            for info in await self._retry("list sandboxes", paginator.next_items):
                session_id, tags = read_tags(info.metadata, info.sandbox_id)
                state = str(getattr(info.state, "value", info.state))
                records.append(
                    SessionRecord(
                        provider=PROVIDER_NAME,
                        session_id=session_id,
                        sandbox_id=info.sandbox_id,
                        created_at=info.started_at.timestamp(),
                        metadata=tags,
                        state={"template": info.template_id, "paused": state == "paused"},
                    )
                )
        return records

    async def _destroy(self, record: SessionRecord) -> bool:
        sandbox_id = record["sandbox_id"]
        killed = await self._retry("kill the sandbox", lambda: self._sandbox_cls.kill(sandbox_id))
        return bool(killed)


__all__ = ["CAPABILITIES", "SESSION_KEY", "TAG_KEY", "E2BProvider", "E2BSession"]
