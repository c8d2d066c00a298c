"""Kafka's RecordBatch v2 converted to raylog's batches and back (no Ray). kafka-python's own
record batch builder and reader are the judges: what it writes raylog reads exactly, and what
raylog serves it reads exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from raylog.errors import CorruptRecordError, RecordTooLargeError
from raylog.kafka import record_batch as kb
from raylog.storage import batch as rb

NONE, GZIP, LZ4 = 0, 1, 3
"""The codecs kafka-python writes with what this venv has (snappy and zstd need more libraries;
librdkafka's tests cover them)."""

nullable = st.one_of(st.none(), st.binary(max_size=64))
header = st.tuples(st.text(max_size=8), nullable)
record = st.fixed_dictionaries({"key": nullable, "value": nullable, "headers": st.lists(header, max_size=3),
                                "ts": st.integers(0, 2**41)})


def kafka_batch(records, codec=NONE, producer=(-1, -1, -1), gaps=None) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 24)
    for i, r in enumerate(records):
        offset = gaps[i] if gaps else i
        builder.append(offset, timestamp=r["ts"], key=r["key"], value=r["value"], headers=r["headers"])
    return bytes(builder.build())


def read_with_kafka_python(data: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in DefaultRecordBatch(data)]


def expected(records, base_offset=0, gaps=None) -> list[tuple]:
    return [(base_offset + (gaps[i] if gaps else i), r["ts"], r["key"], r["value"], list(r["headers"]))
            for i, r in enumerate(records)]


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=20), codec=st.sampled_from([NONE, GZIP, LZ4]),
       producer=st.sampled_from([(-1, -1, -1), (7, 0, 0), (2**40, 3, 1000)]))
def test_kafka_client_to_raylog_to_kafka_client_keeps_every_field(records, codec, producer):
    decoded = kb.decode(kafka_batch(records, codec, producer))
    assert len(decoded) == 1
    stored = kb.to_raylog(decoded[0])
    view = rb.RecordBatch(stored)
    view.validate()
    assert (view.producer_id, view.producer_epoch, view.base_sequence) == producer
    cols = view.columns()
    assert cols.keys.to_pylist() == [r["key"] for r in records]
    assert cols.values.to_pylist() == [r["value"] for r in records]
    assert view.timestamps(cols).tolist() == [r["ts"] for r in records]
    view.stamp(1000, 4)  # as a leader appends it
    served = kb.from_raylog(view)
    assert read_with_kafka_python(served) == expected(records, base_offset=1000)
    again = kb.decode(served)[0]
    assert (again.base_offset, again.leader_epoch, again.producer_id) == (1000, 4, producer[0])


@settings(max_examples=100, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=20), compression=st.sampled_from(["none", "lz4", "zstd"]))
def test_raylog_producer_batches_read_by_a_kafka_client(records, compression):
    built = rb.build([r["value"] for r in records], [r["key"] for r in records], [r["ts"] for r in records],
                     [r["headers"] or None for r in records], compression, base_offset=42)
    served = kb.from_raylog_log(built)
    assert read_with_kafka_python(served) == expected(records, base_offset=42)


def test_a_compacted_batch_keeps_its_offset_gaps_both_ways():
    records = [{"key": b"k%d" % i, "value": b"v", "headers": [], "ts": 5} for i in range(3)]
    gaps = [0, 4, 9]
    stored = kb.to_raylog(kb.decode(kafka_batch(records, gaps=gaps))[0])
    view = rb.RecordBatch(stored)
    assert view.offsets(view.columns()).tolist() == gaps and view.last_offset_delta == 9
    assert read_with_kafka_python(kb.from_raylog(view)) == expected(records, gaps=gaps)


def test_several_batches_in_one_records_field_are_all_read():
    one = kafka_batch([{"key": None, "value": b"a", "headers": [], "ts": 1}])
    two = kafka_batch([{"key": None, "value": b"b", "headers": [], "ts": 2}], LZ4)
    assert [b.values for b in kb.decode(one + two)] == [[b"a"], [b"b"]]


@pytest.mark.parametrize("damage", ["crc", "truncated", "magic", "trailing", "length"])
def test_a_damaged_batch_is_refused_and_nothing_of_it_decoded(damage):
    good = bytearray(kafka_batch([{"key": b"k", "value": b"v" * 50, "headers": [("h", b"x")], "ts": 1}]))
    if damage == "crc":
        good[-3] ^= 0xFF
    elif damage == "truncated":
        good = good[:-5]
    elif damage == "magic":
        good[rb.MAGIC_POS] = 1
    elif damage == "trailing":
        good += b"\x00" * 10
    elif damage == "length":
        good[rb.LENGTH_POS:rb.LENGTH_POS + 4] = (2**31 - 1).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError):
        kb.decode(bytes(good))


def test_a_batch_over_max_message_bytes_and_transactional_batches_are_refused():
    data = kafka_batch([{"key": None, "value": b"x" * 1000, "headers": [], "ts": 1}])
    with pytest.raises(RecordTooLargeError):
        kb.decode(data, max_bytes=500)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=1,
                                        producer_epoch=0, base_sequence=0, batch_size=1 << 20)
    builder.append(0, timestamp=1, key=None, value=b"t", headers=[])
    with pytest.raises(CorruptRecordError, match="transactional"):
        kb.to_raylog(kb.decode(bytes(builder.build()))[0])


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=200))
def test_garbage_is_a_corrupt_record_error_never_anything_else(garbage):
    try:
        kb.decode(garbage)
    except CorruptRecordError:
        pass


