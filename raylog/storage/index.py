"""Index: a file of fixed-width, sorted entries, mmap'd, searched by bisection.

Subclasses (OffsetIndex, TimeIndex) own only their entry layout; this class
owns the file, the mapping, resizing, truncation and the binary search.

An index is never checksummed: it is derived data, and recovery rebuilds it
from the log whenever it cannot be trusted. While a segment is active its
index file is extended to ``max_bytes`` (Kafka: segment.index.bytes) so
appends never remap; on roll and on clean close it is trimmed to its entries,
which is how a reopened index knows its entry count.

Not thread-safe: the segment that owns it serialises access.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path


class Index:
    ENTRY: struct.Struct  # set by subclasses

    def __init__(self, path: Path, base_offset: int, max_bytes: int, writable: bool):
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_bytes // self.entry_size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        self.entries = size // self.entry_size
        self._mm: mmap.mmap | None = None
        self.writable = False
        if writable:
            self.make_writable()
        else:
            self._map(self.entries * self.entry_size)

    def _map(self, length: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if length > 0:
            self._mm = mmap.mmap(self._fd, length)

    def make_writable(self) -> None:
        """Extend the file to its bound so appends never remap."""
        self.max_entries = max(self.max_entries, self.entries)
        os.ftruncate(self._fd, self.max_entries * self.entry_size)
        self._map(self.max_entries * self.entry_size)
        self.writable = True

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def entry(self, n: int) -> tuple:
        return self.ENTRY.unpack_from(self._mm, n * self.entry_size)

    def _append_entry(self, *fields) -> None:
        assert self.writable and not self.is_full, "append to a trimmed or full index"
        self.ENTRY.pack_into(self._mm, self.entries * self.entry_size, *fields)
        self.entries += 1

    def last_entry(self) -> tuple | None:
        return self.entry(self.entries - 1) if self.entries else None

    def _floor_slot(self, key: int, key_of, strict: bool = False) -> int:
        """Slot of the last entry whose key is <= ``key`` (< with ``strict``); -1 if none."""
        lo, hi = 0, self.entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            k = key_of(self.entry(mid))
            if k < key or (k == key and not strict):
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        if count < self.entries:
            if self._mm is not None:
                start = count * self.entry_size
                self._mm[start:self.entries * self.entry_size] = bytes((self.entries - count) * self.entry_size)
            self.entries = count

    def reset(self) -> None:
        self.truncate_entries(0)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def trim(self) -> None:
        """Shrink the file to its entries; the index becomes read-only."""
        length = self.entries * self.entry_size
        if self._mm is not None:
            self._mm.flush()
        self._map(0)
        os.ftruncate(self._fd, length)
        self._map(length)
        self.writable = False

    def sanity_ok(self) -> bool:
        """Entries strictly sorted and none below the base: cheap check of a trimmed index."""
        raise NotImplementedError

    def close(self, trim: bool = True) -> None:
        if self._fd < 0:
            return
        if trim:
            self.trim()
        self._map(0)
        os.close(self._fd)
        self._fd = -1

    def delete(self) -> None:
        self.close(trim=False)
        self.path.unlink(missing_ok=True)

    def rename(self, new_path: Path) -> None:
        os.replace(self.path, new_path)
        self.path = new_path
