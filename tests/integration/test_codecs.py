"""Producers with every compression_type writing into one topic on a real local Ray, read back by
one consumer: the leader validates (inflates) each codec's batches, stores them as sent, and the
consumer decodes them all."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from raylog.storage import batch as rb
from tests.support.topics import consume_all, fresh_topic

pytestmark = pytest.mark.ray

COMPRESSION_TYPES = ["gzip", "snappy", "lz4", "zstd", "none"]
PER_PRODUCER = 2_000


def _send_all(cluster, topic: str, compression: str, sent: dict, errors: list) -> None:
    try:
        producer = cluster.producer(compression_type=compression, linger_ms=5, batch_size=16 * 1024)
        futures = []
        for i in range(PER_PRODUCER):
            value = b"%s-%05d " % (compression.encode(), i) + b"payload %d " % (i % 13) * (i % 9)
            key = None if i % 5 == 0 else b"key-%d" % (i % 11)
            headers = [("codec", compression.encode())] if i % 7 == 0 else []
            futures.append(producer.send(topic, value, key=key, headers=headers, timestamp_ms=1_700_000_000_000 + i))
            sent[compression].append((key, value, headers, 1_700_000_000_000 + i))
        producer.flush(timeout=60)
        for f in futures:
            f.get(timeout=30)
        producer.close()
    except Exception as exc:  # noqa: BLE001 - reported by the test thread
        errors.append((compression, exc))


def _codecs_on_disk(directory: str) -> set[int]:
    """The codec id of every batch in the partition's segment files, read from disk."""
    codecs = set()
    for segment in sorted(Path(directory).glob("*.log")):
        data = segment.read_bytes()
        codecs |= {batch.codec for batch in rb.iter_batches(data)}
    return codecs


def test_producers_of_every_codec_into_one_topic_are_read_back_equal(cluster):
    topic = fresh_topic(cluster, 1)
    sent = {c: [] for c in COMPRESSION_TYPES}
    errors: list = []
    threads = [threading.Thread(target=_send_all, args=(cluster, topic, c, sent, errors)) for c in COMPRESSION_TYPES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    total = PER_PRODUCER * len(COMPRESSION_TYPES)

    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    records = consume_all(consumer, total, timeout_s=60)
    consumer.close()
    assert len(records) == total
    assert [r.offset for r in records] == list(range(total))
    by_codec = {c: [] for c in COMPRESSION_TYPES}
    for r in records:
        by_codec[r.value.split(b"-")[0].decode()].append((r.key, r.value, list(r.headers), r.timestamp))
    for compression in COMPRESSION_TYPES:
        assert by_codec[compression] == sent[compression], f"{compression}: records differ or are out of send order"

    (desc,) = cluster.admin().describe_topics([topic])
    assert _codecs_on_disk(desc.partitions[0].leader.directory) == {0, 1, 2, 3, 4}, \
        "each producer's batches are stored with its own codec"
