"""The provider contract: a small async interface every backend implements.

A [`Provider`][langchain_sandbox.Provider] makes and finds sandboxes; a [`Session`][langchain_sandbox.Session] is one live sandbox. Everything
above this layer (the runtime, the tools, the graph glue, the snapshots) talks to these two classes
only, so a graph moves from the local provider to E2B or Runloop without a change. A behaviour that
differs between providers is either a bug or a flag in [`Capabilities`][langchain_sandbox.Capabilities]; the conformance suite
in ``tests/conformance/`` holds every provider to this file.

Rules every implementation keeps:

* Paths are POSIX and resolve inside `WORKSPACE_ROOT`
  (``/home/user``) through `resolve_path`.
* User-code failures are results; infrastructure failures raise
  [`SandboxError`][langchain_sandbox.SandboxError] subclasses with ``retryable`` set correctly.
* Output is capped at the source (`OutputCapture`), never
  buffered whole on the host.
* No secret of the host (API keys, the host's environment, its home) reaches the sandbox, a
  [`SessionRecord`][langchain_sandbox.SessionRecord], a log or a result.
* ``pause`` and ``close`` are idempotent.

Writing a provider: subclass [`Provider`][langchain_sandbox.Provider] and [`Session`][langchain_sandbox.Session] and implement their abstract
methods (the public ``run_code`` / ``run_command`` / ``install_packages`` / ``attach`` /
``destroy`` check their arguments once, here, and call the ``_``-prefixed ones). Everything an
implementation needs is importable from this module: the result types, the output cap, the
workspace paths and the input checks. The value types live in `contract_types` and are
re-exported here; ``docs/providers/adding-a-provider.md`` walks through a new provider.

Why one module over 500 lines: it is two abstract classes, and most of it is the docstrings of
`Session`'s public methods, which are the contract every provider is tested against; splitting
`Session` would scatter one interface over several files.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

from langchain_sandbox.core.environment import validate_env
from langchain_sandbox.core.requirements import validate_requirements
from langchain_sandbox.core.workspace import WORKSPACE_ROOT, relative_path, resolve_path
from langchain_sandbox.errors import (
    CapabilityError,
    ConfigurationError,
    InvalidInputError,
    SandboxError,
)
from langchain_sandbox.processes import ProcessInfo, ProcessOutput, ProcessSpec
from langchain_sandbox.providers.contract_types import (
    INSTALL_TIMEOUT,
    Capabilities,
    ChangeListing,
    FileInfo,
    FileMetadata,
    Limits,
    OutputCallback,
    SessionRecord,
    SessionSpec,
    VariablesDump,
    changes_between,
    check_port,
    checked_timeout,
    installed_notice,
)
from langchain_sandbox.providers.guest.cells import repr_failure
from langchain_sandbox.providers.tool_channel import ToolHost
from langchain_sandbox.results import (
    Artifact,
    ExecutionError,
    ExecutionResult,
    OutputCapture,
)


class Session(ABC):
    """One live sandbox. Async, provider-neutral; see the module docstring for the rules."""

    provider_name: str
    session_id: str
    spec: SessionSpec
    capabilities: Capabilities

    @property
    @abstractmethod
    def record(self) -> SessionRecord:
        """The JSON-safe record to find this sandbox again (stored in graph state)."""

    async def run_code(
        self,
        code: str,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        on_output: OutputCallback | None = None,
        tools: ToolHost | None = None,
    ) -> ExecutionResult:
        """Run Python in the session's persistent interpreter; the last bare expression's value is
        returned as ``result.value``. Exceptions in the code are results, not raises; a value
        whose ``repr`` raises is a placeholder with a notice (`guest`).

        ``timeout`` defaults to ``spec.limits.timeout``. Bad arguments raise
        [`InvalidInputError`][langchain_sandbox.InvalidInputError] before the sandbox is touched.
        ``tools``: the code gets a ``tools`` object calling them on the host (see
        ``docs/tools-from-code.md``); a provider without ``capabilities.tools_from_code``
        refuses with [`ConfigurationError`][langchain_sandbox.ConfigurationError].
        """
        if not isinstance(code, str):
            raise InvalidInputError("code must be a string.")
        checked = checked_timeout(timeout, self.spec.limits.timeout)
        if tools is None:
            result = await self._run_code(
                code, timeout=checked, env=validate_env(env), on_output=on_output
            )
        else:
            result = await self._run_code_with_tools(
                code, timeout=checked, env=validate_env(env), on_output=on_output, tools=tools
            )
            result = result.with_notices(*tools.notices())
        notice = repr_failure(result.value)
        return result.with_notices(notice) if notice is not None else result

    async def _run_code_with_tools(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
        tools: ToolHost,
    ) -> ExecutionResult:
        """`_run_code` whose code may call ``tools``; providers with
        ``capabilities.tools_from_code`` implement it."""
        raise ConfigurationError(
            f"The {self.provider_name} provider cannot call host tools from sandboxed code yet; "
            "use the local provider, or give the tools to the agent directly."
        )

    async def run_command(
        self,
        command: str,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run a shell command (``bash -c``) in ``cwd`` (default: the workspace root).

        A non-zero exit is a result. Arguments are checked as in `run_code`.
        """
        if not isinstance(command, str) or not command.strip():
            raise InvalidInputError("command must be a non-empty string.")
        return await self._run_command(
            command,
            timeout=checked_timeout(timeout, self.spec.limits.timeout),
            env=validate_env(env),
            cwd=resolve_path(cwd or "."),
            on_output=on_output,
        )

    async def install_packages(
        self,
        requirements: Sequence[str],
        *,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Install requirements so later code in this session can import them; the installer's
        output goes to ``on_output`` while it runs.

        Each is checked by `validate_requirements` first;
        ``timeout`` defaults to `INSTALL_TIMEOUT`. A success carries
        `installed_notice`; a failure is a result (pip's output says why).
        """
        names = validate_requirements(requirements)
        result = await self._install_packages(
            names, timeout=checked_timeout(timeout, INSTALL_TIMEOUT), on_output=on_output
        )
        return result.with_notices(installed_notice(names)) if result.ok else result

    @abstractmethod
    async def _run_code(
        self,
        code: str,
        *,
        timeout: float,
        env: dict[str, str],
        on_output: OutputCallback | None,
    ) -> ExecutionResult:
        """`run_code` with checked arguments: ``timeout`` in seconds, ``env`` validated."""

    @abstractmethod
    async def _run_command(
        self,
        command: str,
        *,
        timeout: float,
        env: dict[str, str],
        cwd: str,
        on_output: OutputCallback | None,
    ) -> ExecutionResult:
        """`run_command` with checked arguments; ``cwd`` is absolute, in the workspace."""

    @abstractmethod
    async def _install_packages(
        self, names: list[str], *, timeout: float, on_output: OutputCallback | None
    ) -> ExecutionResult:
        """`install_packages` with validated requirements; the notice is added for you."""

    # ------------------------------------------------------------ background processes

    @property
    def guest_python(self) -> str:
        """The interpreter that runs the process supervisor inside the sandbox (any Python 3
        with its standard library)."""
        return "python3"

    def _require(self, capability: str, what: str) -> None:
        if not getattr(self.capabilities, capability):
            raise CapabilityError(
                f"The {self.provider_name} provider cannot {what} (Capabilities.{capability} "
                "is False).",
                provider=self.provider_name,
            )

    async def start_process(self, spec: ProcessSpec) -> ProcessInfo:
        """Start a named process that keeps running after this call (``bash -c command`` in
        ``spec.cwd``, in a process group of its own), and return it with what it printed in
        about its first half second. A finished or stopped process of the same name is
        replaced; a running one is refused, as is one past ``Limits.max_background_processes``
        ([`ProcessLimitError`][langchain_sandbox.ProcessLimitError]).

        The default runs the guest supervisor through `run_command` (see `process_control`).
        """
        from langchain_sandbox.providers import process_control

        self._require("processes", "run background processes")
        if not isinstance(spec, ProcessSpec):
            raise InvalidInputError("start_process takes a ProcessSpec.")
        return await process_control.start_process(self, spec.checked())

    async def process_output(self, name: str, *, since: int = 0) -> ProcessOutput:
        """What process ``name`` wrote from byte offset ``since`` on (stdout and stderr merged);
        pass the result's ``next_offset`` as ``since`` to read on. Bytes the bounded ring no
        longer holds are counted in ``dropped``."""
        from langchain_sandbox.providers import process_control

        self._require("processes", "run background processes")
        return await process_control.process_output(self, name, since)

    async def stop_process(self, name: str, *, grace: float = 3.0) -> ProcessInfo:
        """Stop process ``name`` and everything in its process group: ``SIGTERM``, then
        ``SIGKILL`` after ``grace`` seconds. Stopping a process that already ended does
        nothing; either way it stays listed with how it ended."""
        from langchain_sandbox.providers import process_control

        self._require("processes", "run background processes")
        return await process_control.stop_process(self, name, grace)

    async def list_processes(self) -> list[ProcessInfo]:
        """The session's named processes, oldest first, running or not."""
        from langchain_sandbox.providers import process_control

        self._require("processes", "run background processes")
        return await process_control.list_processes(self)

    async def expose_port(self, port: int) -> str:
        """A URL the host (and whoever it lets) can open to reach ``port`` inside the sandbox,
        the same one for the same port while the session lives. Something in the sandbox must
        listen on ``127.0.0.1:port`` (or all addresses) for it to answer.

        Provider-specific; the default refuses
        ([`CapabilityError`][langchain_sandbox.CapabilityError]).
        """
        check_port(port)
        self._require("ports", "expose ports")
        raise CapabilityError(
            f"The {self.provider_name} provider cannot expose ports.", provider=self.provider_name
        )

    async def run_shell(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run a command in the session's persistent shell: the working directory and exported
        variables of earlier ``run_shell`` calls carry over (``cd`` and ``export`` stick), and
        travel with the workspace's snapshots. ``cwd`` changes directory first, and the shell
        stays there. See `langchain_sandbox.providers.guest.persistent_shell`.
        """
        from langchain_sandbox.providers.guest.persistent_shell import shell_script

        return await self.run_command(
            shell_script(command, cwd), timeout=timeout, on_output=on_output
        )

    def carry_head(self, name: str, value: str) -> bool:
        """Set the interpreter's global ``name`` to ``value`` with the session's next request to
        its interpreter, so marking the sandbox's head (see
        `rehydration`) costs no round trip of its own.

        Returns whether the session can; `carried_head` then says when it did. The default
        cannot (a provider's own kernel API takes only the user's code): the caller sets the
        global with a call of its own.
        """
        return False

    def expect_capture(self) -> None:
        """Say that a snapshot capture follows the next call, so a session that can have its
        interpreter dump the variables right behind that call does: the capture's
        `dump_variables` (with the default ``max_bytes``) then waits for that dump instead
        of asking anew, unless another request reached the interpreter in between. The
        default does nothing."""

    @property
    def carried_head(self) -> str | None:
        """The last value `carry_head` delivered to the interpreter, if any."""
        return None

    @abstractmethod
    async def write_files(self, files: Mapping[str, bytes]) -> None:
        """Write files (creating parent directories). Paths resolve inside the workspace."""

    keeps_file_metadata: ClassVar[bool] = False
    """Whether `write_restored` gives files their modification times and holes and
    `link_files` makes hard links (the local provider, which writes the workspace from the
    host). Elsewhere a restore writes contents only, and says what it could not keep."""

    async def write_restored(
        self, files: Mapping[str, bytes], metadata: Mapping[str, FileMetadata]
    ) -> list[str]:
        """`write_files`, giving each file of ``metadata`` its modification time (and, for a
        sparse one, holes where its blocks are zeros) as it is written, so a restore costs no
        process of its own for them. Returns the paths whose metadata could not be set (their
        contents are written). The default writes contents only and returns every path of
        ``metadata``; see `keeps_file_metadata`."""
        await self.write_files(files)
        return [path for path in metadata if path in files]

    async def link_files(self, links: Mapping[str, str]) -> list[str]:
        """Make each path of ``links`` a hard link of the workspace file it maps to, replacing
        whatever is at the path (never following a symlink). Returns the paths that could not
        be linked; the caller writes those as copies. The default links nothing."""
        return list(links)

    async def make_fifos(self, paths: Sequence[str]) -> list[str]:
        """Create a named pipe (FIFO) at each path, replacing whatever is there (never following
        a symlink); returns the paths where none could be made. The default makes none."""
        return list(paths)

    @abstractmethod
    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files; keys are the paths as given. Missing files raise ``InvalidPathError``."""

    @abstractmethod
    async def list_files(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        """List a directory of the workspace (every descendant when ``recursive``)."""

    lists_variables: ClassVar[bool] = False
    """Whether `list_changes` dumps the variables in its own request when asked (the
    caller then makes no separate `dump_variables` request)."""

    async def list_changes(
        self,
        known: Mapping[str, FileInfo],
        *,
        max_bytes: int,
        variables_max_bytes: int | None = None,
        since: object | None = None,
    ) -> ChangeListing:
        """What differs between the whole workspace and ``known`` (the caller's last listing,
        path -> entry), with, in the same request where the provider allows it, the contents of
        changed regular files (up to ``max_bytes`` in all), so a snapshot of a changing workspace
        costs one round trip and host work proportional to what changed.

        ``variables_max_bytes`` asks a provider that `lists_variables` for the variables
        dump too (see `dump_variables`); other providers ignore it. ``since`` is the
        `ChangeListing.cursor` of the listing ``known`` was last completed with (``None``
        if ``known`` came from elsewhere); a provider without cursors ignores it.

        The default lists everything with `list_files` and compares on the host; it reads
        no contents.
        """
        listing = await self.list_files(".", recursive=True)
        return changes_between(known, listing)

    @abstractmethod
    async def remove_files(self, paths: Sequence[str]) -> None:
        """Remove files or directories (recursively). Missing paths are ignored."""

    async def dump_variables(self, *, max_bytes: int | None = None) -> VariablesDump:
        """Capture the globals of the Python interpreter as one object graph
        (`guest.variables` says exactly what survives).

        ``max_bytes`` (default: ``spec.limits.max_file_bytes``) bounds the dump: past it, the
        largest variables are left out until the rest fits, and named in ``skipped`` with the
        reason, like the values that cannot be pickled. The live variables are never touched.
        """
        limit = self.spec.limits.max_file_bytes if max_bytes is None else max_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise InvalidInputError(f"max_bytes must be a positive integer, not {max_bytes!r}.")
        return await self._dump_variables(limit)

    async def load_variables(self, data: bytes) -> dict[str, str]:
        """Make the user globals those captured by `dump_variables` (globals the dump does
        not have are removed, so a live interpreter ends as a fresh one would); returns the names
        that could not be restored, each with the reason (a package this sandbox lacks)."""
        if not isinstance(data, bytes):
            raise InvalidInputError("Variables must be the bytes of a VariablesDump.")
        return await self._load_variables(data)

    @abstractmethod
    async def _dump_variables(self, max_bytes: int) -> VariablesDump:
        """`dump_variables` with a checked limit, transferred whole (never as one line
        of a protocol that bounds its lines)."""

    @abstractmethod
    async def _load_variables(self, data: bytes) -> dict[str, str]:
        """`load_variables` with checked bytes."""

    @abstractmethod
    async def is_alive(self) -> bool:
        """Whether the sandbox still answers. Never raises."""

    async def pause(self) -> None:
        """Keep the sandbox for a later [`Provider.attach`][langchain_sandbox.Provider.attach], releasing what can be released.

        Providers without pause keep the sandbox running; idempotent.
        """

    @abstractmethod
    async def close(self) -> None:
        """Destroy the sandbox and everything in it. Idempotent."""

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class Provider(ABC):
    """A backend that creates and finds sessions."""

    name: str
    capabilities: Capabilities

    @abstractmethod
    async def create(self, spec: SessionSpec | None = None) -> Session:
        """Create a new session. A failed create leaves nothing behind.

        The provider retries its own transient failures (it knows how to make a repeat safe,
        e.g. E2B's idempotency key), so callers do not retry ``create`` or ``attach`` again.
        """

    async def attach(self, record: SessionRecord) -> Session | None:
        """Reconnect to the live or paused sandbox a record names; ``None`` if it is gone.

        A record of another provider, or one naming no sandbox, raises
        [`InvalidInputError`][langchain_sandbox.InvalidInputError] (on every provider).
        """
        self._check_own(record)
        return await self._attach(record)

    @abstractmethod
    async def list_sessions(self, metadata: Mapping[str, str] | None = None) -> list[SessionRecord]:
        """Sandboxes of this provider made by this package (matching ``metadata``), for ``gc``."""

    async def destroy(self, record: SessionRecord) -> bool:
        """Destroy the sandbox a record names; ``False`` if it was already gone. Records are
        checked as in `attach`."""
        self._check_own(record)
        return await self._destroy(record)

    def _check_own(self, record: SessionRecord) -> None:
        named = record.get("provider")
        if named is not None and named != self.name:
            raise InvalidInputError(
                f"This record names a sandbox of the {named!r} provider, not of {self.name!r}."
            )
        if not isinstance(record.get("sandbox_id"), str) or not record.get("sandbox_id"):
            raise InvalidInputError("This record does not name a sandbox (no sandbox_id).")

    @abstractmethod
    async def _attach(self, record: SessionRecord) -> Session | None:
        """`attach` for a record of this provider that names a sandbox."""

    @abstractmethod
    async def _destroy(self, record: SessionRecord) -> bool:
        """`destroy` for a record of this provider that names a sandbox."""

    async def aclose(self) -> None:
        """Release clients and connections the provider holds. Idempotent."""


async def install_spec_packages(session: Session) -> None:
    """Install ``session.spec.packages`` into a new session, or close it and raise.

    Every provider's ``create`` calls this last, so a session is handed out with its packages or
    not at all.
    """
    packages = session.spec.packages
    if not packages:
        return
    try:
        result = await session.install_packages(packages)
        if not result.ok:
            raise SandboxError(
                f"Installing the session's packages ({', '.join(packages)}) failed:\n"
                + result.render(max_chars=2000),
                provider=session.provider_name,
            )
    except BaseException:
        await session.close()
        raise


__all__ = [
    "INSTALL_TIMEOUT",
    "WORKSPACE_ROOT",
    "Artifact",
    "Capabilities",
    "ChangeListing",
    "ExecutionError",
    "ExecutionResult",
    "FileInfo",
    "FileMetadata",
    "Limits",
    "OutputCallback",
    "OutputCapture",
    "Provider",
    "Session",
    "SessionRecord",
    "SessionSpec",
    "VariablesDump",
    "changes_between",
    "check_port",
    "checked_timeout",
    "install_spec_packages",
    "installed_notice",
    "relative_path",
    "resolve_path",
    "validate_env",
    "validate_requirements",
]
