"""What a restore has to do (`plan_restore`: what to remove, which files to write, which empty
directories and named pipes to make), and, for a rewind of a live session, what it has to look
at: the paths where the target snapshot can differ from the workspace, found from what the
session already knows, not from every entry.

A session's *head* is the snapshot its workspace was last made equal to (captured, or rewound
to), with that snapshot's manifest parts. A rewind to another snapshot compares the two
manifests part by part by hash: a part both hold lists the same entries, so its files are
skipped without visiting them. The paths left to plan for (the *scope*) are those of the parts
that differ, those the session's change listing reports since the head, the head's files whose
content is not trusted (racy, lost, never written), every workspace path the head does not hold
as a file (directories, symlinks, omitted files), the files whose mode a restore would change,
the hard-linked files and the named pipes. The restore then plans, fetches, writes and restores
modes over the scope only, and updates the session's knowledge for the scope only.

After writing, a rewind that wrote and removed files in a few directories that were already there
lists only those directories, not the whole workspace again (`listed_after`).

Whenever the knowledge cannot be trusted (no head, a store not confirmed recently, a blob found
corrupt, an unreadable part, a one-blob manifest) there is no scope and the restore takes its
full path."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, replace

from langchain_sandbox.providers.base import ChangeListing, FileInfo, Session
from langchain_sandbox.snapshots._layout import inode_of
from langchain_sandbox.snapshots._listing import Listing
from langchain_sandbox.snapshots.manifest import FileEntry, Manifest, ManifestPart

Chunk = tuple[tuple[str, FileEntry], ...]
"""The entries of one manifest part, in path order."""


@dataclass(frozen=True)
class RewindHead:
    """The snapshot a session's workspace was last made equal to, when that is not simply the
    snapshot its knowledge's parts describe (after a rewind, written files have new mtimes).

    Attributes:
        ref: That snapshot.
        chunks: Its manifest parts' entries, by part key.
        untrusted: Its files the session's knowledge holds no entry for (not written, lost).
        unsafe_modes: Its files whose recorded mode is not the one a restore gives (see
            `safe_mode`), so a rewind names them as a full restore does.
    """

    ref: str
    chunks: Mapping[str, Chunk]
    untrusted: frozenset[str] = frozenset()
    unsafe_modes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RewindScope:
    """The part of a rewind that can differ from the workspace.

    Attributes:
        paths: The paths to plan for (see the module docs).
        manifest: The target restricted to ``paths`` (its files there, all its empty
            directories, and the workspace directories in ``paths`` the target still needs),
            what the restore plans, writes and restores modes from.
        index: The target's parts with their entries, by first path.
        chunks: The same by part key.
        new_parts: The keys of the target's parts the head does not hold.
    """

    paths: frozenset[str]
    manifest: Manifest
    index: Mapping[str, tuple[Chunk, ManifestPart]]
    chunks: Mapping[str, Chunk]
    new_parts: frozenset[str]


def part_index(
    manifest: Manifest, held: Mapping[str, Chunk]
) -> dict[str, tuple[Chunk, ManifestPart]]:
    """The parts of a loaded format 2 manifest with the entries each holds, by first path (files
    are in part order: `ManifestRoot.assemble` reads them so). A part in ``held`` (by key) is
    taken from there; only the others' entries are gathered again."""
    items = iter(manifest.files.items())
    index: dict[str, tuple[Chunk, ManifestPart]] = {}
    for part in manifest.parts:
        chunk = held.get(part.sha256)
        if chunk is None:
            chunk = tuple(itertools.islice(items, part.files))
        else:
            # Skipped in C, without building an item per file.
            next(itertools.islice(items, part.files, part.files), None)
        index[chunk[0][0]] = (chunk, part)
    return index


def unconfirmed(scope: RewindScope, entries: Mapping[str, FileEntry]) -> set[str]:
    """The blobs a rewind asks the store about: those of the scope's files, the variables and
    the target's parts the head does not hold. A file outside the scope, or one the session
    already holds with the same content, has a blob the store was confirmed to hold with the
    session's head (while `Known.trusted`), so it is not asked about again. A file packed
    into its manifest part has no blob to ask about."""
    keys = {
        entry.sha256
        for path, entry in scope.manifest.files.items()
        if entry.data is None
        and ((held := entries.get(path)) is None or held.sha256 != entry.sha256)
    }
    if scope.manifest.variables is not None:
        keys.add(scope.manifest.variables.sha256)
    return keys | scope.new_parts


