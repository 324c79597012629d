"""What differs between a sandbox's workspace and a listing the host holds, worked out inside the
sandbox (stdlib only, Python >= 3.8), so a capture costs one request whatever the workspace's size.

The remote providers ship this code into their sandboxes: Runloop's worker carries it inline
(`langchain_sandbox.providers.guest.packer.shipped_part` cuts everything above the
``<shipped>`` marker), E2B's kernel builds it as a module from its source once per kernel. Both
then call `answer_changes` (the token protocol `RemoteSession.list_changes` speaks) with the
listing the host last knew, and answer only what changed.

A listing entry is ``[size, mtime_ns, mode, kind]``, exactly the fields of
[`FileInfo`][langchain_sandbox.FileInfo] after its path, in the form the provider's own
``list_files`` reports them (``mtime_unit_ns`` and ``mode_mask`` say how coarse that form is), so
an unchanged file compares equal and costs nothing. FIFOs, sockets and devices are never listed:
they have no content to keep, and opening one for reading could block the capture.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Below this line, the code the sandboxes run (`packer.shipped_part`: inlined into a script, or
# built as a module with the ``__future__`` import back): annotations are never evaluated there
# (they stay strings), so it runs on Python 3.8.
# <shipped>
import binascii as _binascii  # noqa: E402 (the shipped code starts here)
import os as _os  # noqa: E402
import stat as _stat  # noqa: E402


def listed_mtime_ns(mtime_ns: int, unit_ns: int) -> int:
    """``mtime_ns`` rounded to ``unit_ns`` the way the provider's listing rounds it (E2B's SDK
    turns envd's nanoseconds into a datetime with ``round(nanos / 1000)`` microseconds)."""
    if unit_ns == 1:
        return mtime_ns
    seconds, nanos = divmod(mtime_ns, 1_000_000_000)
    return seconds * 1_000_000_000 + round(nanos / unit_ns) * unit_ns


def signature(info: _os.stat_result, mtime_unit_ns: int, mode_mask: int) -> list[Any] | None:
    """The listing entry of a stat (``None`` for what is never listed: FIFOs, sockets, devices)."""
    mode = info.st_mode
    if _stat.S_ISDIR(mode):
        kind, size = "dir", 0
    elif _stat.S_ISLNK(mode):
        kind, size = "symlink", info.st_size
    elif _stat.S_ISREG(mode):
        kind, size = "file", info.st_size
    else:
        return None
    return [size, listed_mtime_ns(info.st_mtime_ns, mtime_unit_ns), mode & mode_mask, kind]


def scan(root: str, mtime_unit_ns: int = 1, mode_mask: int = 0o7777) -> dict[str, list[Any]]:
    """Every entry under ``root``, by workspace-relative POSIX path; symlinks are not followed."""
    entries: dict[str, list[Any]] = {}
    skip = len(root.rstrip("/")) + 1
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            children = _os.scandir(directory)
        except OSError:
            continue  # gone or unreadable since its parent was listed
        with children:
            for child in children:
                try:
                    entry = signature(child.stat(follow_symlinks=False), mtime_unit_ns, mode_mask)
                except OSError:
                    continue
                if entry is None:
                    continue
                entries[child.path[skip:]] = entry
                if entry[3] == "dir":
                    pending.append(child.path)
    return entries


