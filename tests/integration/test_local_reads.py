"""Consumers on the leader's node read its segment files (raylog/storage/local_reader.py) and get
exactly what fetch calls return, through retention, delete_records, compaction and a SIGKILLed
leader; a consumer with local_reads=False is the reference in each test."""

from __future__ import annotations

import os
import random
import signal

import pytest

from raylog import TopicPartition
from tests.integration.conftest import wait_for
from tests.support.topics import fresh_topic

pytestmark = [pytest.mark.ray]


def read_all(cluster, topic: str, partitions: int, local: bool, upto: dict | None = None) -> list:
    """(partition, offset, key, value) of every record up to the end offsets, in order."""
    consumer = cluster.consumer(auto_offset_reset="earliest", local_reads=local)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    ends = upto or consumer.end_offsets(tps)
    out = []
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        for batch in consumer.poll_batch(timeout_ms=2000):
            out += [(batch.partition, o, k, v) for o, k, v in
                    zip(batch.offsets.tolist(), batch.key_list(), batch.value_list())]
    metrics = consumer.metrics()["consumer-fetch-manager-metrics"]
    consumer.close()
    return sorted(out), metrics


def produce(cluster, topic: str, rng: random.Random, batches: int, compression: str = "lz4") -> None:
    producer = cluster.producer(compression_type=compression, linger_ms=0)
    for _ in range(batches):
        n = rng.randint(1, 300)
        producer.send_batch(topic, [rng.randbytes(rng.randint(0, 200)) for _ in range(n)],
                            keys=[b"k%d" % rng.randrange(50) for _ in range(n)])
    producer.flush(timeout=60)
    producer.close()


def test_records_read_locally_are_the_records_the_leader_fetches(cluster, seed):
    rng = random.Random(seed)
    topic = fresh_topic(cluster, 3, segment_bytes=64 * 1024)
    produce(cluster, topic, rng, 40, rng.choice(["lz4", "none", "zstd"]))
    local, local_metrics = read_all(cluster, topic, 3, local=True)
    remote, remote_metrics = read_all(cluster, topic, 3, local=False)
    assert local == remote and len(local) > 0
    assert local_metrics["bytes-read-locally-total"] > 0 and local_metrics["bytes-fetched-remotely-total"] == 0
    assert remote_metrics["bytes-read-locally-total"] == 0 and remote_metrics["bytes-fetched-remotely-total"] > 0


def test_a_local_reader_waits_for_new_records_without_a_call_and_sees_each_once(cluster):
    topic = fresh_topic(cluster, 1)
    tp = TopicPartition(topic, 0)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([tp])
    assert consumer.poll_batch(timeout_ms=200) == []
    producer = cluster.producer(linger_ms=0)
    seen = []
    for i in range(50):
        producer.send(topic, b"%d" % i).get(10)
        while len(seen) <= i:
            for batch in consumer.poll_batch(timeout_ms=5000):
                seen += batch.value_list()
    assert seen == [b"%d" % i for i in range(50)]
    assert consumer.metrics()["consumer-fetch-manager-metrics"]["bytes-fetched-remotely-total"] == 0
    producer.close()
    consumer.close()


def test_reads_across_retention_delete_records_and_compaction_match_the_fetch_path(cluster, seed):
    rng = random.Random(seed)
    admin = cluster.admin()
    deleting = fresh_topic(cluster, 1, segment_bytes=16 * 1024)
    compacted = fresh_topic(cluster, 1, segment_bytes=16 * 1024, cleanup_policy="compact")
    for topic in (deleting, compacted):
        produce(cluster, topic, rng, 30)
    tp = TopicPartition(deleting, 0)
    reader = cluster.consumer(auto_offset_reset="earliest")
    reader.assign([tp])
    half = admin.end_offsets([tp])[tp] // 2
    got = []
    while len(got) < half // 4:
        for batch in reader.poll_batch(timeout_ms=2000, max_records=100):
            got += batch.offsets.tolist()
    admin.delete_records({tp: half})
    admin.alter_topic_config(deleting, {"retention.bytes": "32768"})
    produce(cluster, deleting, rng, 10)
    end = admin.end_offsets([tp])[tp]
    while reader.position(tp) < end:
        for batch in reader.poll_batch(timeout_ms=2000):
            got += batch.offsets.tolist()
    start = admin.beginning_offsets([tp])[tp]
    # What the reader got: strictly increasing, nothing twice, and everything from the new start on.
    assert got == sorted(set(got)) and set(range(start, end)) <= set(got)
    reader.close()

    leader = cluster.metadata.leader(compacted, 0)
    import ray

    ray.get(leader.maintain_now.remote())
    local, _ = read_all(cluster, compacted, 1, local=True)
    remote, _ = read_all(cluster, compacted, 1, local=False)
    assert local == remote


def test_a_sigkilled_leader_leaves_local_readers_correct(cluster, seed):
    rng = random.Random(seed)
    topic = fresh_topic(cluster, 1)
    tp = TopicPartition(topic, 0)
    produce(cluster, topic, rng, 10)
    reader = cluster.consumer(auto_offset_reset="earliest")
    reader.assign([tp])
    got = []
    while not got:
        for batch in reader.poll_batch(timeout_ms=2000, max_records=50):
            got += list(zip(batch.offsets.tolist(), batch.value_list()))
    victim = cluster.admin().describe_partitions(topic)[0]["pid"]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: cluster.admin().describe_partitions(topic)[0].get("pid") not in (None, victim), timeout_s=60)
    produce(cluster, topic, rng, 5)
    end = cluster.admin().end_offsets([tp])[tp]
    while reader.position(tp) < end:
        for batch in reader.poll_batch(timeout_ms=2000):
            got += list(zip(batch.offsets.tolist(), batch.value_list()))
    reference, _ = read_all(cluster, topic, 1, local=False, upto={tp: end})
    assert [o for o, _ in got] == list(range(end))
    assert [v for _, v in got] == [v for _, _, _, v in reference]
    reader.close()
