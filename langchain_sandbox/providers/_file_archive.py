"""Many small files as one tar archive, for a sandbox whose API moves one file per request
(Runloop devboxes, Kubernetes pods): `WorkerSession.write_files` uploads the archive once and the
worker's ``unpack`` operation (`langchain_sandbox.providers.guest.unpack`) writes its members, so
restoring 10,000 files costs a few requests instead of 10,000.

Which files go in an archive (`packed_groups`): those of at most `PACKED_FILE_BYTES`, when there
are at least `MIN_PACKED_FILES` of them. An archive costs one upload and one worker command (two
requests on Kubernetes, three on Runloop, whose command is a start and a long-poll), and the
worker's Python start-up; one upload per file costs one request each, plus one ``mkdir -p``
command when a file is not at the workspace's top. So two files cost about the same either way
and from three on the archive is cheaper. A larger file goes alone: its request is dominated by
its bytes, and packing it would copy it once more on the host and once more on the sandbox's
disk. An archive holds at most `ARCHIVE_BYTES` of data, so a huge call is several archives and
the host's extra copy stays bounded.

The archive is gzip at level 1: a tar member costs a 512-byte header plus its data padded to 512
bytes, so 10,000 files of 100 bytes are a 10 MB tar, which gzip takes to 0.2 MB (52x less). Over
the emulators, where bytes cost nothing, both write 10,000 files in the same time (the gzip's CPU
is lost in the noise of building the tar); over a real network the 10 MB would cost far more
(`benchmarks/README.md`, issue 26, has the figures).
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_sandbox.core.workspace import WORKSPACE_ROOT
from langchain_sandbox.errors import InvalidPathError, SandboxError

PACKED_FILE_BYTES = 1024 * 1024
"""Files larger than this are uploaded alone."""
MIN_PACKED_FILES = 3
"""Fewer small files than this are uploaded one by one (see the module docstring)."""
ARCHIVE_BYTES = 64 * 1024 * 1024
"""The most file data one archive carries (`SnapshotLimits.batch_bytes`' default: a restore's
batch is one archive)."""
THREAD_BYTES = 64 * 1024
"""An archive of more tar bytes than this (about 60 small files) is built in a worker thread:
``tarfile`` takes some 40 µs a member, so 10,000 files would hold the event loop for about
half a second."""
_GZIP_LEVEL = 1


def packed_groups(files: Mapping[str, bytes]) -> tuple[list[list[str]], list[str]]:
    """``(archives, alone)``: the paths to send in each archive (grouped by directory, each
    group at most `ARCHIVE_BYTES` of data) and those to upload one by one."""
    small = [path for path, data in files.items() if len(data) <= PACKED_FILE_BYTES]
    if len(small) < MIN_PACKED_FILES:
        return [], list(files)
    chosen = set(small)
    alone = [path for path in files if path not in chosen]
    # By directory, so the worker makes each directory once (the order of a call's distinct
    # paths does not matter: none is written twice).
    small.sort(key=lambda path: posixpath.split(path))
    return list(_bounded(small, files)), alone


def _bounded(paths: Sequence[str], files: Mapping[str, bytes]) -> Iterator[list[str]]:
    """``paths`` cut into runs of at most `ARCHIVE_BYTES` of data (each file is small)."""
    start, total = 0, 0
    for index, path in enumerate(paths):
        total += len(files[path])
        if total > ARCHIVE_BYTES and index > start:
            yield list(paths[start:index])
            start, total = index, len(files[path])
    if paths:
        yield list(paths[start:])


def tar_bytes(files: Mapping[str, bytes], paths: Sequence[str]) -> int:
    """About how many bytes the uncompressed tar of ``paths`` is (for `THREAD_BYTES`)."""
    return sum(512 + -(-len(files[path]) // 512) * 512 for path in paths)


def pack(files: Mapping[str, bytes], paths: Sequence[str]) -> bytes:
    """The gzip tar of ``paths`` (absolute paths inside the workspace, already resolved), each
    a regular file named relative to the workspace."""
    buffer = io.BytesIO()
    prefix = WORKSPACE_ROOT + "/"
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=_GZIP_LEVEL) as archive:
        for path in paths:
            if not path.startswith(prefix):  # resolve_path keeps every path below the root
                raise InvalidPathError(f"{path!r} is not inside the workspace.")
            data = files[path]
            member = tarfile.TarInfo(path[len(prefix) :])
            member.size = len(data)
            member.mode = 0o644
            archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


_REASONS = {
    "directory": "is a directory",
    "not_regular": "exists and is not a regular file",
    "parent": "has a parent that is not a directory",
    "member": "could not be packed as a regular file",
    "name": "could not be packed under its name",
}


def unpack_error(
    answer: Mapping[str, Any], paths: Sequence[str], noun: str, provider: str
) -> SandboxError | None:
    """The error of the worker's ``unpack`` answer (``None``: every file was written), worded
    by the host from the facts the sandbox sent: the index of the file it refused and why."""
    index, why = answer.get("refused"), answer.get("why")
    if index is None and answer.get("written") == len(paths):
        return None
    if type(index) is not int or not 0 <= index < len(paths):
        return SandboxError(
            f"Writing files in the {noun} failed: its worker wrote "
            f"{answer.get('written')!r} of {len(paths)} and did not say which it refused.",
            provider=provider,
        )
    path = paths[index]
    if isinstance(why, str) and why in _REASONS:
        return InvalidPathError(f"Cannot write {path!r}: it {_REASONS[why]}.", provider=provider)
    reason = "an unknown reason"
    if type(why) is int and why in errno.errorcode:  # not a bool: JSON's true is no errno
        reason = f"[Errno {why}] {os.strerror(int(why))}"
    return SandboxError(f"Writing {path!r} failed in the {noun} ({reason}).", provider=provider)


__all__ = [
    "ARCHIVE_BYTES",
    "MIN_PACKED_FILES",
    "PACKED_FILE_BYTES",
    "THREAD_BYTES",
    "pack",
    "packed_groups",
    "tar_bytes",
    "unpack_error",
]
