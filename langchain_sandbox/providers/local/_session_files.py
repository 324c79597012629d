"""A local session's files, on the host: every operation goes through the session's
`HostWorkspace` (``_files.py``), which never follows a symlink, after the path rules of
`resolve_path`, and every write is checked against the workspace quota first. A base of
`LocalSession`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from langchain_sandbox.core.workspace import resolve_path
from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.providers.base import ChangeListing, FileInfo, FileMetadata
from langchain_sandbox.providers.local._files import HostWorkspace
from langchain_sandbox.providers.local._quota import WorkspaceQuota


class LocalSessionFiles:
    """Writing, reading, listing and removing files of a local session's workspace."""

    _files: HostWorkspace
    _quota: WorkspaceQuota

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

    async def write_files(self, files: Mapping[str, bytes]) -> None:
        self._check_open()
        for path, data in files.items():
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise InvalidInputError(f"Content of {path!r} must be bytes.")
            resolve_path(path)
        await self._quota.check_write(sum(len(data) for data in files.values()))
        await asyncio.to_thread(
            self._files.write_many, {path: bytes(data) for path, data in files.items()}
        )

    keeps_file_metadata = True

    async def write_restored(
        self, files: Mapping[str, bytes], metadata: Mapping[str, FileMetadata]
    ) -> list[str]:
        """The host writes the files and sets each one's time through the descriptor it wrote
        with (no process in the sandbox, nothing to follow)."""
        self._check_open()
        for path in files:
            resolve_path(path)
        await self._quota.check_write(sum(len(data) for data in files.values()))
        return await asyncio.to_thread(self._files.write_many, dict(files), metadata)

    async def make_fifos(self, paths: Sequence[str]) -> list[str]:
        self._check_open()
        for path in paths:
            resolve_path(path)
        return await asyncio.to_thread(self._files.make_fifos, list(paths))

    async def link_files(self, links: Mapping[str, str]) -> list[str]:
        self._check_open()
        for path, target in links.items():
            resolve_path(path)
            resolve_path(target)
        return await asyncio.to_thread(self._files.link_many, dict(links))

    async def read_files(self, paths: Sequence[str]) -> dict[str, bytes]:
        self._check_open()
        return await asyncio.to_thread(self._files.read_many, list(paths))

    async def list_files(self, path: str = ".", *, recursive: bool = False) -> list[FileInfo]:
        self._check_open()
        return await asyncio.to_thread(self._files.listdir, path, recursive=recursive)

    async def list_changes(
        self,
        known: Mapping[str, FileInfo],
        *,
        max_bytes: int,
        variables_max_bytes: int | None = None,
        since: object | None = None,
    ) -> ChangeListing:
        """One walk of the workspace on the host: one ``lstat`` per entry and a ``FileInfo``
        only for what changed. No contents: reading the files is as cheap after the listing, and
        then waits out the snapshotter's racy window (the interpreter is not involved either, so
        the variables dump runs beside the walk)."""
        self._check_open()
        return await asyncio.to_thread(self._files.changes, known, since)

    async def remove_files(self, paths: Sequence[str]) -> None:
        self._check_open()
        for path in paths:
            resolve_path(path)
        await asyncio.to_thread(self._remove_all, list(paths))
        self._quota.forget()

    def _remove_all(self, paths: Sequence[str]) -> None:
        for path in paths:
            self._files.remove(path)


__all__ = ["LocalSessionFiles"]
