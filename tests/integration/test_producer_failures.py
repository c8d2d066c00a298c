"""No failure stops a producer (issue 12), on real replica actors.

Each test first reproduces a failure that used to break a producer for good
(a batch rejected for being too large or keyless, a delivery timeout while
the replica was frozen, a callback that raised), then shows that later sends
to the same partition are all acknowledged, in order, without duplicates.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from raylog.errors import InvalidRecordError, KafkaTimeoutError, RecordTooLargeError
from raylog.producer.partitioner import partition_for_key
from raylog.records import TopicPartition
from tests.integration.conftest import wait_for
from tests.support.processes import pause
from tests.support.topics import consume_all, fresh_topic

pytestmark = pytest.mark.ray


def values_of(cluster, topic: str, expected: int) -> list[bytes]:
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    records = consume_all(consumer, expected)
    consumer.close()
    assert [r.offset for r in records] == list(range(len(records))), "no gap in the partition"
    return [r.value for r in records]


def test_a_rejected_record_does_not_poison_its_partition(cluster):
    """One incompressible record over max_message_bytes fails; 1,000 later sends all succeed."""
    topic = fresh_topic(cluster, 1, max_message_bytes=2000)
    producer = cluster.producer(linger_ms=0)
    assert producer.send(topic, b"first", partition=0).get(timeout=30).offset == 0
    with pytest.raises(RecordTooLargeError, match="max_message_bytes"):
        producer.send(topic, random.Random(0).randbytes(5000), partition=0).get(timeout=30)
    futures = [producer.send(topic, b"%d" % i, partition=0) for i in range(1000)]
    assert [f.get(timeout=30).offset for f in futures] == list(range(1, 1001))
    producer.close()
    assert values_of(cluster, topic, 1001) == [b"first"] + [b"%d" % i for i in range(1000)]


def test_a_batch_the_replica_rejects_uses_up_its_sequence(cluster):
    """A null key on a compacted topic is refused by the replica itself; the next batches follow."""
    topic = fresh_topic(cluster, 1, cleanup_policy="compact")
    producer = cluster.producer(linger_ms=0)
    producer.send(topic, b"v0", key=b"k0").get(timeout=30)
    with pytest.raises(InvalidRecordError):
        producer.send(topic, b"no key", partition=0).get(timeout=30)
    futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(1, 1001)]
    assert [f.get(timeout=30).offset for f in futures] == list(range(1, 1001))
    producer.close()
    assert values_of(cluster, topic, 1001) == [b"v%d" % i for i in range(1001)]


def test_a_delivery_timeout_while_the_replica_is_frozen_does_not_stop_later_sends(cluster):
    """The timed-out batch may or may not be in the log (it was sent); it is there at most once,
    and everything sent after it is acknowledged in order (KIP-360: a new epoch, sequence 0)."""
    topic = fresh_topic(cluster, 1)
    # The delivery timeout bounds every send of this producer, not only the one sent into the pause:
    # it is short enough to expire during the pause, under the replica's 9 s session (no fencing).
    producer = cluster.producer(linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=5000,
                                retry_backoff_ms=50)
    producer.send(topic, b"first").get(timeout=30)
    pid = cluster.admin().describe_partitions(topic)[0]["pid"]
    pause(pid)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.send(topic, b"maybe").get(timeout=30)
    finally:
        os.kill(pid, signal.SIGCONT)
    offsets = []
    for wave in range(10):  # each wave's 100 sends are far inside the delivery timeout, even loaded
        futures = [producer.send(topic, b"%d" % i) for i in range(wave * 100, wave * 100 + 100)]
        offsets += [f.get(timeout=60).offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 1000
    producer.close()
    values = values_of(cluster, topic, offsets[-1] + 1)
    assert values[0] == b"first"
    rest = values[1:]
    if rest[0] == b"maybe":
        rest = rest[1:]
    assert rest == [b"%d" % i for i in range(1000)], "nothing lost, duplicated or reordered after the timeout"


def test_a_raising_callback_does_not_stop_sends_or_flush(cluster):
    topic = fresh_topic(cluster, 2)
    producer = cluster.producer(linger_ms=0)
    producer.send(topic, b"boom").add_callback(lambda metadata: 1 / 0).add_errback(lambda e: 1 / 0)
    delivered = []
    futures = [producer.send(topic, b"%d" % i).add_callback(delivered.append) for i in range(200)]
    producer.flush(timeout=30)
    assert all(f.succeeded() for f in futures)
    assert len(delivered) == 200, "callbacks have run by the time flush returns"
    producer.close()


def test_batches_stay_within_the_topics_limit_and_records_around_a_large_one_arrive(cluster):
    """~1 MiB of small records plus one large record used to make one batch the broker rejected whole."""
    limit = 100_000
    topic = fresh_topic(cluster, 1, max_message_bytes=limit)
    producer = cluster.producer(linger_ms=50, compression_type="none")
    rng = random.Random(3)
    values = [rng.randbytes(400) for _ in range(2500)]
    values.insert(1200, rng.randbytes(90_000))
    futures = [producer.send(topic, v) for v in values]
    producer.flush(timeout=60)
    assert all(f.succeeded() for f in futures)
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    seen, sizes = [], []
    deadline = time.monotonic() + 30
    while len(seen) < len(values) and time.monotonic() < deadline:
        for chunk in consumer.poll_batch(timeout_ms=500):
            seen.extend(chunk.value_list())
            sizes.append(chunk.nbytes)
    assert seen == values
    assert max(sizes) <= limit
    producer.close()


def test_keyed_records_land_on_kafkas_partitions(cluster, seed):
    topic = fresh_topic(cluster, 6)
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randint(0, 40)) for _ in range(3000)]
    producer = cluster.producer()
    futures = [producer.send(topic, b"%d" % i, key=k) for i, k in enumerate(keys)]
    metadata = [f.get(timeout=60) for f in futures]
    assert [m.partition for m in metadata] == [partition_for_key(k, 6) for k in keys]
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    by_value = {r.value: r for r in consume_all(consumer, 3000)}
    for i, m in enumerate(metadata):
        record = by_value[b"%d" % i]
        assert (record.partition, record.offset, record.key) == (m.partition, m.offset, keys[i])
    producer.close()


def test_new_partitions_are_used_after_metadata_max_age(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer(metadata_max_age_ms=200, linger_ms=0)
    producer.send(topic, b"v", key=b"a").get(timeout=30)
    cluster.admin().create_partitions({topic: 3})

    def spreads():
        metas = [producer.send(topic, b"v", key=b"key-%d" % i).get(timeout=30) for i in range(30)]
        return {m.partition for m in metas} == {0, 1, 2}

    wait_for(spreads, timeout_s=20, interval_s=0.3)
    producer.close()


def test_the_consumers_buffer_stays_within_fetch_max_bytes(cluster):
    topic = fresh_topic(cluster, 4)
    producer = cluster.producer(batch_size=64 * 1024)
    for p in range(4):
        producer.send_batch(topic, [b"x" * 1000] * 3000, partition=p)
    producer.flush(timeout=60)
    cap = 512 * 1024
    consumer = cluster.consumer(topic, auto_offset_reset="earliest", fetch_max_bytes=cap)
    total, peak = 0, 0
    deadline = time.monotonic() + 60
    while total < 12_000 and time.monotonic() < deadline:
        total += sum(len(c) for c in consumer.poll_batch(timeout_ms=500, max_records=500))
        peak = max(peak, consumer._fetcher.buffered_bytes)
    assert total == 12_000
    assert peak <= cap + 70 * 1024, "at most one batch beyond the cap (the replica returns whole batches)"
    producer.close()


def test_iterating_the_consumer_streams_records_and_stops_after_consumer_timeout_ms(cluster):
    topic = fresh_topic(cluster, 2)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(500)], keys=[b"k%d" % (i % 9) for i in range(500)])
    producer.flush(timeout=30)
    consumer = cluster.consumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=1000)
    # Each iteration ends after a second without a record; on a loaded machine the first fetch may
    # take longer than that, so iterating again goes on from where the last one stopped.
    seen: list[bytes] = []
    deadline = time.monotonic() + 120
    while len(seen) < 500 and time.monotonic() < deadline:
        seen.extend(record.value for record in consumer)
    assert sorted(seen, key=int) == [b"%d" % i for i in range(500)]
    assert [record.value for record in consumer] == [], "with nothing left, an iteration ends empty"
    assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    producer.close()
