"""The file entries of a manifest read from a store, held in columns (issue 26).

A `FileEntry` in a ``dict`` costs about 470 bytes (the entry object, its hex digest as a
``str``, three ``int`` objects and a dict slot), so a 1,000,000-file manifest took 470 MiB to
hold. `CompactFiles` keeps one list of the (sorted) paths and parallel columns instead: the
digests as 32 raw bytes each, sizes, modes and mtimes in typed arrays, packed contents in one
buffer, and the rare hard links and sparse flags by index. That is about 140 bytes a file, most
of it the path's ``str``, which lookups need.

It is a read-only ``Mapping[str, FileEntry]`` in path order, so the code that plans and writes
a restore reads it as it reads a ``dict``: an entry is built when it is asked for, and dropped
after use. A lookup is a binary search of the sorted paths, done in C by `bisect`.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import ItemsView, Iterator, Mapping, ValuesView

from langchain_sandbox.snapshots.manifest import FileEntry

_DIGEST_BYTES = 32


class CompactFiles(Mapping[str, FileEntry]):
    """A read-only path -> `FileEntry` mapping held in columns, in path order. Build it with
    `CompactFilesBuilder`."""

    __slots__ = (
        "_data",
        "_data_at",
        "_digests",
        "_links",
        "_modes",
        "_mtimes",
        "_paths",
        "_sizes",
        "_sparse",
    )

    def __init__(self, builder: CompactFilesBuilder) -> None:
        self._paths = builder.paths
        self._digests = builder.digests
        self._sizes = builder.sizes
        self._modes = builder.modes
        self._mtimes = builder.mtimes
        self._data = builder.data
        self._data_at = builder.data_at
        self._links = builder.links
        self._sparse = builder.sparse

    def _index(self, path: object) -> int:
        if not isinstance(path, str):
            return -1
        at = bisect.bisect_left(self._paths, path)
        return at if at < len(self._paths) and self._paths[at] == path else -1

    def _entry(self, index: int) -> FileEntry:
        start = index * _DIGEST_BYTES
        size = self._sizes[index]
        data_at = self._data_at[index]
        return FileEntry(
            self._digests[start : start + _DIGEST_BYTES].hex(),
            size,
            self._modes[index],
            self._mtimes[index],
            self._links.get(index),
            index in self._sparse,
            None if data_at < 0 else bytes(self._data[data_at : data_at + size]),
        )

    def __getitem__(self, path: str) -> FileEntry:
        index = self._index(path)
        if index < 0:
            raise KeyError(path)
        return self._entry(index)

    def __contains__(self, path: object) -> bool:
        return self._index(path) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"<CompactFiles of {len(self._paths)} files>"

    def items(self) -> ItemsView[str, FileEntry]:
        return _Items(self)

    def values(self) -> ValuesView[FileEntry]:
        return _Values(self)

    def total_bytes(self) -> int:
        """Sum of the sizes, read from the size column."""
        return sum(self._sizes)


class _Items(ItemsView[str, FileEntry]):
    # Walks the columns in order instead of searching for each path, as ItemsView would.
    _mapping: CompactFiles

    def __iter__(self) -> Iterator[tuple[str, FileEntry]]:
        files = self._mapping
        for index, path in enumerate(files._paths):
            yield path, files._entry(index)


class _Values(ValuesView[FileEntry]):
    _mapping: CompactFiles

    def __iter__(self) -> Iterator[FileEntry]:
        files = self._mapping
        return (files._entry(index) for index in range(len(files._paths)))


class CompactFilesBuilder:
    """Collects file entries, in strictly increasing path order (the caller checks it), into
    the columns of a `CompactFiles`."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.digests = bytearray()
        self.sizes = array("q")
        self.modes = array("H")
        self.mtimes = array("q")
        self.data = bytearray()
        self.data_at = array("q")
        self.links: dict[int, str] = {}
        self.sparse: set[int] = set()

    def __len__(self) -> int:
        return len(self.paths)

    def append(self, path: str, entry: FileEntry) -> None:
        """Add ``entry`` at ``path`` (after every path added before)."""
        index = len(self.paths)
        self.paths.append(path)
        self.digests += bytes.fromhex(entry.sha256)
        self.sizes.append(entry.size)
        self.modes.append(entry.mode)
        self.mtimes.append(entry.mtime_ns)
        if entry.data is None:
            self.data_at.append(-1)
        else:
            self.data_at.append(len(self.data))
            self.data += entry.data
        if entry.link is not None:
            self.links[index] = entry.link
        if entry.sparse:
            self.sparse.add(index)

    def build(self) -> CompactFiles:
        """The mapping; the builder is not used again."""
        return CompactFiles(self)


__all__ = ["CompactFiles", "CompactFilesBuilder"]
