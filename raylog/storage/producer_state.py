"""Idempotent producers' sequences per partition, and the snapshots that make them survive restarts.

``ProducerStateTable`` decides for each idempotent batch whether to append
it, answer it as a duplicate of an earlier one (a retry), or hold it until
the batches before it arrive (Ray does not promise that calls to an async
actor start in submission order, so in-flight batches can overtake each
other). A batch the log rejected for good still uses up its sequences
(``record`` with the error): the producer does not resend it, so the next
batch must not wait for it, and a retry of it gets the same error.

Every replica keeps the table, leader or follower: a follower records the
batches it copies, so a new leader deduplicates retries of batches its
predecessor appended. ``ProducerStateManager`` snapshots the table into the
partition directory when a segment rolls (``<base offset>.snapshot``, as
Kafka's ProducerStateManager does) and rebuilds it on open from the latest
snapshot at or below the log end plus the batches after it, so producer state
of segments older than the active one survives a restart. Rejections are not
in the log and not snapshotted: after a restart the batch after a rejected one
waits, fails with OutOfOrderSequenceError, and the producer re-sequences it.

Snapshot file: ``RLPS`` magic, u32 version (1), u32 CRC32C of the body, then
a msgpack body ``[offset, [[producer_id, epoch, next_sequence, [[base_sequence,
base_offset, last_offset, log_append_time_ms], ...]], ...]]``.

Not thread-safe: the replica actor owns both.
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import crc32c
import msgpack

from raylog.errors import DuplicateSequenceError, InvalidProducerEpochError
from raylog.storage import files
from raylog.storage.batch import NO_PRODUCER_ID, iter_batches

MAX_TRACKED_PRODUCERS = 10_000
"""Producer ids remembered per partition; the least recently seen is forgotten first."""
DEDUP_WINDOW = 5
"""Batches remembered per producer for duplicate detection: Kafka's max in-flight for idempotence."""
SEQUENCE_MASK = 0x7FFFFFFF
"""Sequences wrap to 0 after 2**31 - 1, as Kafka's do."""
_AHEAD_WINDOW = 1 << 30
"""A sequence up to this far past the next expected one (mod 2**31) is ahead; anything else is behind."""
SNAPSHOTS_KEPT = 3
"""Snapshots kept per partition: the newest covers a restart; older ones cover truncation below it."""

_SNAPSHOT_MAGIC = b"RLPS"
_SNAPSHOT_HEADER = struct.Struct(">4sII")
_SNAPSHOT_VERSION = 1


class BatchOutcome(NamedTuple):
    """Where an appended batch landed, as the producer needs it back for a retry."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int = -1


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    next_sequence: int
    recent: deque = field(default_factory=lambda: deque(maxlen=DEDUP_WINDOW))
    """(base_sequence, BatchOutcome or the error that rejected the batch) of the last batches."""


class ProducerStateTable:
    """Per producer id: the next expected sequence and the last few batches' outcomes."""

    APPEND, DUPLICATE, WAIT = "append", "duplicate", "wait"

    def __init__(self) -> None:
        self._entries: OrderedDict[int, _ProducerEntry] = OrderedDict()

    def check(self, producer_id: int, epoch: int, base_sequence: int):
        """(verdict, previous outcome for a DUPLICATE); raises InvalidProducerEpochError for a fenced
        epoch and DuplicateSequenceError for a sequence older than the ones remembered (sent before,
        so possibly in the log: the producer must not send it again)."""
        entry = self._entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            # A new producer (or epoch) starts at sequence 0; a later batch that overtook the
            # first one waits for it. The replica gives up waiting when the producer's state was
            # simply lost (see PartitionReplica.produce).
            return (self.APPEND if base_sequence == 0 else self.WAIT), None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is fenced by epoch {entry.epoch}; the batch was not appended")
        if base_sequence == entry.next_sequence:
            return self.APPEND, None
        for seq, outcome in entry.recent:
            if seq == base_sequence:
                return self.DUPLICATE, outcome
        if 0 < (base_sequence - entry.next_sequence) & SEQUENCE_MASK < _AHEAD_WINDOW:
            return self.WAIT, None
        raise DuplicateSequenceError(
            f"producer {producer_id} sent sequence {base_sequence}, expected {entry.next_sequence}; it is older "
            f"than the last {DEDUP_WINDOW} batches this replica remembers, so it was sent before and may be in "
            "the log")

    def record(self, producer_id: int, epoch: int, base_sequence: int, record_count: int, outcome) -> None:
        """A batch was appended (``outcome`` its BatchOutcome) or rejected for good (the error)."""
        entry = self._entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = _ProducerEntry(epoch, 0)
            self._entries[producer_id] = entry
        elif epoch < entry.epoch:
            return  # a follower copying an old epoch's batch after a newer one: the newer state wins
        entry.next_sequence = (base_sequence + record_count) & SEQUENCE_MASK
        entry.recent.append((base_sequence, outcome))
        self._entries.move_to_end(producer_id)
        while len(self._entries) > MAX_TRACKED_PRODUCERS:
            self._entries.popitem(last=False)

    def record_batches(self, buf) -> None:
        """Record every idempotent batch of an appended buffer (followers, and rebuilding)."""
        for batch in iter_batches(buf):
            if batch.producer_id != NO_PRODUCER_ID:
                append_time = batch.max_timestamp if batch.log_append_time else -1
                self.record(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.record_count,
                            BatchOutcome(batch.base_offset, batch.last_offset, append_time))

    def knows(self, producer_id: int, epoch: int) -> bool:
        entry = self._entries.get(producer_id)
        return entry is not None and entry.epoch >= epoch

    def __len__(self) -> int:
        return len(self._entries)

    # --- snapshots ------------------------------------------------------------------------

    def to_snapshot(self) -> list:
        return [[pid, e.epoch, e.next_sequence, [[seq, *o] for seq, o in e.recent if isinstance(o, BatchOutcome)]]
                for pid, e in self._entries.items()]

    @classmethod
    def from_snapshot(cls, rows: list) -> "ProducerStateTable":
        table = cls()
        for pid, epoch, next_sequence, recent in rows:
            entry = _ProducerEntry(epoch, next_sequence)
            for seq, base, last, append_time in recent:
                entry.recent.append((seq, BatchOutcome(base, last, append_time)))
            table._entries[pid] = entry
        return table


