"""A Kafka listener on every node (issue 34), on a simulated 4-node cluster: each node's listener
speaks for its raylog node id on its own port, Metadata names each partition's leader as the
listener on its leader replica's node, and a kafka-python producer (acks=all, idempotent) rides
out the loss of a leader's node, listener and all, without losing or duplicating an acknowledged
record."""

from __future__ import annotations

import threading

import pytest
import ray

from raylog.records import TopicPartition
from tests.integration.conftest import wait_for
from tests.support.cluster import simulated_cluster

pytestmark = [pytest.mark.ray, pytest.mark.cluster, pytest.mark.slow]


def test_each_node_listens_and_a_producer_rides_out_the_loss_of_a_leaders_node(tmp_path):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    config = {"kafka_listener": "127.0.0.1:9092", "node_lost_timeout_ms": 0, "replica_lag_time_max_ms": 4000}
    with simulated_cluster(str(tmp_path / "data"), workers=3, cluster_config=config) as sim:
        cluster = sim.cluster
        nodes = {sim.raylog_node(n) for n in sim.node_ids()}
        wait_for(lambda: {b["node_id"] for b in ray.get(cluster.controller.kafka_brokers.remote())} == nodes,
                 timeout_s=120)
        brokers = ray.get(cluster.controller.kafka_brokers.remote())
        assert len({b["port"] for b in brokers}) == 4 and {b["host"] for b in brokers} == {"127.0.0.1"}
        bootstrap = cluster.bootstrap_servers
        assert len(bootstrap.split(",")) == 4

        admin = cluster.admin()
        topic = "wire-nodes"
        admin.create_topic(topic, 3, replication_factor=3, min_insync_replicas=2)
        leaders = {p["partition"]: next(r["node_id"] for r in p["replicas"] if r["replica_id"] == p["leader"])
                   for p in admin.describe_partitions(topic)}
        kafka_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            described = kafka_admin.describe_topics([topic])[0]["partitions"]
        finally:
            kafka_admin.close()
        assert {p["partition_index"]: p["leader_id"] for p in described} == leaders

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=2**31 - 1,
                                 request_timeout_ms=30_000, delivery_timeout_ms=300_000)
        acked, failed = [], []
        lock = threading.Lock()

        def sent(value):
            return lambda md: (lock.acquire(), acked.append((md.partition, md.offset, value)), lock.release())

        def send(start: int, count: int) -> None:
            for i in range(start, start + count):
                value = b"%d" % i
                producer.send(topic, value=value, partition=i % 3).add_callback(sent(value)).add_errback(
                    lambda exc: failed.append(exc))
            producer.flush(timeout=300)

        send(0, 300)
        head = sim.head_id()
        victim = next(p for p, node in leaders.items() if sim.ray_node(node) != head)
        sim.remove(sim.ray_node(leaders[victim]))
        send(300, 300)
        producer.close()
        assert failed == []
        assert len(acked) == 600

        consumer = cluster.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        stored = []
        try:
            wait_for(lambda: stored.extend((r.partition, r.offset, r.value) for rs in consumer.poll(timeout_ms=500)
                                           .values() for r in rs) or len(stored) >= 600, timeout_s=120)
        finally:
            consumer.close()
        assert sorted(stored) == sorted(acked)  # every acknowledged record once, where it was acknowledged
