"""``spark.read.format("raylog")`` of a topic written with every compression_type: the executor's
BatchDecoder inflates gzip (java.util.zip), snappy (snappy-java) and zstd (zstd-jni, both loading
their native libraries inside a RayDP executor) as well as lz4, and returns the rows a raylog
consumer reads; a read of keys alone inflates an lz4 payload only through its keys (Lz4Prefix,
checked against the lz4 package's compressor in the Spark driver's JVM)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import lz4.block
import pytest
from pyspark.errors import IllegalArgumentException

from raylog.records import TopicPartition
from tests.support.spark_rows import NOW, as_rows, compacted_topic, read_everything, rows
from tests.support.topics import fresh_topic

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

COMPRESSION_TYPES = ["gzip", "snappy", "lz4", "zstd", "none"]


def test_a_topic_written_with_every_codec_reads_through_spark_as_through_a_consumer(cluster, spark):
    topic = fresh_topic(cluster, 2)
    n = 0
    for compression in COMPRESSION_TYPES:
        producer = cluster.producer(compression_type=compression, linger_ms=5)
        try:
            values = [b"%s %d " % (compression.encode(), i) * (i % 17) or None for i in range(400)]
            keys = [None if i % 4 == 0 else b"k%d" % (i % 9) for i in range(400)]
            headers = [[("codec", compression.encode())] if i % 5 == 0 else None for i in range(400)]
            producer.send_batch(topic, values, keys=keys, headers=headers,
                                timestamps_ms=[NOW + i for i in range(400)]).wait(timeout=60)
        finally:
            producer.close()
        n += 400
    expected = as_rows(read_everything(cluster, topic, n))

    df = (spark.read.format("raylog").option("subscribe", topic).option("startingOffsets", "earliest")
          .option("includeHeaders", "true").load())
    assert rows(df) == expected
    assert {r[3].split(b" ")[0] for r in expected if r[3]} == {c.encode() for c in COMPRESSION_TYPES}


def _lz4_inputs() -> list[bytes]:
    """Payload-like bytes that drive every kind of lz4 sequence: long literal runs (length bytes
    past the token), matches that overlap their own output (a period of 1 and of 3), long matches,
    and short keys repeated among random bytes."""
    rng = random.Random(11)
    mixed = b"".join(rng.choice([b"key-1", b"key-22", b"k" * 40, rng.randbytes(rng.randint(1, 60))])
                     for _ in range(3000))
    return [b"", b"x", b"a" * 1000, b"abc" * 700, rng.randbytes(5000), mixed, mixed[:777] * 9]


def _lz4_prefix(spark, src: bytes, size: int, need: int) -> bytes:
    return bytes(spark._jvm.io.raylog.spark.Lz4Prefix.decodePrefix(bytearray(src), size, need))


def test_the_connectors_lz4_prefix_decoder_gives_the_lz4_packages_bytes_up_to_any_point(spark):
    """Lz4Prefix, which inflates a payload only as far as its keys, against lz4's own block
    compressor: the bytes it gives are the input's first bytes, at least as many as asked."""
    for data in _lz4_inputs():
        for mode in ("default", "high_compression"):
            src = lz4.block.compress(data, mode=mode, store_size=False)
            for need in sorted({0, 1, len(data) // 10, len(data) // 2, len(data)}):
                if need > len(data):
                    continue
                out = _lz4_prefix(spark, src, len(data), need)
                assert len(out) >= need and out == data[:len(out)], (len(data), mode, need)
            assert _lz4_prefix(spark, src, len(data), len(data)) == data


@pytest.mark.parametrize("src, size, need, refusal", [
    (lz4.block.compress(bytes(range(200)), store_size=False)[:-5], 200, 200, "run past the input"),
    (lz4.block.compress(bytes(range(200)), store_size=False), 120, 120, "length over the 120 bytes declared"),
    (bytes([0xA0]) + b"0123456789", 5, 5, "literals run past the 5 bytes declared"),
    (bytes([0x14, 0x61, 0x01, 0x00]), 5, 5, "match runs past the 5 bytes declared"),
    (bytes([0x04, 0x05, 0x00]), 100, 10, "reaches before the output"),
    (bytes([0x10, 0x61, 0x00, 0x00]), 100, 10, "match offset 0"),
    (bytes([0xF0]), 100, 10, "length cut short"),
    (bytes([0x10, 0x61, 0x05]), 100, 10, "offset cut short"),
    (bytes([0x10, 0x61]), 100, 10, "ends after 1 bytes"),
], ids=["truncated", "length-over-size", "literals-over-size", "match-over-size", "offset-before-output", "offset-zero",
        "length-cut", "offset-cut", "ends-early"])
def test_the_lz4_prefix_decoder_refuses_a_block_that_runs_out_of_bounds(spark, src, size, need, refusal):
    """The decoder writes by address, so each bound is its own check: input, declared size, and a
    match's reach back into what is already out."""
    with pytest.raises(IllegalArgumentException, match=re.escape(refusal)):
        _lz4_prefix(spark, src, size, need)


def _inflated(spark) -> int:
    return int(dict(spark._jvm.io.raylog.spark.ReadMetrics.lastExecution(spark._jsparkSession))
               ["raylog: bytes inflated"])


def test_a_read_of_keys_alone_inflates_lz4_payloads_only_through_their_keys_and_reads_every_key(cluster, spark):
    """A group-by key (or any query of columns the payload's header and key buffers give) inflates
    each lz4 payload only through its key column, which leads the payload; it reads the same rows
    as a consumer, also from the middle of a batch, and a query of values inflates everything."""
    rng = random.Random(5)
    n = 3000
    keys = [None if i % 7 == 0 else b"k" * (i % 300) if i % 50 == 1 else b"key-%d" % (i % 40) for i in range(n)]
    values = [rng.randbytes(100) for _ in range(n)]
    headers = [[("h", b"%d" % i)] if i % 11 == 0 else None for i in range(n)]
    topic = fresh_topic(cluster, 2)
    producer = cluster.producer(compression_type="lz4")
    try:
        for at in range(0, n, 500):
            producer.send_batch(topic, values[at:at + 500], keys=keys[at:at + 500],
                                headers=headers[at:at + 500]).wait(timeout=60)
    finally:
        producer.close()
    expected = as_rows(read_everything(cluster, topic, n))
    df = (spark.read.format("raylog").option("subscribe", topic).option("startingOffsets", "earliest")
          .option("includeHeaders", "true").load())

    got = df.select("partition", "offset", "key", "topic", "timestampType", "headers").collect()
    keys_inflated = _inflated(spark)
    assert sorted((r["partition"], r["offset"], r["key"] and bytes(r["key"]), r["timestampType"],
                   [(h["key"], bytes(h["value"])) for h in (r["headers"] or [])]) for r in got) == \
        [(p, o, k, t, h) for p, o, k, _v, _ts, t, h in expected]
    assert {r["topic"] for r in got} == {topic}
    counts = {r["key"] and bytes(r["key"]): r["count"] for r in df.groupBy("key").count().collect()}
    assert counts == Counter(keys)

    assert sorted(bytes(r["value"]) for r in df.select("value").collect()) == sorted(values)
    everything_inflated = _inflated(spark)
    assert 0 < keys_inflated * 4 < everything_inflated, (keys_inflated, everything_inflated)

    ends = {p: max(o for q, o, *_ in expected if q == p) + 1 for p in (0, 1)}
    window = {str(p): ends[p] // 3 + 1 for p in (0, 1)}
    until = {str(p): ends[p] - 7 for p in (0, 1)}
    middle = (spark.read.format("raylog").option("subscribe", topic)
              .option("startingOffsets", json.dumps({topic: window}))
              .option("endingOffsets", json.dumps({topic: until})).load()
              .select("partition", "offset", "key").collect())
    assert sorted((r["partition"], r["offset"], r["key"] and bytes(r["key"])) for r in middle) == \
        [(p, o, k) for p, o, k, *_ in expected if window[str(p)] <= o < until[str(p)]]


def test_log_append_time_and_compacted_batches_read_the_same_with_keys_alone(cluster, spark):
    """A log-append-time topic's timestamp comes from the batch header, so it joins a read of
    keys alone; a compacted batch's offset deltas come last in its payload, so it is inflated
    whole. Both read what a consumer reads."""
    appended = fresh_topic(cluster, 1, message_timestamp_type="LogAppendTime")
    producer = cluster.producer(compression_type="lz4")
    try:
        producer.send_batch(appended, [b"v%d" % i for i in range(300)],
                            keys=[b"a%d" % (i % 13) for i in range(300)]).wait(timeout=60)
    finally:
        producer.close()
    compacted = compacted_topic(cluster)

    for topic, columns in ((appended, ["offset", "key", "timestamp"]), (compacted, ["offset", "key"])):
        records = _through_the_end(cluster, topic)
        got = spark.read.format("raylog").option("subscribe", topic).load().select(*columns).collect()
        assert sorted((r["offset"], bytes(r["key"])) for r in got) == sorted((r.offset, r.key) for r in records)
        if topic == appended:
            assert {int(r["timestamp"].timestamp() * 1000) for r in got} == {r.timestamp for r in records}
    assert len(got) < 600, "compaction removed superseded records"


def _through_the_end(cluster, topic: str) -> list:
    """Partition 0's records through a consumer, up to its end offset (whose last record a
    compaction keeps: the active segment is never cleaned)."""
    tp = TopicPartition(topic, 0)
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    try:
        end = consumer.end_offsets([tp])[tp]
        records = []
        while not records or records[-1].offset < end - 1:
            records.extend(r for recs in consumer.poll(timeout_ms=500).values() for r in recs)
        return records
    finally:
        consumer.close()
