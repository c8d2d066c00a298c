"""ReplicaState and ProducerStateTable: the pure decisions under the replica actor."""

import pytest

from actors.replica_state import DEDUP_WINDOW, ProducerStateTable, ReplicaState
from raylog.errors import InvalidProducerEpochError, OutOfOrderSequenceError, RecordTooLargeError
from raylog.protocol import ProduceResponse


def response(base: int, last: int) -> ProduceResponse:
    return ProduceResponse(base, last, -1, 0)


def test_high_watermark_follows_leader_alone_in_isr():
    state = ReplicaState(replica_id=0, leader_epoch=0, log_start_offset=0, log_end_offset=0)
    assert state.on_leader_append(10) == 10
    assert state.log_start_offset <= state.high_watermark <= 10


def test_high_watermark_waits_for_every_isr_member():
    state = ReplicaState(0, 0, 0, 0)
    state.isr.add(1)
    state.on_leader_append(10)
    assert state.high_watermark == 0
    assert state.on_follower_fetch(1, 6) == 6
    assert state.on_follower_fetch(1, 10) == 10


def test_high_watermark_never_moves_backwards_on_a_lagging_fetch():
    state = ReplicaState(0, 0, 0, 0)
    state.isr.add(1)
    state.on_leader_append(10)
    state.on_follower_fetch(1, 8)
    assert state.on_follower_fetch(1, 5) == 8


def test_truncation_keeps_start_le_high_watermark_le_end():
    state = ReplicaState(0, 0, 0, 20)
    state.on_leader_append(20)
    state.on_truncate(log_start_offset=5, log_end_offset=12)
    assert 5 <= state.high_watermark <= 12


def test_unknown_producer_starts_at_sequence_zero_and_later_batches_wait_for_it():
    """Regression: Ray let batch 607 overtake batch 0 of a new producer; 607 must not start it."""
    table = ProducerStateTable()
    assert table.check(7, 0, 0)[0] == ProducerStateTable.APPEND
    assert table.check(7, 0, 607)[0] == ProducerStateTable.WAIT
    assert not table.knows(7, 0)
    table.record(7, 0, 0, 607, response(0, 606))
    assert table.knows(7, 0) and table.check(7, 0, 607)[0] == ProducerStateTable.APPEND


def test_retry_of_an_appended_batch_is_a_duplicate_with_the_first_response():
    table = ProducerStateTable()
    table.record(7, 0, 0, 10, response(100, 109))
    verdict, previous = table.check(7, 0, 0)
    assert verdict == ProducerStateTable.DUPLICATE and previous.base_offset == 100


def test_batch_that_skips_ahead_waits_and_the_next_in_sequence_appends():
    table = ProducerStateTable()
    table.record(7, 0, 0, 10, response(0, 9))
    assert table.check(7, 0, 20)[0] == ProducerStateTable.WAIT
    assert table.check(7, 0, 10)[0] == ProducerStateTable.APPEND


def test_sequence_older_than_the_dedup_window_is_refused():
    table = ProducerStateTable()
    for n in range(DEDUP_WINDOW + 1):
        table.record(7, 0, n * 10, 10, response(n * 10, n * 10 + 9))
    with pytest.raises(OutOfOrderSequenceError):
        table.check(7, 0, 0)


def test_older_producer_epoch_is_fenced():
    table = ProducerStateTable()
    table.record(7, 3, 0, 1, response(0, 0))
    with pytest.raises(InvalidProducerEpochError):
        table.check(7, 2, 1)


def test_a_new_epoch_starts_again_at_sequence_zero():
    """KIP-360: after a failure it cannot resolve, a producer bumps its epoch and restarts at 0."""
    table = ProducerStateTable()
    table.record(7, 0, 0, 50, response(0, 49))
    assert table.check(7, 1, 0)[0] == ProducerStateTable.APPEND
    assert table.check(7, 1, 10)[0] == ProducerStateTable.WAIT


def test_a_rejected_batch_uses_up_its_sequence_so_the_next_batch_does_not_wait():
    """Issue 12: one rejected batch must not poison its partition for the producer's lifetime."""
    table = ProducerStateTable()
    table.record(7, 0, 0, 1, response(0, 0))
    rejected = RecordTooLargeError("too large")
    table.record(7, 0, 1, 1, rejected)
    assert table.check(7, 0, 2)[0] == ProducerStateTable.APPEND
    verdict, previous = table.check(7, 0, 1)
    assert verdict == ProducerStateTable.DUPLICATE and previous is rejected, "a retry gets the same error"


def test_sequences_wrap_after_two_to_the_31():
    table = ProducerStateTable()
    last = 2**31 - 5
    table.record(7, 0, last, 5, response(0, 4))
    assert table.check(7, 0, 0)[0] == ProducerStateTable.APPEND, "after 2**31 - 1 comes 0"
    assert table.check(7, 0, 3)[0] == ProducerStateTable.WAIT, "a batch past the wrap is ahead, not behind"
    assert table.check(7, 0, last)[0] == ProducerStateTable.DUPLICATE
    table.record(7, 0, 0, 10, response(5, 14))
    assert table.check(7, 0, 10)[0] == ProducerStateTable.APPEND
