"""RecordAccumulator: send order, buffer_memory, and send_batch's all-or-nothing, without Ray."""

from __future__ import annotations

import time

import pytest

from raylog.producer.accumulator import RecordAccumulator
from raylog.config import ProducerConfig
from raylog.errors import IllegalStateError, KafkaTimeoutError
from raylog.producer.futures import CallbackRunner
from raylog.metadata import TopicInfo


class StaticTopics:
    """Answers what the controller would: every topic has ``partitions`` partitions."""

    def __init__(self, partitions: int = 3):
        self.partitions = partitions

    def topic(self, name, max_age_s=None, create=None):
        return TopicInfo(None, [None] * self.partitions, self.partitions, 8 << 20, time.monotonic())


def accumulator(**config) -> RecordAccumulator:
    return RecordAccumulator(ProducerConfig(**config), StaticTopics(), CallbackRunner())


def test_send_batch_is_all_or_nothing_when_the_buffer_stays_full():
    """Issue 12: send_batch raised KafkaTimeoutError after some of its pieces were queued."""
    acc = accumulator(buffer_memory=10_000, max_block_ms=50)
    info = StaticTopics().topic("t")
    acc.append_stage("t", info, [None] * 8, [b"x" * 1000] * 8, 0, None, None, 8_000, keyed=False)
    with pytest.raises(KafkaTimeoutError):
        acc.append_stage("t", info, [None] * 5, [b"y" * 1000] * 5, 0, None, None, 5_000, keyed=False)
    (stage,) = acc.take_closed()
    assert stage.values == [b"x" * 1000] * 8, "nothing of the refused send_batch was queued"


def test_a_send_batch_larger_than_the_whole_buffer_goes_through_an_empty_buffer():
    acc = accumulator(buffer_memory=2_000, max_block_ms=50)
    acc.append_stage("t", StaticTopics().topic("t"), [None] * 5, [b"x" * 1000] * 5, 0, None, None, 5_000,
                     keyed=False)
    assert len(acc.take_closed()) == 1


def test_send_blocks_while_the_buffer_is_full_and_resumes_when_batches_complete():
    acc = accumulator(buffer_memory=2_000, max_block_ms=5_000, linger_ms=60_000)
    acc.append("t", None, b"x" * 1900, 0, 1916)
    released = []

    def release_later():
        time.sleep(0.2)
        released.append(time.monotonic())
        acc.release(1916)

    import threading

    threading.Thread(target=release_later).start()
    acc.append("t", None, b"y" * 900, 0, 916)
    assert acc.outstanding(), "the records are buffered, not lost"
    assert released and time.monotonic() >= released[0], "the second record waited for room"


def test_records_keep_send_order_when_send_batch_follows_send():
    acc = accumulator(linger_ms=60_000)
    acc.append("t", None, b"first", 0, 21)
    acc.append_stage("t", StaticTopics().topic("t"), [None], [b"second"], 0, None, None, 22, keyed=False)
    stages = acc.take_closed()
    assert [s.values for s in stages] == [[b"first"], [b"second"]]


def test_a_closed_accumulator_refuses_records():
    acc = accumulator()
    acc.close()
    with pytest.raises(IllegalStateError):
        acc.append("t", None, b"v", 0, 17)


def test_a_stages_credit_never_makes_a_send_wait_and_the_records_alone_fill_the_buffer():
    """An open stage reserves up to batch_size ahead for send()'s fast path; another topic's records
    take that credit back rather than wait, and only the records' own bytes count as used."""
    acc = accumulator(buffer_memory=10_000, batch_size=4_096, max_block_ms=1, linger_ms=60_000)
    acc.append("a", None, b"x" * 84, time.time_ns(), 100)
    assert acc.available_bytes() == 9_900, "credit is not counted as used"
    for _ in range(9):
        acc.append("b", None, b"y" * 984, time.time_ns(), 1_000)  # none of these may wait
    acc.append("a", None, b"x" * 84, time.time_ns(), 100)
    assert acc.available_bytes() == 10_000 - 9_200
    with pytest.raises(KafkaTimeoutError):
        acc.append("b", None, b"z" * 884, time.time_ns(), 900)
    acc.append("a", None, b"x" * 784, time.time_ns(), 800)
    assert acc.available_bytes() == 0
    acc.close()
    queued = acc.take_closed()
    assert sorted(len(s) for s in queued if s.topic == "a") == [3]
    assert sum(len(s) for s in queued if s.topic == "b") == 9, "the refused record was not queued"


def test_closed_stages_hold_exactly_their_records_bytes_until_their_batches_complete():
    acc = accumulator(buffer_memory=1 << 20, batch_size=64 << 10, linger_ms=60_000)
    for i in range(1_000):
        acc.append("t%d" % (i % 3), None, b"v" * 100, time.time_ns(), 116)
    acc.close()
    stages = acc.take_closed()
    assert sum(s.nbytes for s in stages) == 116_000 and all(s.reserved == s.nbytes for s in stages)
    assert acc.available_bytes() == (1 << 20) - 116_000
    for stage in stages:
        acc.release(stage.nbytes)
    assert acc.available_bytes() == 1 << 20 and acc._buffered == 0
