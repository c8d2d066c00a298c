"""Small helpers the integration tests share: a fresh topic, reading everything back."""

from __future__ import annotations

import time
import uuid

from raylog.records import TopicPartition


def fresh_topic(cluster, partitions: int = 1, **configs) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.admin().create_topic(name, partitions, **configs)
    return name


def consume_all(consumer, expected: int, timeout_s: float = 30.0) -> list:
    """ConsumerRecords until ``expected`` arrived or ``timeout_s`` passed."""
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=500).values():
            records.extend(recs)
    return records


def end_offsets(cluster, topic: str) -> dict:
    admin = cluster.admin()
    n = len(admin.describe_topics([topic])[0].partitions)
    return admin.end_offsets([TopicPartition(topic, p) for p in range(n)])
