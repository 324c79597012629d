"""E2B's files through envd's file API, always inside the workspace, and envd's listing entries
in exactly the form the kernel's change listing gives them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_sandbox.core.workspace import WORKSPACE_ROOT, relative_path, resolve_path
from langchain_sandbox.errors import InvalidInputError, InvalidPathError
from langchain_sandbox.providers.base import FileInfo
from langchain_sandbox.providers.remote import RemoteSession

if TYPE_CHECKING:
    from langchain_sandbox.providers.e2b.provider import E2BProvider

_LIST_DEPTH = 64  # "recursive" listing depth; envd needs a number
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_LISTED_MTIME_UNIT_NS = 1000
_LISTED_MODE_MASK = 0o777


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


class FileCalls(RemoteSession):
    """An E2B session's file calls (mixed into `E2BSession`)."""

    _provider: E2BProvider
    _sandbox: Any
    # envd's listing rounds mtimes to microseconds and reports Go's FileMode.Perm().
    listing_form = {"mtime_unit_ns": _LISTED_MTIME_UNIT_NS, "mode_mask": _LISTED_MODE_MASK}

    if TYPE_CHECKING:  # `E2BSession`'s

        async def _ready(self, needed: float = 0.0) -> None: ...

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
