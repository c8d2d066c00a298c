"""Compaction for cleanup_policy="compact": keep the last record per key.

Rounds, as Kafka's LogCleaner runs them:

1. Map keys to the offset of their last record, starting at the first dirty
   offset (where the previous round's map stopped) and going batch by batch
   until the map holds ``dedupe_buffer_bytes`` (Kafka's
   log.cleaner.dedupe.buffer.size) or reaches the end of the cleanable range:
   the inactive segments, and never at or above the caller's limit (the high
   watermark: records above it may still be truncated by replication, and
   dropping an older record for a newer one that is later cut away would lose
   the key). The map's end is the next round's first dirty offset.
2. Rewrite each segment with records below the map's end, dropping a record
   when the map holds its key at a later offset; tombstones (null values)
   below the map's end are dropped once their segment is older than
   delete_retention_ms, so consumers get to see the delete. A batch that keeps
   every record is copied byte for byte; one that loses some is rebuilt with
   the same base offset, last_offset_delta, epoch and codec, and the kept
   records' offset deltas; one that keeps nothing disappears.
3. Swap, crash-safe: the new bytes go to ``<base>.log.cleaned``, fsync,
   rename to ``<base>.log.swap``, fsync the directory; then the old segment's
   files are removed and the swap is renamed to ``<base>.log`` (directory
   fsynced again). recovery.py deletes a leftover
   ``.cleaned`` and completes a leftover ``.swap``.

A round is a generator (``Cleaner.steps``) that yields after every batch it
reads, so the replica's event loop serves produce and fetch between them. A
segment that changed while the round read it (truncated, deleted by
retention) is not swapped. Segments are rewritten one for one (never merged),
so a swap replaces exactly one segment and recovery needs no record of which
segments a swap covered.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from raylog.storage import batch as record_batch
from raylog.storage import files
from raylog.storage.segment import Segment

if TYPE_CHECKING:
    from raylog.storage.log import PartitionLog


DEDUPE_BUFFER_BYTES = 16 * 1024 * 1024
"""Default bound of one round's key map. Kafka shares 128 MiB among its cleaner threads; a raylog
replica is its own process, so each gets less."""
MAP_ENTRY_OVERHEAD_BYTES = 100
"""What a map entry costs beside its key's bytes (a dict slot, a bytes and an int object),
measured with tracemalloc on CPython 3.11: 96-104 bytes."""


class Cleaner:
    """Compacts one PartitionLog in bounded rounds; remembers where the dirty part starts."""

    def __init__(self, log: "PartitionLog", dedupe_buffer_bytes: int = DEDUPE_BUFFER_BYTES):
        self.log = log
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.first_dirty_offset = log.log_start_offset
        self.bytes_removed = 0
        """Bytes the last finished round removed."""
        self.map_entries = 0
        """Keys the last round's map held."""

    def dirty(self, limit: int | None = None) -> bool:
        """Whether a round would map anything: inactive records at or above the first dirty offset."""
        return self.first_dirty_offset < self._end(limit)

    def _end(self, limit: int | None) -> int:
        end = self.log.active.base_offset
        return end if limit is None else min(end, limit)

    def clean(self, now_ms: int, limit: int | None = None) -> int:
        """Run one round to the end; returns the bytes removed."""
        for _ in self.steps(now_ms, limit):
            pass
        return self.bytes_removed

    def steps(self, now_ms: int, limit: int | None = None):
        """One round, yielding between batches; ``limit`` bounds what it may map (the high watermark)."""
        self.bytes_removed = 0
        start = max(self.first_dirty_offset, self.log.log_start_offset)
        last, mapped_to = yield from _map_keys(self.log, start, self._end(limit), self.dedupe_buffer_bytes)
        for seg in list(self.log.segments[:-1]):
            if seg.base_offset >= mapped_to:
                break
            size = seg.size
            drop_tombstones = seg.max_timestamp < now_ms - self.log.config.delete_retention_ms
            batches, changed = yield from _rewrite(seg, last, mapped_to, drop_tombstones)
            if changed and seg in self.log.segments and seg.size == size:
                self.bytes_removed += size - sum(len(b) for b in batches)
                _swap(self.log, seg, batches)
        self.first_dirty_offset = max(self.first_dirty_offset, mapped_to)
        self.map_entries = len(last)
        self.log.stats.compactions += 1


