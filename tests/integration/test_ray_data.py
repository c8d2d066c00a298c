"""Ray Data over topics: read_topic as a Datasource, write_topic as a Datasink (issue 15)."""

from __future__ import annotations

import datetime
import time

import pyarrow as pa
import pytest
import ray

from raylog.arrow_records import RAY_DATA_SCHEMA
from raylog.data import read_topic, write_topic
from raylog.errors import InvalidConfigError, InvalidRecordError, OffsetOutOfRangeError
from raylog.records import TopicPartition
from tests.support.topics import consume_all, end_offsets, fresh_topic

pytestmark = pytest.mark.ray

NOW = int(time.time() * 1000)


def consumer_rows(cluster, topic: str, expected: int) -> list[dict]:
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    try:
        records = consume_all(consumer, expected)
    finally:
        consumer.close()
    return sorted(({"offset": r.offset, "key": r.key, "value": r.value, "topic": r.topic, "partition": r.partition,
                    "timestamp": r.timestamp, "timestamp_type": r.timestamp_type + 1,
                    "headers": [tuple(h) for h in r.headers]} for r in records),
                  key=lambda r: (r["partition"], r["offset"]))


def dataset_rows(ds) -> list[dict]:
    return sorted(ds.take_all(), key=lambda r: (r["partition"], r["offset"]))


@pytest.fixture(scope="module")
def six(cluster):
    """A 6-partition topic of 30,000 keyed records, some with headers."""
    topic = fresh_topic(cluster, 6)
    n = 30_000
    producer = cluster.producer()
    producer.send_batch(topic, [b"value-%d" % i for i in range(n)], keys=[b"k%d" % (i % 500) for i in range(n)],
                        headers=[[("i", b"%d" % i)] if i % 4 == 0 else None for i in range(n)],
                        timestamps_ms=[NOW + i for i in range(n)]).get(60)
    producer.close()
    return topic, n


def test_read_topic_over_six_partitions_equals_a_consumer_s_full_read(cluster, six):
    topic, n = six
    ds = read_topic(topic)
    assert ds.schema().base_schema == RAY_DATA_SCHEMA
    got = dataset_rows(ds)
    assert len(got) == n
    assert {r["partition"] for r in got} == set(range(6))
    assert [{**r, "headers": list(r["headers"] or [])} for r in got] == consumer_rows(cluster, topic, n)


def test_read_topic_offsets_as_read_kafka_takes_them(cluster, six):
    topic, n = six
    per = {tp.partition: o for tp, o in end_offsets(cluster, topic).items()}
    ds = read_topic(topic, start_offset={topic: {0: 10, 3: 5}}, end_offset={topic: {0: 20}})
    got = dataset_rows(ds)
    counts = {p: sum(1 for r in got if r["partition"] == p) for p in range(6)}
    assert counts == {p: (10 if p == 0 else per[p] - 5 if p == 3 else per[p]) for p in range(6)}
    after = read_topic(topic, start_offset=datetime.datetime.fromtimestamp((NOW + n - 100) / 1000))
    assert sorted(r["timestamp"] for r in after.take_all()) == [NOW + i for i in range(n - 100, n)]
    assert read_topic(topic, start_offset=7, end_offset=9).count() == 12
    with pytest.raises(InvalidConfigError, match="start_offset|starting_offsets"):
        read_topic(topic, start_offset=-3)


def test_read_topic_splits_for_parallelism_without_changing_rows(cluster, six):
    topic, n = six
    ds = read_topic(topic, override_num_blocks=12)
    assert ds.count() == n
    assert sorted(r["offset"] for r in ds.take_all() if r["partition"] == 0) == \
        list(range(end_offsets(cluster, topic)[TopicPartition(topic, 0)]))


def test_a_range_that_cannot_be_read_completely_is_an_error_not_a_partial_result(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(200)]).get(30)
    producer.close()
    strict = read_topic(topic)
    lenient = read_topic(topic, fail_on_data_loss=False)
    cluster.admin().delete_records({TopicPartition(topic, 0): 50})
    with pytest.raises(OffsetOutOfRangeError, match="offset 0 of the range \\[0, 200\\) is gone"):
        strict.take_all()  # Ray re-raises the task's error as a subclass of its type
    assert sorted(r["offset"] for r in lenient.take_all()) == list(range(50, 200))


def test_write_topic_round_trip(cluster):
    topic = fresh_topic(cluster, 3)
    items = [{"key": b"k%d" % (i % 9), "value": b"v%d" % i, "partition": i % 3,
              "headers": [("n", b"%d" % i)], "timestamp": NOW + i} for i in range(5000)]
    table = pa.Table.from_pylist(items, schema=pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
        ("headers", RAY_DATA_SCHEMA.field("headers").type), ("timestamp", pa.int64())]))
    assert write_topic(ray.data.from_arrow(table), topic) == 5000
    got = dataset_rows(read_topic(topic))
    assert sorted((r["key"], r["value"], r["partition"], list(r["headers"]), r["timestamp"]) for r in got) == \
        sorted((i["key"], i["value"], i["partition"], i["headers"], i["timestamp"]) for i in items)
    for p in range(3):  # each partition in the order written
        values = [int(r["value"][1:]) for r in got if r["partition"] == p]
        assert values == sorted(values)


def test_write_topic_refuses_a_wrong_column_before_writing(cluster):
    topic = fresh_topic(cluster, 1)
    with pytest.raises(InvalidRecordError, match="column 'value' must be binary or string, got int64"):
        write_topic(ray.data.from_items([{"value": 1}]), topic)
    with pytest.raises(InvalidRecordError, match="no 'value' column"):
        write_topic(ray.data.from_items([{"payload": b"x"}]), topic)
    assert sum(end_offsets(cluster, topic).values()) == 0
