"""RecordAccumulator: send order, buffer_memory, and send_batch's all-or-nothing, without Ray."""

from __future__ import annotations

import threading
import time

import pytest

from raylog.producer import accumulator as accumulator_module
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


class WaitSeen(threading.Condition):
    """The accumulator's own condition, telling a test when a send() starts waiting on it."""

    def __init__(self, lock):
        super().__init__(lock)
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return super().wait(timeout)


def accumulator(**config) -> RecordAccumulator:
    return RecordAccumulator(ProducerConfig(**config), StaticTopics(), CallbackRunner())


def full_send(*args):
    raise AssertionError(f"the plain path handed {args!r} to the full send()")


def send(acc: RecordAccumulator, topic: str, value: bytes):
    """send() of an unkeyed record through the producer's plain path."""
    return acc.plain_send(full_send)(topic, value)


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
    acc = accumulator(buffer_memory=2_000, max_block_ms=600_000, linger_ms=60_000)
    acc._space = seen = WaitSeen(acc._lock)
    send(acc, "t", b"x" * 1900)

    def release_once_waiting():
        seen.waiting.wait(60)
        acc.release(1916)

    releaser = threading.Thread(target=release_once_waiting)
    releaser.start()
    send(acc, "t", b"y" * 900)
    releaser.join(60)
    assert seen.waiting.is_set(), "the second record waited for room"
    assert acc.outstanding(), "the records are buffered, not lost"


def test_records_keep_send_order_when_send_batch_follows_send():
    acc = accumulator(linger_ms=60_000)
    send(acc, "t", b"first")
    acc.append_stage("t", StaticTopics().topic("t"), [None], [b"second"], 0, None, None, 22, keyed=False)
    stages = acc.take_closed()
    assert [s.values for s in stages] == [[b"first"], [b"second"]]


def test_a_closed_accumulator_refuses_records():
    acc = accumulator()
    acc.close()
    with pytest.raises(IllegalStateError):
        send(acc, "t", b"v")


@pytest.mark.parametrize("value, extra", [
    ("text", {}),
    (None, {}),
    (bytearray(b"v"), {}),
    (b"v", {"key": "k"}),
    (b"v", {"headers": [("h", b"1")]}),
    (b"v", {"headers": []}),
    (b"v", {"partition": 0}),
    (b"v", {"timestamp_ms": 5}),
    (b"v" * 985, {}),
    (b"v" * 980, {"key": b"k" * 5}),
], ids=["str", "tombstone", "bytearray", "str-key", "headers", "empty-headers", "partition", "timestamp",
        "too-large", "too-large-with-key"])
def test_the_plain_path_hands_any_other_record_to_the_full_send_unchanged(value, extra):
    """Only bytes, with no headers, partition or timestamp and within max_request_size, are the
    plain path's; the full send() gets everything else with the arguments as given."""
    acc = accumulator(max_request_size=1_000, linger_ms=60_000)
    handed = []
    send = acc.plain_send(lambda *args: handed.append(args) or "full send")
    assert send("t", value, **extra) == "full send"
    args = dict(key=None, headers=None, partition=None, timestamp_ms=None) | extra
    assert handed == [("t", value, args["key"], args["headers"], args["partition"], args["timestamp_ms"])]
    assert not acc._open and not acc._closed_stages, "nothing was queued"


def test_the_plain_path_queues_keyed_and_unkeyed_bytes_in_send_order():
    acc = accumulator(max_request_size=1_000, linger_ms=60_000)
    send = acc.plain_send(full_send)
    futures = [send("t", b"v" * 984), send("t", b"w", b"k"), send("t", value=b"x" * 979, key=b"k" * 5)]
    assert [f[1] for f in futures] == [0, 1, 2]
    stage = acc._open["t"]
    assert (stage.keys, stage.values) == ([None, b"k", b"k" * 5], [b"v" * 984, b"w", b"x" * 979])
    assert stage.nbytes == 1_000 + 18 + 1_000


