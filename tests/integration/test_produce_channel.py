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
    node, _, name = ray.get(leader.read_location.remote())
    assert node == ray.get_runtime_context().get_node_id() and name
    channel = ProduceChannel(name)
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
