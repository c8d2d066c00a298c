"""A producer on a partition leader's node sends its batches over the same-node channel
(raylog/produce_channel.py) to the same produce: the log is the one Ray calls make, and a
SIGKILLed leader loses no acknowledged record and appends none twice (tests/support/history.py)."""

from __future__ import annotations

import os
import signal

import pytest

from raylog import TopicPartition
from tests.integration.conftest import wait_for
from tests.support.topics import fresh_topic
from tests.support.workload import Workload, read_everything

pytestmark = [pytest.mark.ray]


def produce_and_read(cluster, topic: str, local: bool) -> tuple[list, dict]:
    producer = cluster.producer(local_produce=local, linger_ms=0, acks=1)
    futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7)) for i in range(300)]
    # Pinned: unkeyed runs go to whichever partition the sticky partitioner picks.
    futures.append(producer.send_batch(topic, [b"b%d" % i for i in range(5000)], partition=1))
    metadata = [f.get(60) for f in futures[:-1]]
    futures[-1].get(60)
    metrics = producer.metrics()["producer-metrics"]
    producer.close()
    consumer = cluster.consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(topic, p) for p in range(2)]
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    records = []
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        for r in (r for rs in consumer.poll(timeout_ms=2000, max_records=10_000).values() for r in rs):
            records.append((r.partition, r.offset, r.key, r.value))
    consumer.close()
    # Each acknowledged record is where its metadata says.
    at = {(p, o): v for p, o, _, v in records}
    assert all(at[(m.partition, m.offset)] == b"v%d" % i for i, m in enumerate(metadata))
    return sorted(((p, k, v) for p, _, k, v in records), key=lambda r: (r[0], r[1] or b"", r[2])), metrics


def test_a_producer_on_the_leaders_node_uses_the_channel_and_writes_what_calls_write(cluster):
    via_channel, metrics = produce_and_read(cluster, fresh_topic(cluster, 2), local=True)
    via_calls, call_metrics = produce_and_read(cluster, fresh_topic(cluster, 2), local=False)
    assert metrics["requests-sent-locally-total"] > 0
    assert call_metrics["requests-sent-locally-total"] == 0
    assert via_channel == via_calls


def test_a_bad_batch_sent_over_the_channel_gets_the_replicas_error_and_never_reaches_the_log(cluster):
    import ray

    from raylog.errors import CorruptRecordError, FencedLeaderEpochError, InvalidRequestError
    from raylog.produce_channel import ProduceChannel
    from raylog.storage import batch as rb

    topic = fresh_topic(cluster, 1)
    producer = cluster.producer(linger_ms=0)
    assert producer.send(topic, b"first").get(60).offset == 0
    producer.close()
    leader = cluster.metadata.leader(topic, 0)
    node, _, name, secret = ray.get(leader.read_location.remote())
    assert node == ray.get_runtime_context().get_node_id() and name and len(bytes.fromhex(secret)) == 32
    channel = ProduceChannel(name, bytes.fromhex(secret))
    try:
        good = bytearray(rb.build([b"x"], timestamps_ms=[1]))
        bad = bytearray(good)
        bad[-1] ^= 0xFF  # the CRC no longer matches
        with pytest.raises(CorruptRecordError):
            channel.produce(bytes(bad), 1, None, 1000).result(30)
        with pytest.raises((CorruptRecordError, InvalidRequestError)):
            channel.produce(b"not a batch", 1, None, 1000).result(30)
        with pytest.raises(FencedLeaderEpochError):
            channel.produce(bytes(good), 1, 99, 1000).result(30)  # a leader epoch it does not have
        assert channel.produce(bytes(good), 1, None, 1000).result(30)[0] == 1
    finally:
        channel.close()
    tp = TopicPartition(topic, 0)
    assert cluster.admin().end_offsets([tp])[tp] == 2


