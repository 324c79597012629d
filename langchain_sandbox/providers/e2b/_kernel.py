"""What E2B runs in its Jupyter kernel besides the user's code: the variables dump and load and
the change listing, each one code execution calling one named operation of `e2b_ops` from
inside a function (the user's globals keep no name of ours), with the guest modules
(`e2b_ops`, `variables`, `changes` of the guest package) built from their shipped source once per
kernel.
"""

from __future__ import annotations

import base64
import functools
import json
from typing import TYPE_CHECKING, Any

from langchain_sandbox.errors import SandboxError
from langchain_sandbox.providers.base import VariablesDump
from langchain_sandbox.providers.guest import changes as guest_changes
from langchain_sandbox.providers.guest import e2b_ops as guest_e2b_ops
from langchain_sandbox.providers.guest import packer
from langchain_sandbox.providers.guest import variables as kernel_state
from langchain_sandbox.providers.names import E2B as PROVIDER_NAME
from langchain_sandbox.providers.remote import ChangesReply, RemoteSession

if TYPE_CHECKING:
    from langchain_sandbox.providers.e2b.provider import E2BProvider

_MARKER = guest_e2b_ops.MARKER
_CHUNK_BYTES = 4 * 1024 * 1024  # of a variables dump, per line of output or per upload


_OPS_MODULE, _OPS_PACKED = packer.shipped_module(guest_e2b_ops)
# Named as before the guest package: tests and benchmarks tell the capture's cell by it.
_CHANGES_MODULE, _CHANGES_PACKED = packer.shipped_module(guest_changes, "guest_changes")


@functools.cache
def shipped_kernel_state() -> tuple[str, bytes, bytes]:
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


class KernelCalls(RemoteSession):
    """An E2B session's calls into its kernel (mixed into `E2BSession`)."""

    _provider: E2BProvider
    _sandbox: Any
    bundle_file_bytes = _CHUNK_BYTES

    if TYPE_CHECKING:  # `E2BSession`'s

        async def _ready(self, needed: float = 0.0) -> None: ...

        async def _failure(self, exc: BaseException, what: str) -> SandboxError: ...

    async def _ask_changes(
        self, request: dict[str, Any], variables_max_bytes: int | None
    ) -> ChangesReply:
        """One code execution: `e2b_ops.list_changes`, where the guest module keeps its
        last listing for as long as the kernel lives."""
        packed = base64.b64encode(json.dumps(request).encode()).decode()
        dump = (
            ""
            if variables_max_bytes is None
            else f", ks, globals(), {variables_max_bytes!r}, {_CHUNK_BYTES!r}"
        )
        lines = await self._kernel_call(
            f"    ops.list_changes(changes, json.loads(base64.b64decode({packed!r})){dump})\n",
            "list changes",
            kernel_state=variables_max_bytes is not None,
            changes=True,
        )
        # Lines: one per bundled file (a JSON pair), the dump's base64 chunks, the answer.
        *rest, described = lines
        answer = json.loads(described)
        files = [json.loads(line) for line in rest if line.startswith("[")]
        chunks = [line for line in rest if not line.startswith("[")]
        variables = (
            None
            if variables_max_bytes is None or "variables" not in answer
            else _variables_dump(chunks, answer["variables"], variables_max_bytes)
        )
        contents = {path: base64.b64decode(data) for path, data in files}
        return ChangesReply(answer, contents, variables)

    async def _kernel_call(
        self, body: str, what: str, *, kernel_state: bool = True, changes: bool = False
    ) -> list[str]:
        """Run ``body`` in the kernel, inside a function (the user's globals keep no name of
        ours); return what it printed behind the marker, line by line.

        In scope: ``ops``, the `e2b_ops` module of named operations; ``ks``, the
        kernel_state module, with ``kernel_state``; ``changes``, the guest_changes module, with
        ``changes``. Each is built from its source once per kernel
        and kept in ``sys.modules`` (its compressed source travels with every call that needs
        it: the host cannot know whether the kernel was restarted).
        """
        ks = ""
        if kernel_state:
            name, packed, pickler = shipped_kernel_state()
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
            + f"    ops = module({_OPS_MODULE!r}, {_OPS_PACKED!r})\n"
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
            f"    ops.dump_variables(ks, globals(), {max_bytes!r}, {_CHUNK_BYTES!r})\n",
            "dump variables",
        )
        *chunks, described = lines
        return _variables_dump(chunks, json.loads(described), max_bytes)

    async def _load_variables(self, data: bytes) -> dict[str, str]:
        # A large dump goes up in several calls, each adding a chunk to a buffer in the kernel.
        view = memoryview(data)
        chunks = [view[start : start + _CHUNK_BYTES] for start in range(0, len(data), _CHUNK_BYTES)]
        for chunk in chunks[:-1]:
            packed = base64.b64encode(chunk).decode()
            await self._kernel_call(f"    ops.add_chunk(ks, {packed!r})\n", "load variables")
        last = base64.b64encode(chunks[-1] if chunks else b"").decode()
        (answer,) = await self._kernel_call(
            f"    ops.load_variables(ks, globals(), {last!r})\n", "load variables"
        )
        return {str(name): str(why) for name, why in json.loads(answer).items()}
