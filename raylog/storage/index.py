"""Index: a file of fixed-width, sorted entries, mmap'd, searched by bisection.

Subclasses (OffsetIndex, TimeIndex) own only their entry layout; this class
owns the file, the mapping, resizing, truncation and the binary search.

An index is never checksummed: it is derived data, and recovery rebuilds it
from the log whenever it cannot be trusted. While a segment is active its
index file is extended to ``max_bytes`` (Kafka: segment.index.bytes) so
appends never remap; on roll and on clean close it is trimmed to its entries,
which is how a reopened index knows its entry count.

The extended file is sparse, and a store into a page of a shared mapping that
has no disk block behind it, on a full filesystem, kills the process with
SIGBUS instead of failing. So disk space is allocated (``posix_fallocate``)
ahead of the entries in ``ALLOCATION_BYTES`` steps, and every store lands in
allocated space; a full disk surfaces as OSError(ENOSPC) from ``reserve`` or
``_append_entry``, before anything changed. Removed entries are dropped by
cutting the file and extending it again, never by storing zeros, which would
allocate the whole range.

Not thread-safe: the segment that owns it serialises access.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from raylog.storage import files


ALLOCATION_BYTES = 16 * 1024
"""Disk space allocated ahead of an active index's entries per step: 2,048 offset-index entries, 8 MiB
of log at the default index_interval_bytes (4096), so one posix_fallocate call per 8 MiB appended; an
active segment holds at most this much unused space per index."""


class Index:
    ENTRY: struct.Struct  # set by subclasses

    def __init__(self, path: Path, base_offset: int, max_bytes: int, writable: bool):
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_bytes // self.entry_size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, files.FILE_MODE)
        size = os.fstat(self._fd).st_size
        self.entries = size // self.entry_size
        self._mm: mmap.mmap | None = None
        self._allocated = 0
        """Bytes from 0 known to have disk space behind them: stores below it cannot fault."""
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
        """Extend the file (sparse) to its bound so appends never remap."""
        self.max_entries = max(self.max_entries, self.entries)
        os.ftruncate(self._fd, self.max_entries * self.entry_size)
        self._map(self.max_entries * self.entry_size)
        # Entries already in the file were written, so their blocks exist (an untrimmed index left
        # by a crash is reset by recovery before anything is stored in it).
        self._allocated = self.entries * self.entry_size
        self.writable = True

    def reserve(self, count: int) -> None:
        """Allocate disk space for ``count`` more entries (as many as fit), so appending them cannot
        fail or fault; raises OSError (ENOSPC) with nothing changed."""
        end = min(self.entries + count, self.max_entries) * self.entry_size
        if end > self._allocated:
            self._allocate(end)

    def _allocate(self, end: int) -> None:
        limit = self.max_entries * self.entry_size
        stop = min(limit, -(-end // ALLOCATION_BYTES) * ALLOCATION_BYTES)
        os.posix_fallocate(self._fd, self._allocated, stop - self._allocated)
        self._allocated = stop

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def entry(self, n: int) -> tuple:
        return self.ENTRY.unpack_from(self._mm, n * self.entry_size)

    def _append_entry(self, *fields) -> None:
        assert self.writable and not self.is_full, "append to a trimmed or full index"
        position = self.entries * self.entry_size
        if position + self.entry_size > self._allocated:
            self._allocate(position + self.entry_size)
        self.ENTRY.pack_into(self._mm, position, *fields)
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
        """Keep the first ``count`` entries; the space after them reads as zeros."""
        if count < self.entries:
            os.ftruncate(self._fd, count * self.entry_size)
            if self.writable:
                os.ftruncate(self._fd, self.max_entries * self.entry_size)
            else:
                self._map(count * self.entry_size)
            self.entries = count
            self._allocated = min(self._allocated, count * self.entry_size)

    def reset(self) -> None:
        self.truncate_entries(0)

    def sync(self) -> None:
        """fsync the file (its mapped pages included); an index closed meanwhile needs none."""
        fd = self._fd
        if fd >= 0:
            os.fsync(fd)

    def trim(self) -> None:
        """Shrink the file to its entries; the index becomes read-only."""
        length = self.entries * self.entry_size
        if self._mm is not None:
            self._mm.flush()
        self._map(0)
        os.ftruncate(self._fd, length)
        self._map(length)
        self._allocated = length
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
