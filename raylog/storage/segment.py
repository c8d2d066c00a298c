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
batches behind that a later recovery could resurrect; a write that failed,
e.g. on a full disk, is cut away the same way).

Durability: a segment's files are created, activated and their directory
fsynced in ``create``; on roll (``deactivate``) and clean close the files are
trimmed first and fsynced after, so the fsync covers their final sizes too.
``sync_data`` is the one method another thread may call (the replica's
fsync of a rolled segment); it only fsyncs and records which roll it covered.

Not thread-safe: one owner (the PartitionLog) serialises every call.
"""

from __future__ import annotations

import errno
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
from raylog.storage.page_cache import DropBehind
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
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, files.FILE_MODE)
        self.file_size = os.fstat(self._fd).st_size
        self.size = self.file_size
        self.capacity = 0
        self._mm: mmap.mmap | None = None
        try:
            self.index = OffsetIndex(index_path, base_offset, config.segment_index_bytes, writable=False)
            self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes, writable=False)
        except BaseException:
            os.close(self._fd)
            if hasattr(self, "index"):
                self.index.close(trim=False)
            raise
        self.active = False
        self._rolls = 0
        self._synced_rolls = -1
        """``_rolls`` as the last successful ``sync`` began: equal means the rolled data is durable."""
        self.sync_failed = False
        """An fsync of these files failed once. Linux may drop the dirty pages of a failed fsync and
        report the next one a success (PostgreSQL's "fsyncgate"), so no later fsync vouches for this
        segment: only a recovery scan after a restart does (Kafka takes the log directory offline)."""
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        self._drop_behind: DropBehind | None = None

    # --- opening ---------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: TopicConfig) -> "Segment":
        """A new, active segment at ``base_offset`` whose files are durably in ``directory``.

        Raises OSError (ENOSPC when the disk is full) and leaves no file behind.
        """
        seg = None
        try:
            seg = cls(directory, base_offset, config)
            seg.activate()
            files.fsync_dir(directory)
        except OSError:
            if seg is not None:
                seg.close_unclean()
            for path in files.segment_paths(directory, base_offset):
                path.unlink(missing_ok=True)
            raise
        return seg

    def load(self) -> bool:
        """Trust a cleanly closed or fsynced segment: take its size from the file and its tail from
        the indexes. Returns False when the file has a hole or the batch headers after the last
        index entry do not end exactly at the file's end (a trim that never reached the disk): the
        caller recovers the segment instead."""
        if self._data_end() < self.size:
            return False
        self._remap(self.size)
        return self._load_tail()

    def recover(self) -> int:
        """Validate every batch, cut the file at the first invalid byte, rebuild both indexes.

        Returns the number of bytes cut.
        """
        end = self._data_end()
        self._remap(end)
        self.index.make_writable()
        self.time_index.make_writable()
        self.index.reset()
        self.time_index.reset()
        self._reset_tail()
        pos = 0
        expected_min = self.base_offset
        while pos + HEADER_SIZE <= end:
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

    def _data_end(self) -> int:
        """The file's size, or where its first hole starts if sooner (the sparse tail of the active
        segment). Nothing reads a hole through the mapping: on tmpfs that allocates a page, and on a
        full disk the process dies of SIGBUS. A hole reads as zeros, where recovery stops anyway."""
        try:
            return min(self.file_size, os.lseek(self._fd, 0, os.SEEK_HOLE))
        except OSError:  # a filesystem without SEEK_HOLE
            return self.file_size

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

    def _load_tail(self) -> bool:
        """Derive next_offset and the max timestamp from the indexes plus the batches after them;
        False if those batch headers are not whole, increasing batches up to ``size``."""
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
            if size < HEADER_SIZE or pos + size > self.size or base < max(self.next_offset, idx_offset) \
                    or last < base:
                return False
            ts = self._header_max_timestamp(pos)
            if ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = ts, base
            self.next_offset = last + 1
            self._bytes_since_index_entry += size
            pos += size
        return pos == self.size

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
        # Space for the index entries these batches may add (and the time-index entry a roll adds),
        # before the data: once the data is written, nothing may fail for lack of space.
        self.index.reserve(len(infos))
        self.time_index.reserve(len(infos) + 1)
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
        try:
            written = os.pwritev(self._fd, parts, position)
            if written != n:
                # A regular file takes a short write only when space runs out part-way.
                raise OSError(errno.ENOSPC, f"short write ({written} of {n} bytes)", str(self.log_path))
        except OSError:
            self._discard_from(position)
            raise
        for info in infos:
            self._track(BatchInfo(position + info.position, info.size, info.base_offset,
                                  info.last_offset, info.max_timestamp, info.record_count))
        if self._drop_behind is not None and not self._drop_behind.advance(end):
            # sync_file_range may have been the one call the kernel reports a write-back error to.
            self.sync_failed = True
            self._drop_behind = None
        return position

    def drop_from_page_cache(self) -> None:
        """After a roll, once the next segment holds a page-cache window of its own: the rest of
        this one leaves the cache too (a no-op without drop-behind, or once the files are closed)."""
        if self._drop_behind is not None and self._fd >= 0:
            if not self._drop_behind.drop_all(self.size):
                self.sync_failed = True
            self._drop_behind = None

    def keep_in_page_cache(self, window: int) -> None:
        """Leave only about the newest ``window`` bytes of this segment's data in the page cache
        as it is appended to (page_cache.py); 0 leaves it all to the kernel."""
        if window <= 0:
            self._drop_behind = None
        elif self._drop_behind is None or self._drop_behind.window != window:
            self._drop_behind = DropBehind(self._fd, window)
            self._drop_behind.submitted = self._drop_behind.dropped = self.size

    def _discard_from(self, position: int) -> None:
        """Drop whatever a failed write left at and after ``position`` (frees its blocks too)."""
        os.ftruncate(self._fd, position)
        os.ftruncate(self._fd, self.file_size)

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
        # Truncation repairs a divergence from the leader: batches a power loss brought back would
        # undo it.
        os.fsync(self._fd)
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
        """fsync the data file and both indexes (fsync writes back their mapped pages too)."""
        self.sync()

    def deactivate(self, sync: bool = True) -> None:
        """On roll: final time-index entry, trim files to their used length, then fsync them. With
        ``sync=False`` the fsync is left to ``sync_data`` (from another thread: an fsync of a GiB
        segment takes seconds, and the appender should not wait for it)."""
        if not self.active:
            return
        self._seal()
        self._remap(0)
        os.ftruncate(self._fd, self.size)
        self.file_size = self.size
        self.capacity = 0
        self.index.trim()
        self.time_index.trim()
        self._remap(self.size)
        self.active = False
        self._rolls += 1
        if sync:
            self.sync()

    def sync(self) -> None:
        """fsync the data file and both indexes; raises OSError, and always will once one failed."""
        if self.sync_failed:
            raise OSError(errno.EIO, f"an earlier fsync of segment {self.log_path} failed; its data is "
                                     "vouched for again only by the recovery scan of a restart")
        rolls = self._rolls
        try:
            os.fsync(self._fd)
            self.index.sync()
            self.time_index.sync()
        except OSError:
            self.sync_failed = True
            raise
        self._synced_rolls = rolls

    def sync_data(self) -> bool:
        """``sync`` for another thread: never raises; False if the segment was closed meanwhile
        (deleted, truncated away: it needs none) or the fsync failed. ``PartitionLog.mark_synced``
        reads the outcome from ``synced``."""
        try:
            self.sync()
        except OSError:
            return False
        return True

    @property
    def synced(self) -> bool:
        """Whether a ``sync`` that began after the last roll completed: the rolled data is durable."""
        return self._synced_rolls == self._rolls

    def _seal(self) -> None:
        """A last time-index entry with the segment's largest timestamp, if there is room on disk:
        it only spares a reopen reading the batches after the last index entry."""
        if self.max_timestamp != NO_TIMESTAMP:
            try:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            except OSError:
                pass

    def close(self, sync: bool = False) -> None:
        """Clean close: the files hold exactly the data and trimmed indexes (fsynced, with ``sync``)."""
        if self._fd < 0:
            return
        if self.active:
            self._seal()
        self._remap(0)
        os.ftruncate(self._fd, self.size)
        self.index.trim()
        self.time_index.trim()
        if sync:
            self.sync()
        self.index.close(trim=False)
        self.time_index.close(trim=False)
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