no_headers = st.fixed_dictionaries({"key": st.one_of(st.none(), st.just(b""), st.binary(max_size=64)),
                                    "value": st.one_of(st.none(), st.just(b""), st.binary(max_size=64),
                                                       st.binary(min_size=8200, max_size=8300)),
                                    "headers": st.just([]), "ts": st.integers(0, 2**41)})
"""Records without headers, the column paths' case; a value over 8,191 bytes makes a record's
length a 3-byte varint, which the column decoder hands to the record-at-a-time one."""


@settings(max_examples=150, deadline=None)
@given(records=st.lists(no_headers, min_size=1, max_size=30), codec=st.sampled_from([NONE, LZ4]),
       gaps=st.booleans())
def test_the_column_paths_read_and_write_exactly_what_the_record_at_a_time_paths_do(records, codec, gaps):
    offsets = [3 * i for i in range(len(records))] if gaps else None
    data = kafka_batch(records, codec, gaps=offsets)
    columns = kb.decode(data)[0]
    written = columns.codec  # kafka-python writes a batch that would not shrink uncompressed
    body = kb._decompress(written, data[kb.HEADER_SIZE:])
    header = (0, -1, written, columns.last_offset_delta, columns.base_timestamp, columns.max_timestamp, -1, -1, -1)
    exact = kb._each_record(body, len(records), header)
    short = all(len(r["value"] or b"") < 8000 for r in records)
    assert (kb._columns(body, len(records)) is not None) == short  # the column path ran where it can
    assert columns.keys == exact.keys == [r["key"] for r in records]
    assert columns.values == exact.values == [r["value"] for r in records]
    assert columns.timestamp_deltas.tolist() == exact.timestamp_deltas.tolist()
    assert columns.offset_deltas.tolist() == exact.offset_deltas.tolist() == (offsets or list(range(len(records))))
    view = rb.RecordBatch(kb.to_raylog(columns))
    cols = view.columns()
    assert kb._encode_columns(cols, len(records)) == bytes(kb._encode_each(cols, len(records)))
    assert read_with_kafka_python(kb.from_raylog(view)) == expected(records, gaps=offsets)


def test_the_column_decoder_refuses_what_the_record_decoder_refuses():
    """Bytes the column path cannot read are read again one record at a time, which names the fault."""
    good = kafka_batch([{"key": None, "value": b"v%d" % i, "headers": [], "ts": 5} for i in range(3)])
    body = bytearray(good[kb.HEADER_SIZE:])
    body[0] = 0x02  # the first record claims 1 byte: its fields run past it
    with pytest.raises(CorruptRecordError):
        kb._records(bytes(body), 3, (0, -1, 0, 2, 5, 5, -1, -1, -1))
    with pytest.raises(CorruptRecordError):
        kb._records(bytes(good[kb.HEADER_SIZE:]) + b"\x00", 3, (0, -1, 0, 2, 5, 5, -1, -1, -1))
    with pytest.raises(CorruptRecordError):  # the last record claims 1 byte: its fields run past the data
        kb._records(b"\x02\x00", 1, (0, -1, 0, 0, 0, 0, -1, -1, -1))


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=64), count=st.integers(0, 12), records=st.lists(no_headers, min_size=1, max_size=4),
       cut=st.integers(0, 400), flip=st.integers(0, 400))
def test_both_record_decoders_agree_on_any_bytes(body, count, records, cut, flip):
    """Garbage, and whole records cut short or with a byte changed: the column path reads exactly
    what the record-at-a-time path reads, or both refuse with CorruptRecordError (never another
    error: a damaged last record once sent the column path's reads past its padding)."""
    good = kafka_batch(records)[kb.HEADER_SIZE:]
    damaged = bytearray(good[:max(len(good) - cut % 5, 1)])
    damaged[flip % len(damaged)] ^= 0x7F
    header = (0, -1, 0, max(count - 1, 0), 0, 0, -1, -1, -1)
    for data, n in ((body, count), (bytes(damaged), len(records)), (bytes(damaged), count)):
        header = (0, -1, 0, max(n - 1, 0), 0, 0, -1, -1, -1)
        try:
            exact = kb._each_record(data, n, header)
        except CorruptRecordError:
            with pytest.raises(CorruptRecordError):
                kb._records(data, n, header)
            continue
        columns = kb._records(data, n, header)
        assert (columns.keys, columns.values) == (exact.keys, exact.values)
        assert columns.timestamp_deltas.tolist() == exact.timestamp_deltas.tolist()
        assert columns.offset_deltas.tolist() == exact.offset_deltas.tolist()


def test_a_varint_past_64_bits_is_a_corrupt_record():
    record = b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x01\x01\x00"  # attributes, an 11-bit 10th byte, ...
    with pytest.raises(CorruptRecordError):
        kb._records(bytes([len(record) * 2]) + record, 1, (0, -1, 0, 0, 0, 0, -1, -1, -1))
