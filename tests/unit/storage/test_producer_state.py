"""ProducerStateTable and its snapshots: dedup, ordering, fencing, wrap-around, surviving restarts."""

from __future__ import annotations

import pytest

from raylog.config import TopicConfig
from raylog.errors import DuplicateSequenceError, InvalidProducerEpochError, RecordTooLargeError
from raylog.storage import batch as rb
from raylog.storage import files
from raylog.storage.log import PartitionLog
from raylog.storage.producer_state import DEDUP_WINDOW, BatchOutcome, ProducerStateManager, ProducerStateTable
from tests.unit.storage.disk_calls import directory_synced_after


def outcome(base: int, last: int) -> BatchOutcome:
    return BatchOutcome(base, last)


def test_unknown_producer_starts_at_sequence_zero_and_later_batches_wait_for_it():
    """Regression: Ray let batch 607 overtake batch 0 of a new producer; 607 must not start it."""
    table = ProducerStateTable()
    assert table.check(7, 0, 0)[0] == ProducerStateTable.APPEND
    assert table.check(7, 0, 607)[0] == ProducerStateTable.WAIT
    assert not table.knows(7, 0)
    table.record(7, 0, 0, 607, outcome(0, 606))
    assert table.knows(7, 0) and table.check(7, 0, 607)[0] == ProducerStateTable.APPEND


def test_retry_of_an_appended_batch_is_a_duplicate_with_the_first_outcome():
    table = ProducerStateTable()
    table.record(7, 0, 0, 10, outcome(100, 109))
    verdict, previous = table.check(7, 0, 0)
    assert verdict == ProducerStateTable.DUPLICATE and previous.base_offset == 100


def test_batch_that_skips_ahead_waits_and_the_next_in_sequence_appends():
    table = ProducerStateTable()
    table.record(7, 0, 0, 10, outcome(0, 9))
    assert table.check(7, 0, 20)[0] == ProducerStateTable.WAIT
    assert table.check(7, 0, 10)[0] == ProducerStateTable.APPEND


def test_sequence_older_than_the_dedup_window_is_refused_as_a_duplicate_whose_outcome_is_forgotten():
    """Issue 19, finding 11: it was sent before and may be in the log; "not appended" would make the
    producer send it again."""
    table = ProducerStateTable()
    for n in range(DEDUP_WINDOW + 1):
        table.record(7, 0, n * 10, 10, outcome(n * 10, n * 10 + 9))
    with pytest.raises(DuplicateSequenceError):
        table.check(7, 0, 0)


def test_older_producer_epoch_is_fenced():
    table = ProducerStateTable()
    table.record(7, 3, 0, 1, outcome(0, 0))
    with pytest.raises(InvalidProducerEpochError):
        table.check(7, 2, 1)


def test_a_new_epoch_starts_again_at_sequence_zero():
    """KIP-360: after a failure it cannot resolve, a producer bumps its epoch and restarts at 0."""
    table = ProducerStateTable()
    table.record(7, 0, 0, 50, outcome(0, 49))
    assert table.check(7, 1, 0)[0] == ProducerStateTable.APPEND
    assert table.check(7, 1, 10)[0] == ProducerStateTable.WAIT


def test_a_rejected_batch_uses_up_its_sequence_so_the_next_batch_does_not_wait():
    """Issue 12: one rejected batch must not poison its partition for the producer's lifetime."""
    table = ProducerStateTable()
    table.record(7, 0, 0, 1, outcome(0, 0))
    rejected = RecordTooLargeError("too large")
    table.record(7, 0, 1, 1, rejected)
    assert table.check(7, 0, 2)[0] == ProducerStateTable.APPEND
    verdict, previous = table.check(7, 0, 1)
    assert verdict == ProducerStateTable.DUPLICATE and previous is rejected, "a retry gets the same error"


def test_sequences_wrap_after_two_to_the_31():
    table = ProducerStateTable()
    last = 2**31 - 5
    table.record(7, 0, last, 5, outcome(0, 4))
    assert table.check(7, 0, 0)[0] == ProducerStateTable.APPEND, "after 2**31 - 1 comes 0"
    assert table.check(7, 0, 3)[0] == ProducerStateTable.WAIT, "a batch past the wrap is ahead, not behind"
    assert table.check(7, 0, last)[0] == ProducerStateTable.DUPLICATE
    table.record(7, 0, 0, 10, outcome(5, 14))
    assert table.check(7, 0, 10)[0] == ProducerStateTable.APPEND


SMALL = TopicConfig(segment_bytes=2048)


def produce(log: PartitionLog, table: ProducerStateTable, pid: int, seq: int, n: int = 3) -> None:
    data = rb.build([b"x" * 100] * n, producer_id=pid, producer_epoch=0, base_sequence=seq, compression="none")
    info = log.append(data, 0)
    table.record(pid, 0, seq, n, outcome(info.base_offset, info.last_offset))


def test_producer_state_older_than_the_active_segment_survives_a_restart(tmp_path):
    """Issue 13: state was rebuilt from the active segment only, so a retry of a batch older than the
    last roll could be appended twice."""
    manager = ProducerStateManager(tmp_path)
    table = ProducerStateTable()
    log = PartitionLog(tmp_path, SMALL, on_roll=lambda offset: manager.take_snapshot(table, offset))
    produce(log, table, pid=1, seq=0)
    for seq in range(0, 60, 3):
        produce(log, table, pid=2, seq=seq)
    assert len(log.segments) > 3
    log.close()
    rebuilt = ProducerStateManager(tmp_path).load(PartitionLog(tmp_path, SMALL))
    verdict, previous = rebuilt.check(1, 0, 0)
    assert verdict == ProducerStateTable.DUPLICATE and previous.base_offset == 0
    assert rebuilt.check(2, 0, 60)[0] == ProducerStateTable.APPEND
    assert rebuilt.check(2, 0, 57)[0] == ProducerStateTable.DUPLICATE


def test_snapshots_above_a_truncation_point_are_dropped(tmp_path):
    manager = ProducerStateManager(tmp_path)
    table = ProducerStateTable()
    log = PartitionLog(tmp_path, SMALL, on_roll=lambda offset: manager.take_snapshot(table, offset))
    for seq in range(0, 45, 3):
        produce(log, table, pid=2, seq=seq)
    log.truncate_to(12)
    manager.truncate(log.log_end_offset)
    rebuilt = manager.load(log)
    assert rebuilt.check(2, 0, 12)[0] == ProducerStateTable.APPEND, "the truncated batches are forgotten"


def test_a_corrupt_snapshot_is_ignored_and_the_log_replayed(tmp_path):
    manager = ProducerStateManager(tmp_path)
    table = ProducerStateTable()
    log = PartitionLog(tmp_path, SMALL, on_roll=lambda offset: manager.take_snapshot(table, offset))
    for seq in range(0, 30, 3):
        produce(log, table, pid=2, seq=seq)
    for path in tmp_path.glob("*.snapshot"):
        path.write_bytes(b"RLPS\x00\x00\x00\x01garbage")
    rebuilt = manager.load(log)
    assert rebuilt.check(2, 0, 30)[0] == ProducerStateTable.APPEND


def test_a_snapshot_reaches_the_directory_before_take_snapshot_returns(tmp_path, disk_calls):
    """Finding 17: the rename of a snapshot into place is fsynced with its directory."""
    table = ProducerStateTable()
    table.record(7, 0, 0, 10, outcome(0, 9))
    ProducerStateManager(tmp_path).take_snapshot(table, 10)
    assert directory_synced_after(disk_calls, tmp_path, "replace", files.snapshot_path(tmp_path, 10))