class ProducerStateManager:
    """Snapshots of a partition's ProducerStateTable in its directory."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def _snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob("*" + files.SNAPSHOT_SUFFIX):
            offset = files.base_offset_of(path)
            if offset is not None:
                offsets.append(offset)
        return sorted(offsets)

    def take_snapshot(self, table: ProducerStateTable, offset: int) -> None:
        """Write the table as of ``offset`` (every batch below it recorded), keep the newest few."""
        body = msgpack.packb([offset, table.to_snapshot()], use_bin_type=True)
        header = _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, crc32c.crc32c(body))
        files.write_atomically(files.snapshot_path(self.directory, offset), header + body)
        for old in self._snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            files.snapshot_path(self.directory, old).unlink(missing_ok=True)

    def _read(self, offset: int) -> ProducerStateTable | None:
        try:
            data = files.snapshot_path(self.directory, offset).read_bytes()
            magic, version, crc = _SNAPSHOT_HEADER.unpack_from(data)
            body = data[_SNAPSHOT_HEADER.size:]
            if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_VERSION or crc32c.crc32c(body) != crc:
                return None
            at, rows = msgpack.unpackb(body, raw=False, use_list=True)
            return ProducerStateTable.from_snapshot(rows) if at == offset else None
        except (OSError, ValueError, struct.error, msgpack.UnpackException):
            return None

    def load(self, log) -> ProducerStateTable:
        """The table as of ``log``'s end: the newest readable snapshot at or below it (else the
        start of the active segment, with what is older forgotten) plus the batches after it."""
        table, start = None, None
        for offset in reversed(self._snapshot_offsets()):
            if offset <= log.log_end_offset:
                table = self._read(offset)
                if table is not None:
                    start = offset
                    break
        if table is None:
            table, start = ProducerStateTable(), log.active.base_offset
        offset = max(start, log.log_start_offset)
        while offset < log.log_end_offset:
            data = log.read(offset, 8 * 1024 * 1024)
            if not data:
                break
            last = None
            for batch in iter_batches(data):
                if batch.base_offset >= offset:
                    table.record_batches(data[batch.position:batch.position + batch.size])
                last = batch
            offset = last.next_offset if last is not None else log.log_end_offset
        return table

    def truncate(self, end_offset: int) -> None:
        """The log was cut at ``end_offset``: snapshots above it describe records that are gone."""
        for offset in self._snapshot_offsets():
            if offset > end_offset:
                files.snapshot_path(self.directory, offset).unlink(missing_ok=True)

    def clear(self) -> None:
        for offset in self._snapshot_offsets():
            files.snapshot_path(self.directory, offset).unlink(missing_ok=True)
