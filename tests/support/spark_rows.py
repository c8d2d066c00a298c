"""What the Spark tests compare: rows of a DataFrame in Kafka's schema and the records a raylog
consumer reads, in one shape, and numbered records to read back."""

from __future__ import annotations

import time

from tests.support.topics import consume_all, fresh_topic

NOW = int(time.time() * 1000)
"""The base of produce_numbered's timestamps."""


def rows(df) -> list[tuple]:
    """(partition, offset, key, value, timestamp us, timestampType, headers) of every row, sorted.
    A record without headers counts as an empty list (Spark's Kafka source gives null)."""
    cols = ["partition", "offset", "key", "value", "unix_micros(timestamp) AS ts", "timestampType"]
    has_headers = "headers" in df.columns
    out = []
    for r in df.selectExpr(*cols, *(["headers"] if has_headers else [])).collect():
        headers = [(h["key"], _bytes(h["value"])) for h in (r["headers"] or [])] if has_headers else None
        out.append((r["partition"], r["offset"], _bytes(r["key"]), _bytes(r["value"]), r["ts"], r["timestampType"],
                    headers))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _bytes(b):
    return None if b is None else bytes(b)


def as_rows(records, with_headers: bool = True) -> list[tuple]:
    """ConsumerRecords in the shape of rows()."""
    return sorted(((r.partition, r.offset, r.key, r.value, r.timestamp * 1000, r.timestamp_type,
                    [tuple(h) for h in (r.headers or [])] if with_headers else None) for r in records),
                  key=lambda t: (t[0], t[1]))


def read_everything(cluster, topic: str, expected: int) -> list:
    """Every record of ``topic`` through a raylog consumer; exactly ``expected`` of them."""
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    try:
        records = consume_all(consumer, expected)
    finally:
        consumer.close()
    assert len(records) == expected
    return records


def produce_numbered(cluster, topic: str, counts: list[int], first: int = 0, step_ms: int = 10) -> None:
    """``counts[p]`` records into partition p, numbered from ``first``: record i of partition p has
    key b"p:i", value b"v:p:i" and timestamp NOW + i * step_ms."""
    producer = cluster.producer()
    try:
        futures = []
        for p, n in enumerate(counts):
            if n:
                numbers = range(first, first + n)
                futures.append(producer.send_batch(topic, [b"v:%d:%d" % (p, i) for i in numbers],
                                                   keys=[b"%d:%d" % (p, i) for i in numbers], partition=p,
                                                   timestamps_ms=[NOW + i * step_ms for i in numbers]))
        for future in futures:
            future.wait(timeout=60)
    finally:
        producer.close()


def compacted_topic(cluster, rounds: int = 12, keys: int = 50) -> str:
    """A one-partition compacted topic of ``rounds`` batches that each rewrite the same ``keys``
    keys, compacted once: its cleaned batches carry offset deltas (gaps where superseded records
    were)."""
    import ray

    topic = fresh_topic(cluster, 1, cleanup_policy="compact", segment_bytes=4096)
    producer = cluster.producer()
    try:
        for round_ in range(rounds):
            producer.send_batch(topic, [b"v%d:%d" % (round_, k) for k in range(keys)],
                                keys=[b"k%d" % k for k in range(keys)], partition=0).wait(timeout=60)
    finally:
        producer.close()
    ray.get(cluster.metadata.leader(topic, 0).maintain_now.remote())
    return topic


def run_once(query) -> None:
    """Runs a streaming query over what is available now, stops it, and checks it did not fail."""
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