def _map_keys(log: "PartitionLog", start: int, end: int, budget: int):
    """Key -> last offset over whole batches from ``start``, below ``end``, until the budget is
    spent; returns (map, where it stopped). A generator: yields per batch. (Its own function so no
    batch view of a segment outlives it: a segment with views into its mmap cannot be swapped.)"""
    last: dict[bytes, int] = {}
    mapped_to = start
    for seg in list(log.segments[:-1]):
        if seg.next_offset <= start:
            continue
        if seg.base_offset >= end or budget <= 0:
            break
        for batch in seg.batches():
            if batch.next_offset <= start:
                continue
            if batch.next_offset > end or budget <= 0:
                break
            cols = batch.columns()
            keys = cols.keys.to_pylist()
            last.update(zip(keys, batch.offsets(cols).tolist()))
            budget -= sum(len(k) + MAP_ENTRY_OVERHEAD_BYTES for k in keys if k is not None)
            mapped_to = batch.next_offset
            yield
    return last, mapped_to


def _rewrite(seg: Segment, last: dict[bytes, int], mapped_to: int, drop_tombstones: bool):
    """The segment's batches after cleaning, and whether anything changed (a generator: yields per batch)."""
    out: list[bytes] = []
    changed = False
    for batch in seg.batches():
        yield
        if batch.base_offset >= mapped_to:
            out.append(bytes(batch.buf[batch.position:batch.position + batch.size]))
            continue
        cols = batch.columns()
        offsets = batch.offsets(cols).tolist()
        keys, values = cols.keys.to_pylist(), cols.values.to_pylist()
        keep = [i for i, (k, off) in enumerate(zip(keys, offsets))
                if off >= mapped_to
                or (last.get(k, off) <= off and not (drop_tombstones and values[i] is None))]
        if len(keep) == len(offsets):
            out.append(bytes(batch.buf[batch.position:batch.position + batch.size]))
            continue
        changed = True
        if not keep:
            continue
        timestamps = batch.timestamps(cols).tolist()
        base = batch.base_offset
        rebuilt = record_batch.build(
            values=[values[i] for i in keep],
            keys=[keys[i] for i in keep],
            timestamps_ms=[timestamps[i] for i in keep],
            headers=[cols.headers[i] for i in keep] if cols.headers is not None else None,
            compression=record_batch._payload.NAME_BY_CODEC[batch.codec],
            offset_deltas=[offsets[i] - base for i in keep],
            last_offset_delta=batch.last_offset_delta,
            base_offset=base,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
        )
        view = bytearray(rebuilt)
        record_batch.RecordBatch(view, 0).stamp(base, batch.leader_epoch)
        out.append(bytes(view))
    return out, changed


def _swap(log: "PartitionLog", seg: Segment, batches: list[bytes]) -> None:
    base = seg.base_offset
    log_file = files.log_path(log.directory, base)
    cleaned = log_file.with_name(log_file.name + files.CLEANED_SUFFIX)
    swap = log_file.with_name(log_file.name + files.SWAP_SUFFIX)
    with open(os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, files.FILE_MODE), "wb") as f:
        for b in batches:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(cleaned, swap)
    # The .swap must be on disk before the old segment goes: a power loss in between would
    # otherwise leave neither, and the segment's records would be lost.
    files.fsync_dir(log.directory)
    with log.changing_files():
        seg.delete()
        os.replace(swap, log_file)
        files.fsync_dir(log.directory)
        if batches:
            new = Segment(log.directory, base, log.config)
            new.recover()
            log.replace_segment(seg, new)
        else:
            log_file.unlink()
            log.replace_segment(seg, None)
