"""PartitionLog: a partition's ordered segments, their offsets and their lifecycle.

Offsets (Kafka's nouns): ``log_start_offset`` is the first offset a reader may
ask for; ``log_end_offset`` is the offset the next appended record gets
(exclusive end). Both are logical offsets, never byte positions.

Who moves log_start_offset: retention (delete_old_segments), delete_records
(an explicit request, and later replication's follower catch-up), and
truncate_fully_and_start_at. It only grows, except when truncation removes
the records it pointed into. It is checkpointed before any file is deleted,
so a crash between the two is finished by the next open.

Who moves log_end_offset: append (the leader assigns offsets), append_as_follower
(offsets come with the batches), truncate_to (replication's divergence repair).

``recovery_point`` (Kafka's name and rule): every byte below it is known to be
fsynced, so recovery after a crash scans only the segments at or above it. It
moves up when the active segment is flushed (to the log end at that moment)
and when a rolled segment's fsync completes (to that segment's end, but only
once every segment below it is synced too: it never skips an unsynced one).
It moves down only with truncation (truncate_to, truncate_fully_and_start_at),
before any file changes, and never stands above the log end. Retention moving
past unsynced segments moves it up. It is checkpointed in
``recovery-point-offset-checkpoint``: a lower value must reach the disk before
the files change (else the write fails the call); a higher one may lag (a
failed write only means more to scan after a crash), and is only written when
it leaves the active segment, which recovery scans anyway, so flushing every
message does not also write a checkpoint every message.

A rolled segment's fsync is done at roll, or, with ``sync_rolled_later``, by
the owner on another thread: ``segments = log.take_unsynced()``, then
``seg.sync_data()`` for each (any thread), then ``log.mark_synced(segments)``
(the owner's thread). A segment whose fsync failed is handed out again.

Errors: a write that fails in the operating system (ENOSPC on a full disk, EIO)
raises KafkaStorageError; an append that raises it has appended nothing (the
segment file is cut back, the log end is unchanged) and the same append works
once space returns.

The replica's state above this (high watermark, ISR, leader epochs) lives in
actors/, not here. Not thread-safe: one owner serialises every call, which in
raylog is the partition's replica actor running on one event loop (except
``Segment.sync_data``, above).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from raylog.config import NEVER, TopicConfig
from raylog.errors import (
    CorruptRecordError, InvalidConfigError, InvalidOffsetError, InvalidRecordError, KafkaStorageError, LogDirError,
    OffsetOutOfRangeError,
)
from raylog.storage import files, recovery
from raylog.storage.batch import BatchInfo, RecordBatch
from raylog.storage.segment import Segment
from raylog.storage.stats import LogStats

Clock = Callable[[], int]

MAX_RELATIVE_OFFSET = 2**32 - 1
"""Index entries hold offsets relative to the segment base as u32: roll before overflowing."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _storage_error(directory: Path, exc: OSError, consequence: str = "") -> KafkaStorageError:
    reason = exc.strerror or str(exc)
    return KafkaStorageError(f"cannot write to log directory {directory}: {reason}{consequence}")


def _raises_storage_errors(method):
    """OSError from the file system becomes KafkaStorageError naming the directory."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise _storage_error(self.directory, exc) from exc
    return wrapper


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Where an append landed: offsets of its first and last record, and the broker's timestamp."""

    base_offset: int
    last_offset: int
    record_count: int
    size: int
    log_append_time_ms: int = -1
    """The broker's clock when the topic uses LogAppendTime, else -1 (as Kafka reports it)."""


