"""What a capture lists of a workspace, split the way a snapshot uses it.

A `Listing` is kept per live session by the snapshotter, and the next capture applies the
provider's [`ChangeListing`][langchain_sandbox.ChangeListing] to it: the path rules, the
limits and the totals are worked out again only for the entries that changed, so a capture of a
10,000-file workspace in which one file changed does Python work for one file, not 10,000.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from langchain_sandbox.core.workspace import MAX_PATH_DEPTH
from langchain_sandbox.errors import UnsafeArchiveError
from langchain_sandbox.providers.base import ChangeListing, FileInfo
from langchain_sandbox.snapshots.manifest_parsing import check_relative_path
from langchain_sandbox.snapshots.store import digest


@dataclass(frozen=True)
class Listing:
    """A workspace listing split into what a snapshot captures, the directories, and the paths
    it leaves out.

    Attributes:
        entries: Every listed entry, by path.
        files: The regular files a snapshot captures (within the path rules and the file limit).
        dirs: The directories a snapshot keeps (empty ones are recreated on restore).
        fifos: The named pipes a snapshot keeps (recreated empty on restore).
        omitted: Key -> why a listed path is not captured: symlinks, names the manifest cannot
            hold (keyed by a printable stand-in), directories at the depth limit, files over the
            file limit.
        omitted_as: path -> its key in ``omitted``.
        file_bytes: The sum of ``files``' sizes.
        unsafe_modes: The ``files`` whose mode a restore would not give back (see
            `safe_mode`): a rewind must look at them even where nothing else changed.
        linked: The ``files`` with more than one name (hard links), which a rewind also looks
            at as a group.
        cursor: The provider's `cursor`
            of the listing this one was completed with.
    """

    entries: Mapping[str, FileInfo] = field(default_factory=dict)
    files: Mapping[str, FileInfo] = field(default_factory=dict)
    dirs: frozenset[str] = frozenset()
    omitted: Mapping[str, str] = field(default_factory=dict)
    omitted_as: Mapping[str, str] = field(default_factory=dict)
    file_bytes: int = 0
    cursor: object | None = None
    fifos: frozenset[str] = frozenset()
    unsafe_modes: frozenset[str] = frozenset()
    linked: frozenset[str] = frozenset()

    def apply(self, changes: ChangeListing, max_file: int) -> tuple[Listing, bool]:
        """This listing with ``changes`` applied, and whether any path appeared, went or changed
        kind (when not, the set of paths, and so the manifest's shape, is as before)."""
        if not changes.changed and not changes.gone:
            return dataclasses.replace(self, cursor=changes.cursor), False
        entries = dict(self.entries)
        files = dict(self.files)
        dirs = set(self.dirs)
        fifos = set(self.fifos)
        omitted = dict(self.omitted)
        omitted_as = dict(self.omitted_as)
        file_bytes = self.file_bytes
        unsafe_modes = set(self.unsafe_modes)
        linked = set(self.linked)
        reshaped = bool(changes.gone)

        def drop(path: str) -> FileInfo | None:
            nonlocal file_bytes
            old = entries.pop(path, None)
            if (captured := files.pop(path, None)) is not None:
                file_bytes -= captured.size
            dirs.discard(path)
            fifos.discard(path)
            unsafe_modes.discard(path)
            linked.discard(path)
            if (key := omitted_as.pop(path, None)) is not None:
                omitted.pop(key, None)
            return old

        for path in changes.gone:
            drop(path)
        # Path order, so names that escape to the same printable key are told apart the same
        # way whatever order the provider listed them in.
        for info in sorted(changes.changed, key=_path_of):
            path = info.path
            old = drop(path)
            reshaped = reshaped or old is None or old.kind != info.kind
            entries[path] = info
            if portable(path):
                key, reason = path, _left_out(info, max_file)
            else:
                key, reason = _printable(path, omitted)
            if reason is not None:
                omitted[key] = reason
                omitted_as[path] = key
            elif info.kind == "dir":
                dirs.add(path)
            elif info.kind == "fifo":
                fifos.add(path)
            else:
                files[path] = info
                file_bytes += info.size
                if info.mode & 0o7777 != safe_mode(info.mode):
                    unsafe_modes.add(path)
                if info.links > 1:
                    linked.add(path)
        listing = Listing(
            entries,
            files,
            frozenset(dirs),
            omitted,
            omitted_as,
            file_bytes,
            changes.cursor,
            frozenset(fifos),
            frozenset(unsafe_modes),
            frozenset(linked),
        )
        return listing, reshaped


EMPTY = Listing()
"""The listing of a workspace no capture has seen: every entry of the first one is a change."""


def _path_of(info: FileInfo) -> str:
    return info.path


def _left_out(info: FileInfo, max_file: int) -> str | None:
    """Why ``info`` is not captured, for the reasons that do not depend on its name."""
    if info.kind == "symlink":
        return "symlink"
    if info.kind == "dir":
        if info.path.count("/") + 1 >= MAX_PATH_DEPTH:
            # Listings stop at this depth: what lies below was not seen, so it is not kept.
            return f"its contents lie deeper than {MAX_PATH_DEPTH} directories"
        return None
    if info.size > max_file:
        return f"{info.size} bytes, over the {max_file}-byte file limit"
    return None


def safe_mode(mode: int) -> int:
    """The mode a restored file gets: no setuid/setgid/sticky, no group or other write, exec
    bits only if the owner had exec, and always readable and writable by the owner."""
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


def portable(path: str) -> bool:
    """Whether a manifest can hold ``path`` (the snapshot path rules)."""
    try:
        check_relative_path(path)
    except UnsafeArchiveError:
        return False
    return True


def _printable(path: str, omitted: Mapping[str, str]) -> tuple[str, str]:
    """A key and a reason for a path the manifest cannot hold (the key must pass the manifest's
    rules): the name with the characters the rules refuse written as ``%XX`` (``%`` too, so two
    names never share a key), so the model can tell which file it is; a hash-named stand-in only
    when even that breaks the rules (a name too long, too deep)."""
    why = "breaks the snapshot path rules"
    try:
        check_relative_path(path)
    except UnsafeArchiveError as exc:
        why = (
            str(exc)
            .removeprefix(f"Snapshot path {path!r} ")
            .removesuffix("; refusing to restore it.")
        )
    escaped = "".join(f"%{ord(char):02X}" if char in "%\\\x00" else char for char in path)
    if portable(escaped) and escaped not in omitted:
        return escaped, f"name cannot be restored portably: it {why}; shown with %XX escapes"
    stand_in = "unportable-name-" + digest(path.encode("utf-8", "surrogateescape"))[:16]
    return stand_in, f"name cannot be restored portably: it {why}; it begins {path[:60]!r}"