def head_of(
    ref: str,
    parts: Mapping[str, tuple[Chunk, ManifestPart]],
    head: RewindHead | None,
) -> RewindHead | None:
    """The session's head: the one a rewind recorded, or else the snapshot whose parts its
    knowledge holds (a capture's, or a full restore's whose entries equal them)."""
    if head is not None and head.ref == ref:
        return head
    if not parts:
        return None
    return RewindHead(ref, {part.sha256: chunk for chunk, part in parts.values()})


def scope_of(
    head: RewindHead,
    entries: Mapping[str, FileEntry],
    trusted: Set[str],
    target: Manifest,
    current: Listing,
    touched: Set[str],
) -> RewindScope | None:
    """The scope of a rewind from ``head`` to ``target`` (a format 2 manifest read whole), given
    the session's file ``entries`` and ``trusted`` paths, the workspace listing ``current`` and
    the paths changed since the head (``touched``); ``None`` for a manifest without parts."""
    if not target.parts:
        return None
    index = part_index(target, head.chunks)
    chunks = {part.sha256: chunk for chunk, part in index.values()}
    paths: set[str] = set(touched)
    for key, chunk in chunks.items():
        if key not in head.chunks:
            paths.update(path for path, _ in chunk)
    for key, chunk in head.chunks.items():
        if key not in chunks:
            paths.update(path for path, _ in chunk)
    paths |= head.untrusted
    # Files a restore gives another mode than they have (or were recorded with) are looked at
    # as a full restore would: chmod-ed back and named.
    paths |= head.unsafe_modes | current.unsafe_modes
    # Hard links are planned as whole groups (a link is made again when its target is written),
    # and named pipes are few.
    paths |= current.linked
    paths.update(target.fifos)
    paths |= entries.keys() - trusted
    paths |= current.entries.keys() - entries.keys()
    paths.update(target.dirs)
    # A workspace directory in the scope stays if the target holds anything below it (the
    # target's paths are sorted, so those below it follow its name and a slash).
    names = list(target.files)
    needed_dirs = tuple(
        path
        for path in paths
        if (info := current.entries.get(path)) is not None
        and info.kind == "dir"
        and path not in target.dirs
        and _holds_below(names, target.dirs, path)
    )
    files = {path: target.files[path] for path in sorted(paths) if path in target.files}
    manifest = replace(target, files=files, dirs=(*target.dirs, *needed_dirs), parts=())
    new_parts = frozenset(chunks.keys() - head.chunks.keys())
    return RewindScope(frozenset(paths), manifest, index, chunks, new_parts)


def _holds_below(names: list[str], dirs: tuple[str, ...], path: str) -> bool:
    prefix = path + "/"
    at = bisect.bisect_left(names, prefix)
    if at < len(names) and names[at].startswith(prefix):
        return True
    return any(d == path or d.startswith(prefix) for d in dirs)


def rewound_entries(
    entries: Mapping[str, FileEntry], scope: RewindScope, now: Mapping[str, FileEntry]
) -> dict[str, FileEntry]:
    """The session's file entries after a rewind: ``entries`` outside the scope as they were,
    and inside it the files now trusted (``now``), in path order."""
    result = dict(entries)
    for path in scope.paths - now.keys():
        result.pop(path, None)
    # Replacing an entry keeps its place; only a path new to the entries breaks the order.
    added = any(path not in result for path in now)
    result.update(now)
    return dict(sorted(result.items())) if added else result


def rewound_parts(
    entries: Mapping[str, FileEntry], had_parts: bool, scope: RewindScope
) -> Mapping[str, tuple[Chunk, ManifestPart]]:
    """The target's parts as the session's knowledge may keep them: all of them when the
    knowledge held its head's parts and every entry of the scope equals the target's (nothing
    was written with a new mtime), else none (a capture then encodes every part again)."""
    if not had_parts:
        return {}
    target = scope.manifest.files
    for path in scope.paths:
        if entries.get(path) != target.get(path):
            return {}
    return scope.index


async def relist(session: Session, before: Listing, max_file: int) -> tuple[Listing, set[str]]:
    """``before`` completed with what changed in ``session``'s workspace since it was listed
    (the whole listing when ``before`` is empty), and the paths that changed."""
    changes = await session.list_changes(before.entries, max_bytes=0, since=before.cursor)
    touched = {info.path for info in changes.changed}.union(changes.gone)
    return before.apply(changes, max_file)[0], touched


_MAX_LISTED_DIRS = 16
"""Most directories a rewind lists one by one after writing; past it, it relists the workspace."""