def test_a_stages_credit_never_makes_a_send_wait_and_the_records_alone_fill_the_buffer():
    """An open stage reserves up to batch_size ahead for send()'s fast path; another topic's records
    take that credit back rather than wait, and only the records' own bytes count as used."""
    acc = accumulator(buffer_memory=10_000, batch_size=4_096, max_block_ms=1, linger_ms=60_000)
    send(acc, "a", b"x" * 84)
    assert acc.available_bytes() == 9_900, "credit is not counted as used"
    for _ in range(9):
        send(acc, "b", b"y" * 984)  # none of these may wait
    send(acc, "a", b"x" * 84)
    assert acc.available_bytes() == 10_000 - 9_200
    with pytest.raises(KafkaTimeoutError):
        send(acc, "b", b"z" * 884)
    send(acc, "a", b"x" * 784)
    assert acc.available_bytes() == 0
    acc.close()
    queued = acc.take_closed()
    assert sorted(len(s) for s in queued if s.topic == "a") == [3]
    assert sum(len(s) for s in queued if s.topic == "b") == 9, "the refused record was not queued"


def test_closed_stages_hold_exactly_their_records_bytes_until_their_batches_complete():
    acc = accumulator(buffer_memory=1 << 20, batch_size=64 << 10, linger_ms=60_000)
    for i in range(1_000):
        send(acc, "t%d" % (i % 3), b"v" * 100)
    acc.close()
    stages = acc.take_closed()
    assert sum(s.nbytes for s in stages) == 116_000 and all(s.reserved == s.nbytes for s in stages)
    assert acc.available_bytes() == (1 << 20) - 116_000
    for stage in stages:
        acc.release(stage.nbytes)
    assert acc.available_bytes() == 1 << 20 and acc._buffered == 0


def fill_a_stage(acc: RecordAccumulator) -> None:
    """send() records until one of them fills (and so closes) the open stage."""
    while not acc._closed_stages:
        send(acc, "t", b"x" * 984)


def test_the_send_after_one_that_filled_a_stage_waits_until_the_sender_has_offered_it(monkeypatch):
    """Issue 33: under the GIL a sender thread that releases it (numpy, lz4, a socket write) got it
    back from a caller looping on send() only after the 5 ms switch interval, so a 38,751-record
    stage took 203 ms to cut (8 ms alone) and nothing reached a replica until the loop ended. The
    send() after one that filled a stage now waits until the sender has cut it and offered its
    batches."""
    monkeypatch.setattr(accumulator_module, "HANDOFF_WAIT_S", 600.0)
    acc = accumulator(batch_size=10_000, linger_ms=60_000)
    acc._sender_ready = seen = WaitSeen(acc._lock)
    fill_a_stage(acc)
    sent = threading.Event()
    sender = threading.Thread(target=lambda: (send(acc, "t", b"y"), sent.set()))
    sender.start()
    assert seen.waiting.wait(60), "the send() after a filled stage never waited for the sender"
    assert not sent.is_set(), "the send() after a filled stage went on without the sender"
    (stage,) = acc.take_closed()
    acc.offered()
    sender.join(60)
    assert sent.is_set()
    assert acc._open["t"].values == [b"y"], "the waiting record opened the next stage"
    assert stage.closed and stage.values[-1] == b"x" * 984


def test_a_send_waits_for_a_stalled_sender_at_most_once_per_filled_stage(monkeypatch):
    """A sender held up elsewhere (a metadata call) delays one send() by HANDOFF_WAIT_S, not each."""
    monkeypatch.setattr(accumulator_module, "HANDOFF_WAIT_S", 0.05)
    acc = accumulator(batch_size=10_000, linger_ms=60_000)
    fill_a_stage(acc)
    send(acc, "t", b"y")  # waits out HANDOFF_WAIT_S: nobody takes the stage
    assert not acc._filled
    for _ in range(3):
        send(acc, "t", b"z")
    assert acc._open["t"].values == [b"y", b"z", b"z", b"z"]


def test_a_send_with_max_block_ms_zero_never_waits_for_the_sender(monkeypatch):
    monkeypatch.setattr(accumulator_module, "HANDOFF_WAIT_S", 600.0)
    acc = accumulator(batch_size=10_000, linger_ms=60_000, max_block_ms=0)
    fill_a_stage(acc)
    send(acc, "t", b"y")  # with no sender, waiting would take 600 s
    assert acc._open["t"].values == [b"y"]
