"""Small helpers the integration tests share: a fresh topic, reading everything back."""

from __future__ import annotations

import threading
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


def create_in_background(admin, name: str, partitions: int, **kwargs) -> tuple[threading.Thread, dict]:
    """create_topic on a thread; the dict gets its "description" or its "error"."""
    created: dict = {}

    def create():
        try:
            created["description"] = admin.create_topic(name, partitions, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's assertion
            created["error"] = exc

    thread = threading.Thread(target=create)
    thread.start()
    return thread, created