async def listed_after(
    session: Session,
    current: Listing,
    scope: RewindScope | None,
    changed: list[str],
    max_file: int,
) -> Listing:
    """The workspace listing after a restore wrote or removed the ``changed`` paths, from
    ``current`` (the listing it planned from). A rewind that touched files only, in at most
    `_MAX_LISTED_DIRS` directories that were there already, lists those directories; anything
    else relists the workspace through its change listing. The cursor stays ``current``'s, from
    before the writes, so the next change listing still looks at every path written since."""
    parents = {path.rpartition("/")[0] for path in changed}
    entries = current.entries
    targeted = (
        scope is not None
        and len(parents) <= _MAX_LISTED_DIRS
        and all((info := entries.get(path)) is None or info.kind != "dir" for path in changed)
        and all(not parent or _is_dir(entries, parent) for parent in parents)
    )
    if not targeted:
        return (await relist(session, current, max_file))[0]
    listed: dict[str, FileInfo] = {}
    for parent in sorted(parents):
        for info in await session.list_files(parent or "."):
            listed[info.path] = info
    changes = ChangeListing(
        changed=tuple(info for info in listed.values() if entries.get(info.path) != info),
        gone=tuple(path for path in changed if path in entries and path not in listed),
        cursor=current.cursor,
    )
    return current.apply(changes, max_file)[0]


def _is_dir(entries: Mapping[str, FileInfo], path: str) -> bool:
    info = entries.get(path)
    return info is not None and info.kind == "dir"


def plan_restore(
    manifest: Manifest,
    listing: Mapping[str, FileInfo],
    unchanged: Callable[[FileInfo, FileEntry], bool],
) -> tuple[list[str], list[str], list[str]]:
    """What to remove, which files to write and which empty directories to create.

    Everything in the workspace that the snapshot does not have is removed, and so is anything of
    the wrong kind (a directory where the snapshot has a file, a file where it has a directory,
    any symlink), so no write can land on or through something the sandbox left there.
    """
    wanted_dirs = set(manifest.dirs)
    for path in [*manifest.files, *manifest.dirs, *manifest.fifos]:
        parent = path.rpartition("/")[0]
        while parent and parent not in wanted_dirs:
            wanted_dirs.add(parent)
            parent = parent.rpartition("/")[0]
    current = listing
    wanted_fifos = set(manifest.fifos)
    doomed: set[str] = set()
    for path, info in current.items():
        keep = (
            (info.kind == "dir" and path in wanted_dirs)
            or (info.kind == "file" and path in manifest.files)
            or (info.kind == "fifo" and path in wanted_fifos)
        )
        if not keep:
            doomed.add(path)
    removals = sorted(path for path in doomed if not has_ancestor_in(path, doomed))
    writes = [
        path
        for path, entry in manifest.files.items()
        if path in doomed
        or (existing := current.get(path)) is None
        or has_ancestor_in(path, doomed)
        or not unchanged(existing, entry)
    ]
    written = set(writes)
    # A hard link whose target is written, or that is not a link of its target now, is made
    # again (a provider that lists no inodes lists 0: its copies are left as they are).
    writes += [
        path
        for path, entry in manifest.files.items()
        if path not in written
        and entry.link is not None
        and (entry.link in written or inode_of(current, path) != inode_of(current, entry.link))
    ]
    # A file written in place would change every other name of its inode: it is replaced.
    doomed_links = {
        path for path in writes if path not in doomed and getattr(current.get(path), "links", 1) > 1
    }
    removals += sorted(path for path in doomed_links if not has_ancestor_in(path, doomed))
    make_dirs = [
        path
        for path in sorted(manifest.dirs)
        if path in doomed or path not in current or has_ancestor_in(path, doomed)
    ]
    make_dirs += [
        path
        for path in sorted(manifest.fifos)
        if path in doomed or path not in current or has_ancestor_in(path, doomed)
    ]
    return removals, writes, make_dirs


def has_ancestor_in(path: str, paths: set[str]) -> bool:
    parent = path.rpartition("/")[0]
    while parent:
        if parent in paths:
            return True
        parent = parent.rpartition("/")[0]
    return False


__all__ = [
    "RewindHead",
    "RewindScope",
    "has_ancestor_in",
    "head_of",
    "listed_after",
    "part_index",
    "plan_restore",
    "relist",
    "rewound_entries",
    "rewound_parts",
    "scope_of",
    "unconfirmed",
]
