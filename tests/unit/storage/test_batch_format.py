"""RecordBatch: round trips, the CRC's coverage, and every corruption a reader must reject."""

import struct

import pytest

from raylog.errors import CorruptRecordError, RaylogError, RecordTooLargeError, UnsupportedCodecError
from raylog.storage import batch as rb


def sample(compression="lz4"):
    return rb.build([b"v0", b"", None], keys=[b"k0", None, b"k2"], timestamps_ms=[1000, 1005, 1003],
                    headers=[[("h", b"1")], None, [("x", None)]], compression=compression)


@pytest.mark.parametrize("compression", ["lz4", "none"])
def test_round_trip_keeps_keys_values_timestamps_headers(compression):
    batch = rb.RecordBatch(sample(compression))
    batch.validate()
    cols = batch.columns()
    assert cols.keys == [b"k0", None, b"k2"]
    assert cols.values == [b"v0", b"", None]
    assert batch.timestamps(cols) == [1000, 1005, 1003]
    assert cols.headers == [[["h", b"1"]], [], [["x", None]]]
    assert batch.offsets(cols) == [0, 1, 2]
    assert (batch.record_count, batch.last_offset_delta, batch.max_timestamp) == (3, 2, 1005)


def test_golden_bytes_of_a_fixed_batch():
    """Changing the format means a new MAGIC and new golden bytes in the same commit."""
    data = rb.build([b"a"], keys=[b"k"], timestamps_ms=5, compression="none")
    assert rb.MAGIC == 1
    assert data == bytes.fromhex(
        "0000000000000000" "0000003e" "ffffffff" "01" "cf6b401b" "0000" "00000000"
        "0000000000000005" "0000000000000005" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
        "95" "91c4016b" "91c40161" "9100" "c0" "c0")


def test_stamping_base_offset_and_leader_epoch_keeps_the_crc_valid():
    buf = bytearray(sample())
    batch = rb.RecordBatch(buf)
    crc = batch.crc
    batch.stamp(123456, 7)
    batch.validate()
    assert (batch.base_offset, batch.leader_epoch, batch.crc) == (123456, 7, crc)
    assert batch.offsets(batch.columns()) == [123456, 123457, 123458]


def corrupt(pos, fmt, value):
    buf = bytearray(sample())
    struct.pack_into(fmt, buf, pos, value)
    return bytes(buf)


@pytest.mark.parametrize("buf,error", [
    (corrupt(rb.LENGTH_POS, ">i", 10), CorruptRecordError),
    (corrupt(rb.LENGTH_POS, ">i", 10_000_000), CorruptRecordError),
    (corrupt(rb.MAGIC_POS, ">b", 2), CorruptRecordError),
    (corrupt(rb.CRC_POS, ">I", 0xDEADBEEF), CorruptRecordError),
    (corrupt(rb.ATTRIBUTES_POS, ">h", 1), UnsupportedCodecError),
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


@pytest.mark.parametrize("codec", [1, 2, 4, 7])
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
def test_payload_with_wrong_column_types_or_lengths_is_corrupt(columns):
    """A CRC only proves the bytes are what the producer sent, not that they are a payload."""
    import msgpack

    from raylog.storage import payload

    with pytest.raises(CorruptRecordError):
        payload.decode(msgpack.packb(columns, use_bin_type=True), payload.CODEC_NONE, 2)