class PartitionLog:
    """One partition's log in ``directory``; opening it recovers whatever a crash left."""

    def __init__(self, directory: str | Path, config: TopicConfig | None = None, clock: Clock = wall_clock_ms,
                 on_roll: Callable[[int], None] | None = None):
        """``on_roll(offset)`` runs when a new segment is about to start at ``offset`` (every record
        below it is in older segments): the replica snapshots its producer state there."""
        self.directory = Path(directory)
        self._on_roll = on_roll
        self.config = config or TopicConfig()
        self._now = clock
        self.stats = LogStats()
        try:
            loaded = recovery.load(self.directory, self.config)
        except OSError as exc:
            raise LogDirError(f"cannot open partition log in {self.directory}: {exc}") from exc
        self.segments: list[Segment] = loaded.segments
        self._bases = [s.base_offset for s in self.segments]
        self.log_start_offset = loaded.log_start_offset
        self.recovered_cleanly = loaded.clean
        self.stats.bytes_cut_by_recovery = loaded.bytes_cut
        self.stats.segments_recovered = loaded.segments_recovered
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._closed = False
        self._cleaner = None
        self._cached_tail: Segment | None = None
        self.page_cache_window_bytes = 0
        """Each active segment keeps about this many of its newest bytes in the page cache and drops
        older ones once written back (page_cache.py); 0: the kernel decides. Replicas set
        ClusterConfig.log_page_cache_window_bytes."""
        self.generation = 0
        """Even while the files readers may hold are stable; odd while a truncation, segment
        deletion or compaction swap changes them (bumped before and after each). Readers of the
        files on the replica's node (local_reader.py) discard what they read across a change."""
        self.on_files_changing: Callable[[], None] | None = None
        """Called after each generation bump (the replica publishes its read view)."""
        self.sync_rolled_later = False
        """When set, a rolled segment's fsync is left to its owner (see the module doc)."""
        self.recovery_point = loaded.recovery_point
        """Every byte below this offset is known to be fsynced (see the module doc)."""
        on_disk = loaded.recovery_point_on_disk
        self._recovery_point_on_disk = -1 if on_disk is None else on_disk
        self._unsynced: list[Segment] = list(loaded.unsynced)
        """Inactive segments whose data is not known to be on disk, in offset order."""
        self._handed_out: list[Segment] = []
        """The part of ``_unsynced`` given to the owner by take_unsynced and not yet reported back."""
        self._active_synced_to = max(self.active.base_offset, self.recovery_point)
        """Offset below which the active segment's data is known to be on disk."""
        try:
            self._delete_segments_below_start()
            self._checkpoint_recovery_point()
        except OSError as exc:
            raise LogDirError(f"cannot open partition log in {self.directory}: {exc}") from exc

    # --- offsets and sizes -----------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- appending -------------------------------------------------------------------

    def append(self, buf: bytes | bytearray | memoryview, leader_epoch: int = 0) -> AppendInfo:
        """Validate ``buf`` (one or more whole batches), assign offsets from the log end, write it.

        Raises CorruptRecordError, UnsupportedCodecError, RecordTooLargeError or
        InvalidRecordError, or KafkaStorageError when the directory cannot be written (a full
        disk); on any of them nothing is appended.
        """
        infos = self._validate(buf)
        next_offset = self.log_end_offset
        stamped = []
        for info in infos:
            delta = info.last_offset - info.base_offset
            stamped.append(BatchInfo(info.position, info.size, next_offset, next_offset + delta,
                                     info.max_timestamp, info.record_count))
            next_offset += delta + 1
        append_time = -1
        if self.config.message_timestamp_type == "LogAppendTime":
            append_time = self._now()
            buf = bytearray(buf)
            for info in infos:
                RecordBatch(buf, info.position).set_log_append_time(append_time)
            stamped = [BatchInfo(i.position, i.size, i.base_offset, i.last_offset, append_time, i.record_count)
                       for i in stamped]
        return self._write(buf, stamped, leader_epoch, append_time)

    def append_as_follower(self, buf: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry offsets and epochs (a replica copying its leader).

        Raises as ``append`` does, and InvalidOffsetError for a batch below the log end.
        """
        infos = self._validate(buf, check_payload=False)
        expected = self.log_end_offset
        for info in infos:
            if info.base_offset < expected:
                raise InvalidOffsetError(
                    f"follower batch at offset {info.base_offset} is below the log end offset {expected}")
            expected = info.last_offset + 1
        if infos[0].base_offset > self.log_end_offset and self.active.is_empty and len(self.segments) == 1:
            self.truncate_fully_and_start_at(infos[0].base_offset)
        return self._write(buf, infos, None, -1)

    def _validate(self, buf, check_payload: bool = True) -> list[BatchInfo]:
        infos = []
        pos = 0
        if len(buf) == 0:
            raise CorruptRecordError("empty buffer holds no record batch")
        compacted = self.config.cleanup_policy == "compact"
        while pos < len(buf):
            batch = RecordBatch(buf, pos)
            batch.validate(self.config.max_message_bytes, check_payload=check_payload and not compacted)
            if compacted and batch.columns().keys.null_count:
                raise InvalidRecordError("compacted topics require a key on every record")
            infos.append(batch.info())
            pos += batch.size
        return infos

    def _write(self, buf, infos: list[BatchInfo], leader_epoch: int | None, append_time: int) -> AppendInfo:
        first, last = infos[0], infos[-1]
        count = sum(i.record_count for i in infos)
        try:
            self._maybe_roll(len(buf), last.last_offset, max(i.max_timestamp for i in infos))
            if self.page_cache_window_bytes:
                self.active.keep_in_page_cache(self.page_cache_window_bytes)
            self.active.append(buf, infos, leader_epoch)
            if self._cached_tail is not None and self.active.size >= self.page_cache_window_bytes:
                self._cached_tail.drop_from_page_cache()
                self._cached_tail = None
            self._unflushed_messages += count
            try:
                self._maybe_flush()
            except OSError:
                # flush_messages promised durability and could not give it: the batches go again.
                self._unflushed_messages -= count
                self.active.truncate_to(first.base_offset)
                raise
        except OSError as exc:
            raise _storage_error(self.directory, exc, "; nothing was appended") from exc
        self.stats.batches_appended += len(infos)
        self.stats.records_appended += count
        self.stats.bytes_appended += len(buf)
        return AppendInfo(first.base_offset, last.last_offset, count, len(buf), append_time)

    def _maybe_roll(self, nbytes: int, last_offset: int, max_timestamp: int) -> None:
        seg = self.active
        if seg.is_empty:
            return
        # segment_ms is measured in record time, as Kafka's timeWaitedForRoll does: the incoming
        # batch's timestamp against the segment's first batch, so replaying old data rolls by
        # the data's age, not by how fast it is replayed.
        expired = seg.first_batch_timestamp is not None and \
            max_timestamp - seg.first_batch_timestamp > self.config.segment_ms
        # seg.fits bounds the segment by the size its file was made for; self.config.segment_bytes
        # is lower than that when the topic's segment.bytes was lowered since (reconfigure).
        if (not seg.fits(nbytes) or seg.size + nbytes > self.config.segment_bytes or seg.index_full or expired
                or last_offset - seg.base_offset > MAX_RELATIVE_OFFSET):
            self.roll()

    def roll(self) -> Segment:
        """Close the active segment for appends and start one at the log end offset.

        Raises OSError with nothing changed if the new segment's files cannot be created (the
        on_roll hook runs first); with the roll done if the old segment's fsync fails.
        """
        old = self.active
        if old.is_empty:
            return old
        if self._on_roll is not None:
            self._on_roll(self.log_end_offset)
        seg = Segment.create(self.directory, self.log_end_offset, self.config)
        try:
            old.deactivate(sync=False)
        except OSError:
            seg.delete()
            raise
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self._cached_tail = old
        self._unsynced.append(old)
        self._active_synced_to = seg.base_offset
        self.stats.segments_rolled += 1
        if not self.sync_rolled_later:
            self._sync_unsynced()
        return seg

    # --- reading ---------------------------------------------------------------------

    def reader_state(self) -> dict:
        """What a reader of the files on this node needs besides the high watermark (the
        replica publishes it in its read view, read_view.py)."""
        active = self.active
        return {"log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
                "active_base_offset": active.base_offset, "active_size": active.size,
                "active_index_entries": active.index.entries, "generation": self.generation}

    def check_offset(self, offset: int) -> None:
        """OffsetOutOfRangeError unless ``offset`` is within [log_start_offset, log_end_offset]."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]",
                self.log_start_offset, self.log_end_offset)

    def _segment_slot(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding ``offset``: one contiguous buffer of at most
        ``max_bytes`` (or the first batch alone, if larger), ending before ``max_offset``.

        Empty at the log end; OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        The first batch may start before ``offset``: readers skip the records below it.
        """
        self.check_offset(offset)
        if max_offset is not None and offset >= max_offset:
            return b""
        for seg in self.segments[self._segment_slot(offset):]:
            data = seg.read(offset, max_bytes, max_offset)
            if data:
                self.stats.bytes_read += len(data)
                return data
            if max_offset is not None and seg.next_offset >= max_offset:
                break
        return b""

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp``; None if there is none."""
        for seg in self.segments[self._segment_slot(self.log_start_offset):]:
            if seg.max_timestamp < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp)
            if found is not None and found[0] >= self.log_start_offset:
                return found
        return None

    # --- live config ------------------------------------------------------------------

    def reconfigure(self, config: TopicConfig) -> None:
        """Take the topic's altered config. What reads it per call applies from the next call:
        max_message_bytes and message_timestamp_type to the next append, retention (retention_ms,
        retention_bytes, a cleanup_policy change) to the next delete_old_segments and
        next_maintenance_ms (the owner runs maintenance to apply it), flush_messages and flush_ms to
        the next flush check, delete_retention_ms to the next cleaning round. segment_bytes and
        segment_ms bound the active segment at once (a lower segment_bytes rolls it at the next append
        that would pass it); a higher segment_bytes, segment_index_bytes and index_interval_bytes
        apply to the segments rolled from now on, whose files are sized when they are created."""
        if not isinstance(config, TopicConfig):
            raise InvalidConfigError(f"reconfigure takes a TopicConfig, got {type(config).__name__}")
        self.config = config

    # --- retention, truncation -------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Apply retention_ms and retention_bytes; returns how many segments were deleted."""
        if self.config.cleanup_policy != "delete":
            return 0
        deleted = 0
        if self.config.retention_ms >= 0:
            horizon = self._now() - self.config.retention_ms
            while self.segments[0].max_timestamp != -1 and self.segments[0].max_timestamp < horizon:
                n = self._delete_oldest()
                if n == 0:
                    break
                deleted += n
        if self.config.retention_bytes >= 0:
            while len(self.segments) > 1 and self.size_bytes - self.segments[0].size >= self.config.retention_bytes:
                deleted += self._delete_oldest()
        return deleted

    @_raises_storage_errors
    def _delete_oldest(self) -> int:
        if len(self.segments) == 1:
            if self.active.is_empty:
                return 0
            self.roll()
        self._set_log_start(max(self.log_start_offset, self.segments[1].base_offset))
        return self._delete_segments_below_start()

    @_raises_storage_errors
    def delete_records(self, offset: int) -> int:
        """Move log_start_offset up to ``offset`` (Kafka's DeleteRecords); returns segments deleted."""
        if offset > self.log_end_offset or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: log end offset is {self.log_end_offset}",
                self.log_start_offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return 0
        self._set_log_start(offset)
        if self.active.next_offset <= offset and not self.active.is_empty:
            self.roll()
        return self._delete_segments_below_start()

    def _set_log_start(self, offset: int) -> None:
        # Checkpoint first: if the disk is full, nothing (not even what reads see) has changed.
        files.write_checkpoint(self.directory / files.LOG_START_OFFSET_FILE, offset)
        self.log_start_offset = offset

    @contextlib.contextmanager
    def changing_files(self):
        """Bracket a change to files readers may hold (see ``generation``)."""
        self._bump_generation()
        try:
            yield
        finally:
            self._bump_generation()

    def _bump_generation(self) -> None:
        self.generation += 1
        if self.on_files_changing is not None:
            self.on_files_changing()

    def _delete_segments_below_start(self) -> int:
        deleted = 0
        while len(self.segments) > 1 and self.segments[0].next_offset <= self.log_start_offset:
            with self.changing_files():
                seg = self.segments.pop(0)
                self._bases.pop(0)
                self._forget_unsynced(seg)
                seg.delete()
            deleted += 1
        self.stats.segments_deleted += deleted
        if deleted:
            self._advance_recovery_point()
        return deleted

    @_raises_storage_errors
    def truncate_to(self, offset: int) -> int:
        """Remove every record at ``offset`` and above; returns the bytes cut.

        Batches are atomic: the batch holding ``offset`` goes whole, so the log
        end offset becomes that batch's base offset (replication truncates at
        batch boundaries, where the two are equal). The cut is durable when this
        returns: stale batches coming back after a power loss would undo it.
        """
        if offset < 0:
            raise InvalidOffsetError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return 0
        if offset <= self.segments[0].base_offset:
            before = self.size_bytes
            self.truncate_fully_and_start_at(offset)
            return before
        with self.changing_files():
            return self._truncate_to(offset)

    def _truncate_to(self, offset: int) -> int:
        self._lower_recovery_point(offset)
        cut = 0
        deleted = False
        while self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            self._forget_unsynced(seg)
            cut += seg.size
            seg.delete()
            deleted = True
        seg = self.segments[-1]
        if not seg.active:
            # It becomes the active segment: all of it is on disk unless its fsync is still owed.
            self._active_synced_to = seg.base_offset if self._forget_unsynced(seg) else seg.next_offset
        seg.activate()
        cut += seg.truncate_to(offset)  # fsyncs the cut
        if deleted:
            files.fsync_dir(self.directory)
        self._active_synced_to = min(self._active_synced_to, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        if self.log_start_offset > self.log_end_offset:
            self._set_log_start(self.log_end_offset)
        self.stats.bytes_cut_by_truncation += cut
        return cut

    @_raises_storage_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``.

        The new segment exists before the old ones go (a segment already based at ``offset`` is
        emptied in place instead), so a full disk leaves the log as it was."""
        with self.changing_files():
            self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._lower_recovery_point(offset)
        fresh = next((seg for seg in self.segments if seg.base_offset == offset), None)
        created = fresh is None
        if created:
            fresh = Segment.create(self.directory, offset, self.config)
        try:
            self._set_log_start(offset)
        except BaseException:
            if created:
                fresh.delete()
            raise
        if not created:
            fresh.activate()
            fresh.truncate_to(offset)  # fsyncs the cut
        for seg in self.segments:
            if seg is not fresh:
                seg.delete()
        files.fsync_dir(self.directory)
        self.segments, self._bases = [fresh], [offset]
        self._unsynced, self._handed_out = [], []
        self._active_synced_to = offset
        self._advance_recovery_point()

    # --- compaction, flush, close ----------------------------------------------------

    def compact(self, limit: int | None = None) -> int:
        """One compaction round over the inactive segments below ``limit``; returns bytes removed."""
        return self.cleaner.clean(self._now(), limit)

    @property
    def cleaner(self):
        """The log's Cleaner (made on first use: only compacted topics need one)."""
        if self._cleaner is None:
            from raylog.storage.cleaner import Cleaner

            self._cleaner = Cleaner(self)
        return self._cleaner

    def replace_segment(self, old: Segment, new: Segment | None) -> None:
        """Used by the cleaner: swap a rewritten segment (fsynced before its swap), or nothing, into
        old's place."""
        slot = self.segments.index(old)
        if new is None:
            self.segments.pop(slot)
            self._bases.pop(slot)
        else:
            self.segments[slot] = new
        if self._forget_unsynced(old):
            self._advance_recovery_point()

    def next_maintenance_ms(self) -> int | None:
        """When retention or a time-based flush next has work (wall-clock ms; now or earlier if it
        has work already), or None when nothing is due until more is appended. The replica arms
        one timer for it instead of polling, so an idle partition costs no CPU."""
        due = []
        if self.config.cleanup_policy == "delete":
            first = self.segments[0]
            if self.config.retention_ms >= 0 and first.max_timestamp != -1:
                due.append(first.max_timestamp + self.config.retention_ms + 1)
            if self.config.retention_bytes >= 0 and len(self.segments) > 1 and \
                    self.size_bytes - first.size >= self.config.retention_bytes:
                due.append(self._now())
        if self._unflushed_messages and self.config.flush_ms < NEVER:
            due.append(self._last_flush_ms + self.config.flush_ms)
        return min(due) if due else None

    # --- durability: fsync, the recovery point -------------------------------------------

    def take_unsynced(self) -> list[Segment]:
        """Inactive segments whose fsync is owed and not yet handed out (see ``sync_rolled_later``):
        the owner calls ``sync_data`` on each, from any thread, then ``mark_synced`` with them."""
        taken = [seg for seg in self._unsynced if seg not in self._handed_out and not seg.sync_failed]
        self._handed_out += taken
        return taken

    def mark_synced(self, segments: list[Segment]) -> None:
        """The owner ran ``sync_data`` on ``segments`` (from take_unsynced): the recovery point moves
        over those that are synced; one whose fsync did not run is handed out again, one whose fsync
        failed never is (it holds the recovery point below it until a restart). Segments deleted or
        truncated meanwhile, and calls after close, are ignored. Never raises."""
        if self._closed:
            return
        for seg in segments:
            if seg in self._handed_out:
                self._handed_out.remove(seg)
                if seg.synced:
                    self._unsynced.remove(seg)
        self._advance_recovery_point()

    def _sync_unsynced(self) -> None:
        """fsync the owed segments here and now (a log without an owner that does it later)."""
        for seg in [s for s in self._unsynced if s not in self._handed_out]:
            seg.sync()
            self._unsynced.remove(seg)
        self._advance_recovery_point()

    def _forget_unsynced(self, seg: Segment) -> bool:
        """``seg`` leaves the log or becomes active: no fsync is owed for it any more. Returns
        whether one was."""
        if seg in self._handed_out:
            self._handed_out.remove(seg)
        if seg in self._unsynced:
            self._unsynced.remove(seg)
            return True
        return False

    def _advance_recovery_point(self) -> None:
        """Move the recovery point up to the first byte not known to be on disk."""
        point = self._unsynced[0].base_offset if self._unsynced else self._active_synced_to
        point = min(point, self.log_end_offset)
        if point > self.recovery_point:
            self.recovery_point = point
            self._checkpoint_recovery_point()

    def _lower_recovery_point(self, offset: int) -> None:
        """Before the files at and above ``offset`` change: the checkpoint must not vouch for them.
        Raises OSError if the checkpoint cannot be written (and then nothing may change)."""
        self.recovery_point = min(self.recovery_point, offset)
        self._checkpoint_recovery_point()

    def _checkpoint_recovery_point(self, exact: bool = False) -> None:
        on_disk, point = self._recovery_point_on_disk, self.recovery_point
        if point == on_disk:
            return
        if point > on_disk >= self.active.base_offset and not exact:
            return  # both inside the active segment, which recovery scans either way
        try:
            files.write_checkpoint(self.directory / files.RECOVERY_POINT_FILE, point)
        except OSError:
            if point < on_disk:
                raise
            return  # a checkpoint that lags only means more to scan after a crash; the next move retries
        self._recovery_point_on_disk = point

    @_raises_storage_errors
    def maybe_flush(self) -> None:
        """Flush if flush_messages or flush_ms says so (called on append and periodically)."""
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if (self._unflushed_messages >= self.config.flush_messages
                or self._now() - self._last_flush_ms >= self.config.flush_ms):
            self._flush()

    @_raises_storage_errors
    def flush(self) -> None:
        """fsync the active segment; the recovery point moves to the log end if every older segment
        is synced too."""
        self._flush()

    def _flush(self) -> None:
        self.active.flush()
        self._active_synced_to = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self._now()
        self.stats.flushes += 1
        self._advance_recovery_point()

    def close(self) -> None:
        """fsync what is owed, trim every file to its data, checkpoint the recovery point at the log
        end and leave the clean-shutdown marker. If a segment cannot be fsynced, the files are
        closed without the marker, so the next open recovers them."""
        if self._closed:
            return
        self._closed = True
        clean = all([seg.sync_data() for seg in self._unsynced])
        try:
            self.active.close(sync=True)
        except OSError:
            clean = False
        for seg in self.segments:
            seg.close()
        if not clean:
            return
        files.fsync_dir(self.directory)
        self._unsynced, self._handed_out = [], []
        self._active_synced_to = self.recovery_point = self.log_end_offset
        self._checkpoint_recovery_point(exact=True)
        (self.directory / files.CLEAN_SHUTDOWN_FILE).touch()

    def close_unclean(self) -> None:
        """Drop the handles without trimming or the marker: the next open recovers, as after a crash."""
        if self._closed:
            return
        self._closed = True
        for seg in self.segments:
            seg.close_unclean()

    def __enter__(self) -> "PartitionLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PartitionLog({self.directory}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")
