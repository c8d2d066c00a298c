"""RecordBatch: round trips, the CRC's coverage, and every corruption a reader must reject."""

import struct

import msgpack
import numpy as np
import pytest

from raylog.config import TopicConfig
from raylog.errors import CorruptRecordError, RaylogError, RecordTooLargeError, UnsupportedCodecError
from raylog.storage import batch as rb
from raylog.storage import payload
from raylog.storage.log import PartitionLog
from tests.support.builders import read_all
from tests.support.v1_batches import V1_GOLDEN, build_v1


def sample(compression="lz4"):
    return rb.build([b"v0", b"", None], keys=[b"k0", None, b"k2"], timestamps_ms=[1000, 1005, 1003],
                    headers=[[("h", b"1")], None, [("x", None)]], compression=compression)


@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_round_trip_keeps_keys_values_timestamps_headers(compression):
    batch = rb.RecordBatch(sample(compression))
    batch.validate()
    cols = batch.columns()
    assert cols.keys.to_pylist() == [b"k0", None, b"k2"]
    assert cols.values.to_pylist() == [b"v0", b"", None]
    assert batch.timestamps(cols).tolist() == [1000, 1005, 1003]
    assert cols.headers == [[["h", b"1"]], [], [["x", None]]]
    assert batch.offsets(cols).tolist() == [0, 1, 2]
    assert (batch.record_count, batch.last_offset_delta, batch.max_timestamp) == (3, 2, 1005)


def test_golden_bytes_of_a_fixed_batch():
    """Changing the format means a new MAGIC and new golden bytes in the same commit."""
    data = rb.build([b"a"], keys=[b"k"], timestamps_ms=5, compression="none")
    assert rb.MAGIC == 2
    assert data == bytes.fromhex(
        "0000000000000000" "00000071" "ffffffff" "02" "45f21b01" "0000" "00000000"
        "0000000000000005" "0000000000000005" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
        "0e000000" "95010000980008010008010800c0" "000000000000"  # header size, msgpack header, pad to 8
        "0000000001000000" "6b00000000000000"  # key offsets [0, 1], key data "k" + pad
        "0000000001000000" "6100000000000000"  # value offsets [0, 1], value data "a" + pad
        "0000000000000000")  # timestamp delta 0


def test_columns_are_views_of_the_payload_in_arrows_binary_layout():
    """Offsets and data are buffers a reader hands to numpy or Arrow without per-record work."""
    values = [b"x" * i for i in range(10)]
    cols = rb.RecordBatch(rb.build(values, compression="none")).columns()
    assert cols.values.offsets.dtype == np.int32
    assert cols.values.offsets.tolist() == [sum(range(i)) for i in range(11)]
    assert bytes(cols.values.data) == b"".join(values)
    assert cols.keys.offsets is None and cols.keys.null_count == 10, "unkeyed records carry no key buffers"


def test_old_layout_golden_batch_still_reads_back_identically():
    """Batches written before the layout change (magic 1) stay readable."""
    assert build_v1([b"a"], keys=[b"k"], timestamps_ms=5, compression="none") == V1_GOLDEN
    batch = rb.RecordBatch(V1_GOLDEN)
    batch.validate()
    cols = batch.columns()
    assert batch.magic == 1
    assert (cols.keys.to_pylist(), cols.values.to_pylist(), batch.timestamps(cols).tolist()) == ([b"k"], [b"a"], [5])


@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_a_log_of_old_and_new_batches_reads_back_identically_after_reopen(tmp_path, compression):
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=4096))
    expected = []
    for i in range(40):
        values = [b"r%d-%d" % (i, j) for j in range(5)]
        keys = [b"k%d" % j if j % 2 else None for j in range(5)]
        build = build_v1 if i % 2 == 0 else rb.build
        log.append(build(values, keys=keys, timestamps_ms=1000 + i, compression=compression,
                         headers=[[("n", b"%d" % i)]] * 5))
        expected += list(zip(keys, values))
    log.close()
    reopened = PartitionLog(tmp_path, TopicConfig(segment_bytes=4096))
    got = read_all(reopened)
    assert [o for o, _, _ in got] == list(range(200))
    assert [(k, v) for _, k, v in got] == expected


def test_stamping_base_offset_and_leader_epoch_keeps_the_crc_valid():
    buf = bytearray(sample())
    batch = rb.RecordBatch(buf)
    crc = batch.crc
    batch.stamp(123456, 7)
    batch.validate()
    assert (batch.base_offset, batch.leader_epoch, batch.crc) == (123456, 7, crc)
    assert batch.offsets(batch.columns()).tolist() == [123456, 123457, 123458]


def corrupt(pos, fmt, value):
    buf = bytearray(sample())
    struct.pack_into(fmt, buf, pos, value)
    return bytes(buf)