def _read_regular(
    path: str, limit: int, mtime_unit_ns: int, mode_mask: int
) -> tuple[bytes | None, list[Any] | None]:
    """``(contents, entry as it is now)``: contents only of a regular file that did not change
    while it was read; the entry is ``None`` when the path is gone or no longer listable.

    Opened without blocking and without following a symlink, so a FIFO or a link swapped in
    since the listing cannot hang the read or lead out of the workspace.
    """
    flags = _os.O_RDONLY | _os.O_NONBLOCK | getattr(_os, "O_NOFOLLOW", 0)
    try:
        fd = _os.open(path, flags | getattr(_os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, None
    except OSError:
        try:  # a symlink now, or unreadable: listed as it is, its content left to the host
            return None, signature(_os.lstat(path), mtime_unit_ns, mode_mask)
        except OSError:
            return None, None
    try:
        before = _os.fstat(fd)
        if not _stat.S_ISREG(before.st_mode):
            return None, signature(before, mtime_unit_ns, mode_mask)
        chunks = []
        size = 0
        while size <= limit:
            chunk = _os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        after = _os.fstat(fd)
    finally:
        _os.close(fd)
    now = signature(after, mtime_unit_ns, mode_mask)
    steady = (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)
    if not steady or size != after.st_size:
        return None, now  # changed while read: listed as it is now, read again by the host
    return b"".join(chunks), now


def changes(
    root: str,
    known: dict[str, list[Any]],
    *,
    max_bytes: int,
    max_file_bytes: int,
    mtime_unit_ns: int = 1,
    mode_mask: int = 0o7777,
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """``(answer, listing)``: the answer says how the workspace under ``root`` differs from
    ``known`` (``changed`` entries as ``[path, size, mtime_ns, mode, kind]``, ``gone`` paths, and
    ``contents``: base64 of changed regular files, smallest first while they fit ``max_bytes``,
    each at most ``max_file_bytes``); ``listing`` is the whole workspace as the answer leaves it,
    for the caller to keep as the next ``known``.

    A file read is listed with its stat after the read; one that vanished before it is gone.
    Raises ``FileNotFoundError`` when ``root`` is not a directory (rather than answer that
    everything is gone).
    """
    if not _os.path.isdir(root):
        raise FileNotFoundError(root)
    listing = scan(root, mtime_unit_ns, mode_mask)
    changed = [path for path, entry in listing.items() if known.get(path) != entry]
    wanted = sorted(
        (path for path in changed if listing[path][3] == "file"),
        key=lambda path: listing[path][0],
    )
    contents: dict[str, str] = {}
    room = max_bytes
    for path in wanted:
        size = listing[path][0]
        if size > max_file_bytes or size > room:
            break
        data, now = _read_regular(
            _os.path.join(root, path), max_file_bytes, mtime_unit_ns, mode_mask
        )
        if now is None:
            del listing[path]
            continue
        listing[path] = now
        if data is not None:
            contents[path] = _binascii.b2a_base64(data, newline=False).decode()
            room -= len(data)
    # A file read may have turned back into what ``known`` holds, or vanished meanwhile.
    changed = [path for path in changed if path in listing and known.get(path) != listing[path]]
    answer = {
        "changed": [[path, *listing[path]] for path in changed],
        "gone": [path for path in known if path not in listing],
        "contents": {path: contents[path] for path in changed if path in contents},
    }
    return answer, listing


def answer_changes(
    request: dict[str, Any],
    remembered: Callable[[], tuple[str, dict[str, list[Any]]] | None],
    remember: Callable[[tuple[str, dict[str, list[Any]]]], None],
) -> dict[str, Any]:
    """The guest's side of the change-listing protocol, the same in every sandbox.

    ``request`` (as `langchain_sandbox.providers.remote.RemoteSession.list_changes` sends it)
    has the workspace ``path``, the caps and listing form of `changes`, and either ``known``, the
    host's listing itself, or ``since``, the token of the listing this guest answered last. The
    answer is `changes`' plus a fresh ``token`` naming the listing it leaves (kept with
    ``remember``, found again with ``remembered``); ``{"stale": True}`` when ``since`` names a
    listing this guest no longer has (a new kernel, a restored disk: the host then sends the
    listing), ``{"missing": path}`` when the workspace is not a directory.
    """
    known = request.get("known")
    if known is None:
        last = remembered()
        if last is None or last[0] != request.get("since"):
            return {"stale": True}
        known = last[1]
    try:
        answer, listing = changes(
            request["path"],
            known,
            max_bytes=int(request["max_bytes"]),
            max_file_bytes=int(request["max_file_bytes"]),
            mtime_unit_ns=int(request.get("mtime_unit_ns", 1)),
            mode_mask=int(request.get("mode_mask", 0o7777)),
        )
    except FileNotFoundError as exc:
        return {"missing": str(exc)}
    answer["token"] = _binascii.hexlify(_os.urandom(8)).decode()
    remember((answer["token"], listing))
    return answer
