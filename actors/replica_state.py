"""Pure state of one partition replica above its log: high watermark, ISR, producer sequences.

No Ray and no I/O: the replica actor feeds it events and reads decisions, and
unit tests drive it directly.

Invariant: log_start_offset <= high_watermark <= log_end_offset. The high
watermark is the smallest log end offset over the in-sync replicas; with the
leader alone in the ISR (replication factor 1) it equals the leader's log end
offset. Followers (a later issue) report their log end offsets through fetches.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from raylog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from raylog.protocol import ProduceResponse

MAX_TRACKED_PRODUCERS = 10_000
"""Producer ids remembered per partition; the least recently seen is forgotten first."""
DEDUP_WINDOW = 5
"""Batches remembered per producer for duplicate detection: Kafka's max in-flight for idempotence."""


class ReplicaState:
    def __init__(self, replica_id: int, leader_epoch: int, log_start_offset: int, log_end_offset: int):
        self.replica_id = replica_id
        self.leader_epoch = leader_epoch
        self.isr: set[int] = {replica_id}
        self.log_end_offsets: dict[int, int] = {replica_id: log_end_offset}
        self.log_start_offset = log_start_offset
        self.high_watermark = log_end_offset

    def on_leader_append(self, log_end_offset: int) -> int:
        """The leader's log grew; returns the new high watermark."""
        self.log_end_offsets[self.replica_id] = log_end_offset
        return self._advance()

    def on_follower_fetch(self, replica_id: int, log_end_offset: int) -> int:
        self.log_end_offsets[replica_id] = log_end_offset
        return self._advance()

    def on_truncate(self, log_start_offset: int, log_end_offset: int) -> None:
        self.log_start_offset = log_start_offset
        self.log_end_offsets[self.replica_id] = log_end_offset
        self.high_watermark = min(self.high_watermark, log_end_offset)
        self.high_watermark = max(self.high_watermark, log_start_offset)

    def on_log_start_moved(self, log_start_offset: int) -> None:
        self.log_start_offset = log_start_offset
        self.high_watermark = max(self.high_watermark, log_start_offset)

    def _advance(self) -> int:
        candidate = min(self.log_end_offsets.get(r, 0) for r in self.isr)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
        return self.high_watermark


SEQUENCE_MASK = 0x7FFFFFFF
"""Sequences wrap to 0 after 2**31 - 1, as Kafka's do."""
_AHEAD_WINDOW = 1 << 30
"""A sequence up to this far past the next expected one (mod 2**31) is ahead; anything else is behind."""


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    next_sequence: int
    recent: deque = field(default_factory=lambda: deque(maxlen=DEDUP_WINDOW))
    """(base_sequence, ProduceResponse or the error that rejected the batch) of the last batches."""


class ProducerStateTable:
    """Per producer id: the next expected sequence and the last few batches' outcomes.

    Decides for each idempotent batch whether to append it, answer it as a
    duplicate of an earlier one (a retry), or hold it until the batches before
    it arrive (Ray does not promise that calls to an async actor start in
    submission order, so in-flight batches can overtake each other). A batch
    the log rejected for good still uses up its sequences (``record`` with the
    error): the producer does not resend it, so the next batch must not wait
    for it, and a retry of it gets the same error.
    """

    APPEND, DUPLICATE, WAIT = "append", "duplicate", "wait"

    def __init__(self) -> None:
        self._entries: OrderedDict[int, _ProducerEntry] = OrderedDict()

    def check(self, producer_id: int, epoch: int, base_sequence: int):
        """(verdict, previous outcome for a DUPLICATE); raises InvalidProducerEpochError for a fenced
        epoch and OutOfOrderSequenceError for a sequence older than the ones remembered."""
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
        raise OutOfOrderSequenceError(
            f"producer {producer_id} sent sequence {base_sequence}, expected {entry.next_sequence}; "
            "it is older than the batches this replica remembers")

    def record(self, producer_id: int, epoch: int, base_sequence: int, record_count: int, outcome) -> None:
        """A batch was appended (``outcome`` its ProduceResponse) or rejected for good (the error)."""
        entry = self._entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = _ProducerEntry(epoch, 0)
            self._entries[producer_id] = entry
        entry.next_sequence = (base_sequence + record_count) & SEQUENCE_MASK
        entry.recent.append((base_sequence, outcome))
        self._entries.move_to_end(producer_id)
        while len(self._entries) > MAX_TRACKED_PRODUCERS:
            self._entries.popitem(last=False)

    def knows(self, producer_id: int, epoch: int) -> bool:
        entry = self._entries.get(producer_id)
        return entry is not None and entry.epoch >= epoch

    def __len__(self) -> int:
        return len(self._entries)
