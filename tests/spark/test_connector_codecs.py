"""``spark.read.format("raylog")`` of a topic written with every compression_type: the executor's
BatchDecoder inflates gzip (java.util.zip), snappy (snappy-java) and zstd (zstd-jni, both loading
their native libraries inside a RayDP executor) as well as lz4, and returns the rows a raylog
consumer reads."""

from __future__ import annotations

import pytest

from tests.support.spark_rows import NOW, as_rows, read_everything, rows
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
