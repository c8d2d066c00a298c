"""Segment: one .log file of record batches with its offset and time indexes.

Appends go through ``os.pwritev`` at the end of the data; reads, recovery and
compaction go through an mmap of the file. The active segment's file is
extended (sparse) to ``capacity`` bytes, at least segment_bytes, so the mapping
never has to grow while it is written. DESIGN.md asked the storage bench to pick
the faster append path: here mmap writes ran at 0.7-0.8 GB/s into a sparse or
chunk-fallocated file (a page fault per page; 3.1-3.4 GB/s only with the whole
range fallocated up front, which reserves a full segment of disk per partition),
pwritev at 2.6 GB/s (bench/storage_bench.py). pwritev also stamps offset and
epoch without a copy: the stamped first 16 header bytes and the rest of the
producer's buffer go out as one vector. On roll and on clean close the file is
cut to its used length, so an inactive segment's file size is exactly its data.

Invariants: ``size`` bytes from position 0 are whole, valid batches with
strictly increasing offsets, all >= base_offset; every byte past ``size`` in
the file is zero or a hole (truncation cuts the file, it never leaves stale
batches behind that a later recovery could resurrect).

Not thread-safe: one owner (the PartitionLog) serialises every call.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np

from raylog.config import TopicConfig
from raylog.errors import CorruptRecordError
from raylog.storage import files
from raylog.storage.batch import (
    HEADER_SIZE, LAST_OFFSET_DELTA_POS, LOG_OVERHEAD, MAX_TIMESTAMP_POS, BatchInfo, RecordBatch, peek_length,
)
from raylog.storage.offset_index import OffsetIndex
from raylog.storage.time_index import TimeIndex

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_STAMP = struct.Struct(">qii")
"""base_offset, batch_length, leader_epoch: the first 16 header bytes, rewritten by the leader."""
NO_TIMESTAMP = -1


class Segment:
    """One segment; see the module doc for the file layout and invariants."""

    def __init__(self, directory: Path, base_offset: int, config: TopicConfig):
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.log_path, index_path, time_index_path = files.segment_paths(directory, base_offset)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.file_size = os.fstat(self._fd).st_size
        self.size = self.file_size
        self.capacity = 0
        self._mm: mmap.mmap | None = None
        self.index = OffsetIndex(index_path, base_offset, config.segment_index_bytes, writable=False)
        self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes, writable=False)
        self.active = False
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0

    # --- opening ---------------------------------------------------------------

    def load(self) -> None:
        """Trust a cleanly closed segment: take its size from the file and its tail from the indexes."""
        self._remap(self.size)
        self._load_tail()

    def recover(self) -> int:
        """Validate every batch, cut the file at the first invalid byte, rebuild both indexes.

        Returns the number of bytes cut.
        """
        self._remap(self.file_size)
        self.index.make_writable()
        self.time_index.make_writable()
        self.index.reset()
        self.time_index.reset()
        self._reset_tail()
        pos = 0
        expected_min = self.base_offset
        while pos + HEADER_SIZE <= self.file_size:
            batch = RecordBatch(self._mm, pos)
            try:
                batch.validate(check_payload=False)
            except CorruptRecordError:
                break
            if batch.base_offset < expected_min:
                break
            self._track(batch.info())
            expected_min = batch.next_offset
            pos += batch.size
        cut = self.file_size - pos
        self._cut_file(pos)
        if not self.active:
            self._seal()
            self.index.trim()
            self.time_index.trim()
        return cut

    def activate(self) -> None:
        """Make this the segment appends go to: extend to capacity, map it writable."""
        if self.active:
            return
        self.capacity = max(self.config.segment_bytes, self.size)
        os.ftruncate(self._fd, self.capacity)
        self.file_size = self.capacity
        self._remap(self.capacity)
        self.index.make_writable()
        self.time_index.make_writable()
        self.active = True

    def _remap(self, length: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if length > 0:
            self._mm = mmap.mmap(self._fd, length)

    def _reset_tail(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self._bytes_since_index_entry = 0

    def _load_tail(self) -> None:
        """Derive next_offset and the max timestamp from the indexes plus the batches after them."""
        self._reset_tail()
        tmax = self.time_index.max_timestamp()
        if tmax is not None:
            self.max_timestamp, self.offset_of_max_timestamp = tmax
        if self.size >= HEADER_SIZE:
            self.first_batch_timestamp = self._header_max_timestamp(0)
        idx_offset, pos = self.index.last_offset_position()
        self._bytes_since_index_entry = 0
        while pos + HEADER_SIZE <= self.size:
            base, size = peek_length(self._mm, pos)
            last = base + _INT32.unpack_from(self._mm, pos + LAST_OFFSET_DELTA_POS)[0]
            ts = self._header_max_timestamp(pos)
            if ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = ts, base
            self.next_offset = last + 1
            self._bytes_since_index_entry += size
            pos += size

    def _header_max_timestamp(self, pos: int) -> int:
        return _INT64.unpack_from(self._mm, pos + MAX_TIMESTAMP_POS)[0]

    # --- appending --------------------------------------------------------------

    def fits(self, nbytes: int) -> bool:
        return self.size + nbytes <= self.config.segment_bytes

    def append(self, buf, infos: list[BatchInfo], leader_epoch: int | None = None) -> int:
        """Write validated batches at the end; returns the position written at.

        ``infos`` carry the offsets the batches get. With ``leader_epoch`` the
        leader's offset and epoch replace the producer's in the written bytes
        (both outside the CRC); the producer's buffer itself is never modified.
        """
        assert self.active, "append to an inactive segment"
        n = len(buf)
        position = self.size
        end = position + n
        if end > self.capacity:
            self._grow(end)
        view = memoryview(buf).cast("B")
        if leader_epoch is None:
            parts = [view]
        else:
            parts = []
            for info in infos:
                parts.append(_STAMP.pack(info.base_offset, info.size - LOG_OVERHEAD, leader_epoch))
                parts.append(view[info.position + _STAMP.size:info.position + info.size])
        written = os.pwritev(self._fd, parts, position)
        if written != n:
            raise OSError(f"short write to {self.log_path}: {written} of {n} bytes")
        for info in infos:
            self._track(BatchInfo(position + info.position, info.size, info.base_offset,
                                  info.last_offset, info.max_timestamp, info.record_count))
        return position

    def _grow(self, end: int) -> None:
        """Only an empty segment meets a batch larger than segment_bytes: remap bigger."""
        self.capacity = end
        os.ftruncate(self._fd, self.capacity)
        self.file_size = self.capacity
        self._remap(self.capacity)

    def _track(self, info: BatchInfo) -> None:
        """Account for a batch now at ``info.position``: size, offsets, index entries."""
        if self._bytes_since_index_entry > self.config.index_interval_bytes and not self.index.is_full:
            self.index.append(info.base_offset, info.position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += info.size
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = info.max_timestamp
        if info.max_timestamp > self.max_timestamp:
            self.max_timestamp = info.max_timestamp
            self.offset_of_max_timestamp = info.base_offset
        self.next_offset = info.last_offset + 1
        self.size = info.position + info.size

    @property
    def index_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    # --- reading ----------------------------------------------------------------

    def translate(self, offset: int) -> int | None:
        """Position of the first batch whose last offset is >= ``offset``; None if past the end."""
        if self._mm is None:
            return None
        _, pos = self.index.lookup(offset)
        while pos + HEADER_SIZE <= self.size:
            base, size = peek_length(self._mm, pos)
            if base + _INT32.unpack_from(self._mm, pos + LAST_OFFSET_DELTA_POS)[0] >= offset:
                return pos
            pos += size
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` unless the
        first batch alone is larger (then just that batch), none reaching ``max_offset``."""
        start = self.translate(offset)
        if start is None:
            return b""
        pos = start
        while pos + HEADER_SIZE <= self.size:
            base, size = peek_length(self._mm, pos)
            if max_offset is not None and base + _INT32.unpack_from(self._mm, pos + LAST_OFFSET_DELTA_POS)[0] >= max_offset:
                break
            if pos > start and pos + size - start > max_bytes:
                break
            pos += size
        return self._mm[start:pos]

    def batches(self, start: int = 0):
        """Views of the batches from byte ``start`` (used by compaction and timestamp search)."""
        pos = start
        while pos + HEADER_SIZE <= self.size:
            batch = RecordBatch(self._mm, pos)
            yield batch
            pos += batch.size

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, or None."""
        if self.max_timestamp < timestamp:
            return None
        start = self.translate(self.time_index.lookup_before(timestamp))
        if start is None:
            return None
        for batch in self.batches(start):
            if batch.max_timestamp >= timestamp:
                cols = batch.columns()
                timestamps = batch.timestamps(cols)
                i = int(np.argmax(timestamps >= timestamp))
                return int(batch.offsets(cols)[i]), int(timestamps[i])
        return None

    # --- truncation, flush, close ------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and everything after it; returns bytes cut."""
        pos = self.translate(offset)
        if pos is None:
            return 0
        cut = self.size - pos
        first_removed = peek_length(self._mm, pos)[0]
        self.index.truncate_to(first_removed)
        self.time_index.truncate_to(first_removed)
        self.size = pos
        self._cut_file(pos)
        self._load_tail()
        return cut

    def _cut_file(self, length: int) -> None:
        """Cut the file at ``length`` (dropping stale bytes for good), then restore capacity."""
        self._remap(0)
        os.ftruncate(self._fd, length)
        self.size = length
        self.file_size = length
        if self.active:
            self.active = False
            self.activate()
        else:
            self._remap(length)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()
        self.index.flush()
        self.time_index.flush()
        os.fsync(self._fd)

    def deactivate(self, sync: bool = True) -> None:
        """On roll: final time-index entry, flush, trim files to their used length. With
        ``sync=False`` the data file's fsync is left to ``sync_data`` (from another thread: an
        fsync of a GiB segment takes seconds, and the appender should not wait for it)."""
        if not self.active:
            return
        self._seal()
        if sync:
            self.flush()
        else:
            self.index.flush()
            self.time_index.flush()
        self._remap(0)
        os.ftruncate(self._fd, self.size)
        self.file_size = self.size
        self.capacity = 0
        self.index.trim()
        self.time_index.trim()
        self._remap(self.size)
        self.active = False

    def sync_data(self) -> None:
        """fsync the data file; a segment closed meanwhile (deleted, truncated away) needs none."""
        fd = self._fd
        if fd >= 0:
            try:
                os.fsync(fd)
            except OSError:
                pass

    def _seal(self) -> None:
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def close(self) -> None:
        """Clean close: the files hold exactly the data and trimmed indexes."""
        if self._fd < 0:
            return
        if self.active:
            self._seal()
        self._remap(0)
        os.ftruncate(self._fd, self.size)
        self.index.close(trim=True)
        self.time_index.close(trim=True)
        os.close(self._fd)
        self._fd = -1

    def close_unclean(self) -> None:
        """Release handles without trimming, as a crash would leave the files (tests, errors)."""
        if self._fd < 0:
            return
        self._remap(0)
        self.index.close(trim=False)
        self.time_index.close(trim=False)
        os.close(self._fd)
        self._fd = -1

    def delete(self) -> None:
        """Rename to .deleted (so a crash mid-way is finished by recovery), then unlink."""
        self.close_unclean()
        paths = [self.log_path, self.index.path, self.time_index.path]
        for p in paths:
            if p.exists():
                os.replace(p, p.with_name(p.name + files.DELETED_SUFFIX))
        for p in paths:
            p.with_name(p.name + files.DELETED_SUFFIX).unlink(missing_ok=True)

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def __repr__(self) -> str:
        return f"Segment(base={self.base_offset}, next={self.next_offset}, size={self.size}, active={self.active})"
