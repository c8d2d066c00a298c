"""Records as Arrow (Spark's and Ray Data's Kafka schemas) and Arrow rows as send_batch arguments."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylog.arrow_records import (RAY_DATA_SCHEMA, ArrowBinary, check_sink_schema, repeated_string, send_batch_args,
                                  spark_schema, to_ray_data_arrow, to_spark_arrow)
from raylog.consumer.column_batch import decode
from raylog.producer.batch_builder import ListBinary
from raylog.errors import InvalidRecordError
from raylog.storage import batch as rb
from raylog.storage.payload import BinaryColumn

TS = 1_700_000_000_000


def fetched():
    values = [b"v0", None, b"", b"v3"]
    keys = [b"k0", b"k1", None, b"k3"]
    headers = [[("a", b"1"), ("b", b"2")], None, [], [("a", None)]]
    buf = rb.build(values, keys=keys, timestamps_ms=[TS + i for i in range(4)], headers=headers, base_offset=40)
    chunks, next_offset = decode("events", 3, bytes(buf), 41)
    assert next_offset == 44
    return chunks[0]


def test_spark_schema_columns_and_types():
    assert spark_schema().names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    with_headers = spark_schema(include_headers=True, time_zone="Europe/Paris")
    assert with_headers.field("timestamp").type == pa.timestamp("us", tz="Europe/Paris")
    assert str(with_headers.field("headers").type) == "list<item: struct<key: string, value: binary>>"


def test_to_spark_arrow_starts_at_the_window_and_converts_timestamps():
    chunk = fetched()
    table = pa.Table.from_batches([to_spark_arrow(chunk, spark_schema(True, "UTC"))])
    assert table.column("offset").to_pylist() == [41, 42, 43]
    assert table.column("key").to_pylist() == [b"k1", None, b"k3"]
    assert table.column("value").to_pylist() == [None, b"", b"v3"]
    assert table.column("topic").to_pylist() == ["events"] * 3
    assert table.column("partition").to_pylist() == [3] * 3
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [(TS + i) * 1000 for i in (1, 2, 3)]
    assert table.column("timestampType").to_pylist() == [0, 0, 0]
    assert table.column("headers").to_pylist() == [[], [], [{"key": "a", "value": None}]]


def test_column_batch_to_arrow_is_the_spark_schema_in_ms():
    arrow = fetched().to_arrow(include_headers=False)
    assert arrow.schema == spark_schema()
    assert arrow.column(5).cast(pa.int64()).to_pylist() == [TS + 1, TS + 2, TS + 3]


def test_ray_data_rows_match_read_kafka_schema():
    table = to_ray_data_arrow(fetched())
    assert table.schema == RAY_DATA_SCHEMA
    rows = table.to_pylist()
    assert [r["offset"] for r in rows] == [41, 42, 43]
    assert [r["timestamp"] for r in rows] == [TS + 1, TS + 2, TS + 3]
    assert [r["timestamp_type"] for r in rows] == [1, 1, 1]  # confluent-kafka: 1 = CreateTime
    assert [r["headers"] for r in rows] == [[], [], [("a", None)]]


def test_repeated_string_handles_empty_and_multibyte_text():
    assert repeated_string("é", 3).to_pylist() == ["é"] * 3
    assert repeated_string("", 2).to_pylist() == ["", ""]
    assert repeated_string("x", 0).to_pylist() == []


def sink(**columns):
    return pa.table(columns)


def test_check_sink_schema_accepts_spark_and_ray_data_layouts():
    spark_headers = pa.array([[{"key": "h", "value": b"1"}]], spark_schema(True).field("headers").type)
    table = sink(value=pa.array(["v"]), key=pa.array([b"k"]), partition=pa.array([1], pa.int32()),
                 headers=spark_headers, timestamp=pa.array([TS], pa.timestamp("ms")), extra=pa.array([1.5]))
    assert check_sink_schema(table.schema, topic_given=True) == ["value", "key", "partition", "headers", "timestamp"]
    ray_headers = pa.array([[("h", b"1")]], RAY_DATA_SCHEMA.field("headers").type)
    table = sink(value=pa.array([b"v"]), topic=pa.array(["t"]), headers=ray_headers, key=pa.nulls(1))
    assert check_sink_schema(table.schema, topic_given=False) == ["value", "key", "topic", "headers"]


@pytest.mark.parametrize("columns, message", [
    ({"key": pa.array([b"k"])}, "no 'value' column"),
    ({"value": pa.array([1])}, "column 'value' must be binary or string, got int64"),
    ({"value": pa.array([b"v"]), "key": pa.array([1.0])}, "column 'key' must be binary or string, got double"),
    ({"value": pa.array([b"v"]), "partition": pa.array(["0"])}, "column 'partition' must be int, got string"),
    ({"value": pa.array([b"v"]), "headers": pa.array([["h"]])}, "column 'headers' must be array<struct<key"),
    ({"value": pa.array([b"v"]), "timestamp": pa.array(["now"])}, "column 'timestamp' must be timestamp or long"),
])
def test_check_sink_schema_names_the_column_and_the_expected_type(columns, message):
    with pytest.raises(InvalidRecordError, match=message):
        check_sink_schema(sink(**columns).schema, topic_given=True)


def test_a_sink_without_a_topic_needs_a_topic_column():
    with pytest.raises(InvalidRecordError, match="give topic= or a 'topic' column"):
        check_sink_schema(sink(value=pa.array([b"v"])).schema, topic_given=False)
    with pytest.raises(InvalidRecordError, match="column 'topic' must be string, got int64"):
        check_sink_schema(sink(value=pa.array([b"v"]), topic=pa.array([1])).schema, topic_given=False)


def test_send_batch_args_from_spark_columns():
    table = sink(value=pa.array(["a", None]), key=pa.array([b"k", None]),
                 partition=pa.array([2, None], pa.int32()),
                 headers=pa.array([[{"key": "h", "value": b"1"}], None], spark_schema(True).field("headers").type),
                 timestamp=pa.array([TS * 1000 + 999, TS * 1000], pa.timestamp("us", tz="UTC")))
    args = send_batch_args(table)
    assert args["values"].to_pylist() == ["a", None]  # sent from the Arrow buffers
    assert args["keys"].to_pylist() == [b"k", None]
    assert args["partition"] == [2, None]
    assert args["headers"] == [[("h", b"1")], None]
    assert np.asarray(args["timestamps_ms"]).tolist() == [TS, TS]


def test_send_batch_args_refuses_null_timestamps():
    with pytest.raises(InvalidRecordError, match="timestamp column has nulls"):
        send_batch_args(sink(value=pa.array([b"v"]), timestamp=pa.array([None], pa.int64())))


entries = st.lists(st.one_of(st.none(), st.binary(max_size=20)), min_size=1, max_size=60)


@given(entries, st.data())
def test_arrow_and_list_sources_encode_the_same_batch(items, data):
    """An Arrow array sent with send_batch gives the very bytes the same Python list would."""
    arrow, listed = ArrowBinary(pa.array(items, pa.binary())), ListBinary(list(items))
    assert arrow.nulls == listed.nulls
    assert arrow.lengths().tolist() == listed.lengths().tolist()
    assert arrow.present().tolist() == [x is not None for x in items]
    contiguous = data.draw(st.booleans())
    if contiguous:
        a = data.draw(st.integers(0, len(items) - 1))
        idx = np.arange(a, data.draw(st.integers(a + 1, len(items))))
    else:
        idx = np.array(sorted(data.draw(st.sets(st.integers(0, len(items) - 1), min_size=1))))
    nulls = sum(items[i] is None for i in idx)
    ours = arrow.column(idx, contiguous)
    theirs = listed.column(idx, contiguous, listed.lengths()[idx], None)
    assert ours.to_pylist() == theirs.to_pylist() == [items[i] for i in idx]
    stamps = np.zeros(len(idx), dtype=np.int64)
    if nulls < len(idx):
        assert bytes(rb.build_columns(BinaryColumn.nulls(len(idx)), ours, stamps, None, "none")) == \
            bytes(rb.build_columns(BinaryColumn.nulls(len(idx)), theirs, stamps, None, "none"))


def test_arrow_sources_take_strings_sliced_and_chunked_arrays():
    sliced = pa.array(["zero", "one", None, "three"]).slice(1, 3)
    source = ArrowBinary(sliced)
    assert source.lengths().tolist() == [3, 0, 5]
    assert source.column(np.arange(3), True).to_pylist() == [b"one", None, b"three"]
    chunked = pa.chunked_array([[b"a"], [b"bc", None]])
    assert ArrowBinary(chunked).column(np.array([0, 2]), False).to_pylist() == [b"a", None]
    assert ArrowBinary(pa.nulls(2)).nulls == 2
    with pytest.raises(InvalidRecordError, match="values must be a binary or string array, got int64"):
        ArrowBinary(pa.array([1, 2]))