def test_a_fetch_over_the_channel_answers_what_the_leaders_fetch_call_answers(cluster):
    """The Kafka listener's fetches on the leader's node (issue 34) go over the channel: the answer
    is the consumer fetch a Ray call gets, errors included."""
    import ray

    from raylog.errors import FencedLeaderEpochError, OffsetOutOfRangeError
    from raylog.produce_channel import ProduceChannel

    topic = fresh_topic(cluster, 1)
    producer = cluster.producer(linger_ms=0, acks="all")
    futures = [producer.send(topic, b"r%d" % i) for i in range(50)]
    assert [f.get(60).offset for f in futures] == list(range(50))
    producer.close()
    leader = cluster.metadata.leader(topic, 0)
    _, _, name, secret = ray.get(leader.read_location.remote())
    channel = ProduceChannel(name, bytes.fromhex(secret))
    try:
        by_call = ray.get(leader.fetch.remote(0, 1 << 20, 0, 1, -1, -1))
        by_channel = channel.fetch(0, 1 << 20, 0, 1, None).result(30)
        assert len(by_channel[0]) > 50 * 3 and bytes(by_channel[0]) == bytes(by_call[0])
        assert tuple(by_channel[1:]) == tuple(by_call[1:]) == (50, 0, 50)
        assert channel.fetch(50, 1 << 20, 0, 1, None).result(30)[0] == b""  # at the end: nothing yet
        with pytest.raises(OffsetOutOfRangeError):
            channel.fetch(51, 100, 0, 1, None).result(30)
        with pytest.raises(FencedLeaderEpochError):
            channel.fetch(0, 100, 0, 1, 99).result(30)  # a leader epoch it does not have
    finally:
        channel.close()


def test_a_sigkilled_leader_loses_no_record_acknowledged_over_the_channel(cluster):
    topic = fresh_topic(cluster, 2)
    workload = Workload(cluster, topic, request_timeout_ms=10_000)
    try:
        wait_for(lambda: workload.acked() > 300, timeout_s=60)
        for partition in (0, 1, 0):
            victim = cluster.admin().describe_partitions(topic)[partition]["pid"]
            os.kill(victim, signal.SIGKILL)
            before = workload.acked()
            wait_for(lambda: workload.acked() > before + 300, timeout_s=90, interval_s=0.5)
        assert workload.producer.metrics()["producer-metrics"]["requests-sent-locally-total"] > 0
    finally:
        workload.stop()
    anomalies = workload.history.check(read_everything(cluster, topic))
    assert anomalies == {}, {k: v[:5] for k, v in anomalies.items()}


def new_leader_pid(cluster, topic: str, killed: set) -> int | None:
    pid = cluster.admin().describe_partitions(topic)[0].get("pid")
    return None if pid in killed else pid


def test_without_idempotence_a_producer_is_at_least_once_and_in_order_with_one_request_in_flight(cluster):
    """What a producer with enable_idempotence=False gets, as Kafka's does (docs/architecture.md):
    every acknowledged record is in the log, possibly more than once (a batch resent after a broken
    channel or a lost answer is appended again), and the order of first appearances is the send
    order only with max_in_flight_requests_per_connection=1: one batch at a time, whichever way it
    goes (the channel, or a Ray call while the channel is down), so a retry never overtakes."""
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer(enable_idempotence=False, max_in_flight_requests_per_connection=1, acks=1,
                                linger_ms=0, retries=1000, request_timeout_ms=5000)
    acked = []
    killed = set()
    try:
        for round_ in range(3):
            values = [b"%06d" % (round_ * 1000 + i) for i in range(1000)]
            futures = [producer.send(topic, v) for v in values]
            if round_ < 2:
                # The leader the previous round killed is back (restarted by Ray) before this one dies.
                pid = wait_for(lambda: new_leader_pid(cluster, topic, killed), timeout_s=60)
                killed.add(pid)
                os.kill(pid, signal.SIGKILL)  # breaks the channel
            for future, value in zip(futures, values):
                future.get(60)
                acked.append(int(value))
        assert producer.metrics()["producer-metrics"]["requests-sent-locally-total"] > 0
    finally:
        producer.close()
    log = [int(v) for _, v in read_everything(cluster, topic)[0]]
    first = list(dict.fromkeys(log))
    assert first == sorted(first), "first appearances keep the send order"
    assert set(acked) <= set(log), "every acknowledged record is there"
    print(f"{len(log) - len(first)} records appended twice by retries")
