"""The sender's decisions that need no Ray: which batch may go out, and how long a retry waits."""

from __future__ import annotations

import random
import statistics

import numpy as np

from raylog.producer.batch_builder import ProducerBatch
from raylog.config import ProducerConfig
from raylog.records import TopicPartition
from raylog.producer.sender import PartitionState, admits, retry_backoff_s


def batch(attempts: int = 0) -> ProducerBatch:
    b = ProducerBatch(TopicPartition("t", 0), None, np.arange(1), bytearray(), 0, 0.0, 1)
    b.attempts = attempts
    return b


def test_a_retry_goes_out_even_when_the_in_flight_limit_is_reached():
    """Issue 12: batches in flight after a failed one wait at the replica for its sequence, so a
    retry held back behind them would stall the partition until they time out."""
    st = PartitionState()
    st.in_flight = 5
    assert admits(st, batch(attempts=1), cap=5)
    assert not admits(st, batch(attempts=0), cap=5)


def test_new_batches_wait_for_room_in_flight():
    st = PartitionState()
    st.in_flight = 4
    assert admits(st, batch(), cap=5)
    st.in_flight = 5
    assert not admits(st, batch(), cap=5)


def test_nothing_goes_out_while_an_epoch_bump_waits_for_calls_in_flight():
    st = PartitionState()
    st.bump_pending = True
    assert not admits(st, batch(), cap=5)
    assert not admits(st, batch(attempts=2), cap=5)


def test_backoff_doubles_up_to_its_cap_with_twenty_percent_jitter(seed):
    rng = random.Random(seed)
    config = ProducerConfig(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    for attempts, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        waits = [retry_backoff_s(attempts, config, rng) for _ in range(500)]
        assert base * 0.8 <= min(waits) and max(waits) <= base * 1.2
        assert statistics.pstdev(waits) > base * 0.05, "KIP-580: retries of producers that failed together spread"


def test_no_new_batch_goes_out_while_five_are_unresolved_even_with_calls_timed_out():
    """Issue 19, finding 11: a call that timed out here leaves the in-flight count, but its batch may
    be in the replica's log. Were a new batch sent, five appended after it would push it out of the
    replica's window of five per producer, and its retry would be appended twice."""
    st = PartitionState()
    st.in_flight = 4  # one call timed out and awaits its retry
    st.unresolved = 5
    assert not admits(st, batch(), cap=5)
    assert admits(st, batch(attempts=1), cap=5), "the retry itself goes out"
    st.unresolved = 4
    assert admits(st, batch(), cap=5)