@pytest.mark.parametrize("buf,error", [
    (corrupt(rb.LENGTH_POS, ">i", 10), CorruptRecordError),
    (corrupt(rb.LENGTH_POS, ">i", 10_000_000), CorruptRecordError),
    (corrupt(rb.MAGIC_POS, ">b", 3), CorruptRecordError),
    (corrupt(rb.CRC_POS, ">I", 0xDEADBEEF), CorruptRecordError),
    (corrupt(rb.ATTRIBUTES_POS, ">h", 5), UnsupportedCodecError),
    (corrupt(rb.LAST_OFFSET_DELTA_POS, ">i", 0), CorruptRecordError),
    (corrupt(rb.RECORD_COUNT_POS, ">i", 0), CorruptRecordError),
    (corrupt(rb.BASE_OFFSET_POS, ">q", -5), CorruptRecordError),
    (corrupt(rb.BASE_TIMESTAMP_POS, ">q", 77), CorruptRecordError),
    (corrupt(rb.PRODUCER_ID_POS, ">q", 77), CorruptRecordError),
])
def test_every_corrupted_header_field_is_rejected(buf, error):
    with pytest.raises(error):
        rb.RecordBatch(buf).validate()


def test_flipped_payload_byte_is_rejected():
    buf = bytearray(sample())
    buf[rb.HEADER_SIZE + 3] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        rb.RecordBatch(bytes(buf)).validate()


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_refused(codec):
    with pytest.raises(UnsupportedCodecError):
        rb.RecordBatch(corrupt(rb.ATTRIBUTES_POS, ">h", codec)).validate()


def test_oversize_batch_is_refused_against_max_bytes():
    data = rb.build([b"x" * 1000], compression="none")
    with pytest.raises(RecordTooLargeError):
        rb.RecordBatch(data).validate(max_bytes=500)


@pytest.mark.parametrize("garbage", [b"", b"\x00" * 10, b"\xff" * 100, bytes(range(256)) * 4])
def test_garbage_is_a_raylog_error(garbage):
    with pytest.raises(RaylogError):
        rb.validate_all(garbage)


def test_forged_lz4_size_prefix_is_refused_before_inflating():
    from raylog.storage import payload

    with pytest.raises(CorruptRecordError):
        payload.decode(b"\xff\xff\xff\x7f" + b"\x00" * 20, payload.CODEC_LZ4, 1)


@pytest.mark.parametrize("columns", [
    [[None, None], [b"a", b"b"], [0, 0.0], None, None],
    [[None, 1], [b"a", b"b"], [0, 0], None, None],
    [[None, None], [b"a", "text"], [0, 0], None, None],
    [[None], [b"a", b"b"], [0, 0], None, None],
    [[None, None], [b"a", b"b"], [0, 0], "h", None],
    [[None, None], [b"a", b"b"], [0, 0], None, [1, 0]],
])
def test_old_layout_payload_with_wrong_column_types_or_lengths_is_corrupt(columns):
    """A CRC only proves the bytes are what the producer sent, not that they are a payload."""
    with pytest.raises(CorruptRecordError):
        payload.decode(msgpack.packb(columns, use_bin_type=True), payload.CODEC_NONE, 2, payload.LAYOUT_ROWS)


def _payload_of(values, keys=None):
    data = rb.build(values, keys=keys, compression="none")
    return bytearray(data[rb.HEADER_SIZE:])


def _header(buf):
    size = int.from_bytes(buf[:4], "little")
    return size, msgpack.unpackb(bytes(buf[4:4 + size]))


def _with_header(buf, header):
    """Replace the msgpack header, keeping the buffers where they were (the header must keep its size)."""
    size, _ = _header(buf)
    packed = msgpack.packb(header)
    assert len(packed) == size, "forged header must keep the original size"
    buf[4:4 + size] = packed
    return bytes(buf)


def _corruptions():
    base = _payload_of([b"ab", b"cde", None], keys=[b"k", None, b"kk"])
    size, (count, key_nulls, value_nulls, sizes, headers) = _header(base)
    out = {}
    out["wrong record count"] = _with_header(bytearray(base), [4, key_nulls, value_nulls, sizes, headers])
    out["null count disagrees with bitmap"] = _with_header(bytearray(base), [count, 0, value_nulls, sizes, headers])
    bad_sizes = list(sizes)
    bad_sizes[5] = 100
    out["buffer runs past the payload"] = _with_header(bytearray(base), [count, key_nulls, value_nulls, bad_sizes,
                                                                        headers])
    buf = bytearray(base)
    pos = 4 + size + (-(4 + size) % 8)
    for s in sizes[:4]:
        pos += s + (-s % 8)
    struct.pack_into("<i", buf, pos + 4, 9)  # value offsets [0, 9, ...]: past the value data
    out["offset past the data"] = bytes(buf)
    buf = bytearray(base)
    struct.pack_into("<ii", buf, pos + 4, 4, 2)  # offsets go backwards
    out["offsets decrease"] = bytes(buf)
    out["truncated"] = bytes(base[:len(base) - 12])
    out["header size past the end"] = b"\xff\x00\x00\x00" + bytes(base[4:])
    out["header not msgpack"] = bytes(base[:4]) + b"\xc1" * size + bytes(base[4 + size:])
    return out


@pytest.mark.parametrize("name", sorted(_corruptions()))
def test_arrow_layout_payload_with_inconsistent_buffers_is_corrupt(name):
    with pytest.raises(CorruptRecordError):
        payload.decode(_corruptions()[name], payload.CODEC_NONE, 3)
