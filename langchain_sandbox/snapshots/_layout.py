"""What a restore keeps of files besides their contents and modes: modification times, hard
links and holes, and what it says when a provider cannot keep them.

A capture records, per file entry, the ``link`` to the first name of its inode and whether it
was ``sparse`` (`mark_links`, from the listing's inode, link count and block count); a restore
hands the times and holes to a session that `keeps_file_metadata` with its writes
(`metadata_of`), makes the links after their targets are written (`links_to_make`), and
names what did not come back (`layout_notices`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from langchain_sandbox.providers.base import FileInfo, FileMetadata, Session
from langchain_sandbox.snapshots.manifest import FileEntry, Manifest

logger = logging.getLogger(__name__)

_MAX_NAMES_IN_NOTICE = 10


def inode_of(listing: Mapping[str, FileInfo], path: str) -> int:
    """The inode ``listing`` gives ``path`` (0: not listed, or not reported)."""
    info = listing.get(path)
    return 0 if info is None else info.inode


def mark_links(
    files: dict[str, FileEntry], listed: Mapping[str, FileInfo], changed: Iterable[str]
) -> set[str]:
    """Set ``link`` on the entries of ``files`` that share an inode with another (the first
    path of each group, in path order, is the target; its own ``link`` is ``None``), for the
    groups a ``changed`` path belongs to; returns the paths whose entry this changed.

    Linking or unlinking a name changes every other name's link count (and ctime), so a
    listing reports each member of a group that changed; only then is the whole listing
    looked through, so a capture without hard links costs nothing more."""
    inodes = {
        info.inode
        for path in changed
        if (info := listed.get(path)) is not None and info.links > 1 and info.inode
    }
    groups: dict[int, list[str]] = {}
    if inodes:
        for path, info in listed.items():
            if info.inode in inodes and path in files:
                groups.setdefault(info.inode, []).append(path)
    marked: set[str] = set()
    for paths in groups.values():
        paths.sort()
        for path in paths:
            target = None if path == paths[0] else paths[0]
            if files[path].link != target:
                files[path] = replace(files[path], link=target)
                marked.add(path)
    for path in changed:
        entry = files.get(path)
        info = listed.get(path)
        if entry is not None and entry.link is not None and (info is None or info.links < 2):
            files[path] = replace(entry, link=None)
            marked.add(path)
    return marked


def links_to_make(manifest: Manifest, writes: Sequence[str]) -> dict[str, str]:
    """Path -> target of the written files a restore makes as hard links: those whose target
    is a file of the snapshot with the same content (anything else is written as a copy)."""
    links: dict[str, str] = {}
    for path in writes:
        entry = manifest.files[path]
        target = manifest.files.get(entry.link) if entry.link is not None else None
        if target is not None and target.link is None and target.sha256 == entry.sha256:
            links[path] = entry.link  # type: ignore[assignment]
    return links


def metadata_of(manifest: Manifest, files: Iterable[str]) -> dict[str, FileMetadata]:
    """The captured time and holes of each of ``files``, for `Session.write_restored`."""
    return {
        path: FileMetadata(manifest.files[path].mtime_ns, manifest.files[path].sparse)
        for path in files
    }


_UNKEPT_TIMES_SAID: set[str] = set()


def layout_notices(
    session: Session,
    manifest: Manifest,
    writes: Sequence[str],
    now: Mapping[str, FileInfo],
    untimed: Sequence[str],
    unlinked: Sequence[str],
) -> list[str]:
    """What a restore could not keep of the written files' times, hard links and holes.

    A provider that sets no times (see ``Session.keeps_file_metadata``) says so once per
    process in the log, not in every restore's notices: it is a fact of the provider, which
    docs/persistence.md lists. Links and holes it cannot keep are named each time."""
    written = [path for path in writes if path in now]
    notices: list[str] = []
    if session.keeps_file_metadata:
        differ = sorted(
            {*untimed, *(p for p in written if now[p].mtime_ns != manifest.files[p].mtime_ns)}
        )
        if differ:
            notices.append(
                f"Modification times of {len(differ)} file(s) could not be restored (they "
                f"carry the restore's time): {describe_paths(differ)}."
            )
        if unlinked:
            pairs = sorted(f"{p} (a link of {manifest.files[p].link})" for p in unlinked)
            notices.append(
                f"{len(unlinked)} hard link(s) could not be made and came back as separate "
                f"copies: {describe_paths(pairs)}."
            )
        return notices
    if written and session.provider_name not in _UNKEPT_TIMES_SAID:
        _UNKEPT_TIMES_SAID.add(session.provider_name)
        logger.warning(
            "the %s provider does not keep modification times: restored files carry the "
            "restore's time",
            session.provider_name,
        )
    copies = sorted(
        f"{p} (a link of {link})" for p in written if (link := manifest.files[p].link) is not None
    )
    if copies:
        notices.append(
            f"{len(copies)} hard link(s) came back as separate copies (this provider makes no "
            f"hard links): {describe_paths(copies)}."
        )
    dense = sorted(p for p in written if manifest.files[p].sparse)
    if dense:
        notices.append(
            f"{len(dense)} sparse file(s) came back fully allocated (this provider writes no "
            f"holes): {describe_paths(dense)}."
        )
    return notices


def describe_paths(names: Sequence[str]) -> str:
    """The first names of ``names``, joined, and how many more there are."""
    shown = names[:_MAX_NAMES_IN_NOTICE]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def describe_reasons(paths: Mapping[str, str]) -> str:
    """`describe_paths` of ``path (reason)`` for each of ``paths``."""
    return describe_paths([f"{path} ({reason})" for path, reason in paths.items()])


__all__ = [
    "describe_paths",
    "describe_reasons",
    "inode_of",
    "layout_notices",
    "links_to_make",
    "mark_links",
    "metadata_of",
]
