"""One agent-sandbox pod behind the session contract, through the SDK's ``AsyncSandbox`` handle.

The pod's runtime runs a command and moves files; stateful Python runs in the worker shipped into
the pod (`langchain_sandbox.providers.worker_session`, the same worker Runloop devboxes run), one
``POST execute`` per call. What this module adds is the transport:

* a command goes as ``bash -c <command>`` (the runtime splits it with ``shlex`` and runs it
  without a shell), with the runtime's own ``timeout_seconds`` as a backstop past the worker's;
* files move with ``files.write`` / ``files.read_to`` on absolute paths (``allow_unsafe_paths``:
  the worker lives in ``/tmp``, the workspace in ``/home/user``, neither under the runtime's root);
* the runtime streams nothing, so ``on_output`` gets a call's output when the call ends.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_sandbox.errors import (
    InvalidInputError,
    InvalidPathError,
    SandboxError,
    SandboxGoneError,
    SessionClosedError,
)
from langchain_sandbox.providers.base import (
    Capabilities,
    OutputCallback,
    SessionSpec,
)
from langchain_sandbox.providers.names import KUBERNETES as PROVIDER_NAME
from langchain_sandbox.providers.worker_session import AnswerCut, CodeToolChannel, WorkerSession

if TYPE_CHECKING:
    from langchain_sandbox.providers.kubernetes.provider import KubernetesProvider

CAPABILITIES = Capabilities(
    stateful_python=True,
    shell=True,
    # Egress is the cluster's (a NetworkPolicy on the template's pods), not a per-session switch.
    network_control=False,
    install_packages=True,
    figures=True,
    variables=True,
    # The SDK has no suspend; a paused session keeps its pod (docs/kubernetes.md).
    pause=False,
    pause_keeps_memory=False,
    attach_across_processes=True,
    native_snapshots=False,
    tools_from_code=False,
    # Background processes and ports need a runtime that keeps a process past its request and a
    # route to a pod port; the legacy runtime behind the router offers neither.
    processes=False,
    ports=False,
)

_READ_TIMEOUT_MARGIN = 10


@dataclass(frozen=True)
class _Outcome:
    """What one ``execute`` answered."""

    exit_status: int
    stdout: str
    stderr: str


class _Collector:
    """A destination for ``files.read_to``: the bytes, in memory."""

    def __init__(self) -> None:
        self.data = bytearray()

    async def write(self, content: bytes) -> int:
        self.data += content
        return len(content)


class KubernetesSession(WorkerSession):
    """One SandboxClaim and the pod bound to it; see the module docstring."""

    provider_name = PROVIDER_NAME
    capabilities = CAPABILITIES
    noun = "pod"
    _provider: KubernetesProvider

    def __init__(
        self,
        provider: KubernetesProvider,
        *,
        claim: str,
        sandbox_name: str,
        session_id: str,
        spec: SessionSpec,
        created_at: float,
        state: dict[str, Any],
    ) -> None:
        super().__init__(
            provider,
            provider.shipped_worker,
            sandbox_id=claim,
            session_id=session_id,
            spec=spec,
            created_at=created_at,
            state=state,
        )
        self.claim = claim
        self.sandbox_name = sandbox_name

    def __repr__(self) -> str:
        return f"KubernetesSession(claim={self.claim!r}, sandbox={self.sandbox_name!r})"

    async def _handle(self) -> Any:
        """The SDK's handle of this claim on the running loop's client (cached there)."""
        return await self._provider.handle(self.claim, self._state.get("warm_pool"))

    async def _ready(self) -> None:
        if self._closed:
            raise SessionClosedError("This Kubernetes session was closed.", provider=PROVIDER_NAME)

    async def execute(
        self,
        command: str,
        *,
        wait: float,
        on_output: OutputCallback | None = None,
        tools: CodeToolChannel | None = None,
    ) -> tuple[Any, bool]:
        # ``tools`` is never given: the runtime's execute has no stdin (tools_from_code=False).
        handle = await self._handle()
        async with self._provider._errors("execute"):
            result = await handle.commands.run(
                f"bash -c {shlex.quote(command)}",
                timeout=math.ceil(wait) + _READ_TIMEOUT_MARGIN,
                command_timeout=math.ceil(wait),
            )
        outcome = _Outcome(result.exit_code, result.stdout, result.stderr)
        if on_output is not None:
            shown = AnswerCut().feed(outcome.stdout)
            if shown:
                on_output("stdout", shown)
            if outcome.stderr:
                on_output("stderr", outcome.stderr)
        return outcome, bool(result.timed_out)

    async def _worker_missing(self) -> None:
        """The worker this session installed is gone: the pod was replaced (evicted, its node
        lost) and the controller started an empty one under the same Sandbox. Its files and
        memory are gone, so the session is, and the engine restores the thread's snapshot."""
        if self._worker_installed:
            raise SandboxGoneError(
                f"The pod of claim {self.claim} was replaced; its files and memory are gone.",
                provider=PROVIDER_NAME,
            )
        await self.install_worker()

    async def _stdout_of(self, outcome: Any) -> str:
        return str(outcome.stdout)

    async def _upload(self, path: str, data: bytes) -> None:
        async def upload() -> None:
            handle = await self._handle()
            await handle.files.write(path, data, allow_unsafe_paths=True)

        await self._provider._retry("upload", upload, path=path)

    async def _download(self, given: str, path: str, *, limit: int | None = None) -> bytes:
        limit = self.spec.limits.max_file_bytes if limit is None else limit

        async def download() -> bytes:
            handle = await self._handle()
            sink = _Collector()
            try:
                await handle.files.read_to(path, sink, allow_unsafe_paths=True, max_bytes=limit)
            except RuntimeError as exc:
                if "exceeds limit" not in str(exc):
                    raise
                raise InvalidInputError(
                    f"{given} is larger than the {limit}-byte read limit; "
                    "read parts of it with a command instead."
                ) from exc
            return bytes(sink.data)

        try:
            return await self._provider._retry("download", download, path=path)
        except InvalidPathError:
            if not await self.is_alive():
                raise SandboxGoneError(
                    f"The pod of claim {self.claim} is gone.", provider=PROVIDER_NAME
                ) from None
            raise InvalidPathError(f"No such file in the workspace: {given}") from None

    async def is_alive(self) -> bool:
        if self._closed:
            return False
        try:
            handle = await self._handle()
            async with self._provider._errors("sandbox lookup"):
                status, _ = await handle.status()
        except SandboxError:
            return False
        return bool(status == "SandboxReady")

    async def close(self) -> None:
        """Delete the claim (the controller deletes its Sandbox and pod). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._provider.delete_claim(self.claim)
        except SandboxGoneError:
            return


__all__ = ["CAPABILITIES", "KubernetesSession"]
