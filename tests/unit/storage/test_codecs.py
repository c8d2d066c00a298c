"""The four compression codecs of a batch's payload (gzip 1, snappy 2, lz4 3, zstd 4): their exact
bytes, round trips, what a reader refuses, and a log holding all of them (no Ray)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.config import ProducerConfig, TopicConfig
from raylog.errors import CorruptRecordError, InvalidConfigError, UnsupportedCodecError
from raylog.storage import batch as rb
from raylog.storage import payload
from raylog.storage.log import PartitionLog
from tests.support.builders import read_all
from tests.support.v1_batches import build_v1

CODECS = ["gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

GOLDEN_RECORDS = dict(
    values=[b"raylog " * 8, b"compressed", None], keys=[b"key-1", None, b"key-1"],
    timestamps_ms=[1_700_000_000_000, 1_700_000_000_005, 1_700_000_000_003],
    headers=[[("trace", b"abc")], None, None], producer_id=42, producer_epoch=0, base_sequence=0)
HEADER_HEX = {  # base offset to attributes: the length, the CRC and the codec differ per codec
    "gzip": "0000000000000000" "000000ad" "ffffffff" "02" "3fbcbafb" "0001",
    "snappy": "0000000000000000" "000000a8" "ffffffff" "02" "809b3a9a" "0002",
    "lz4": "0000000000000000" "000000ac" "ffffffff" "02" "fc2ea6f7" "0003",
    "zstd": "0000000000000000" "000000a1" "ffffffff" "02" "1712b1d8" "0004",
}
# last_offset_delta to record_count: the same for every codec.
REST_OF_HEADER = ("00000002" "0000018bcfe56800" "0000018bcfe56805" "000000000000002a" "0000" "00000000"
                  "00000003")
GOLDEN_PAYLOAD_HEX = {
    # One RFC 1952 member: 1f8b, deflate (08), no flags, mtime 0, xfl 0, OS 255; deflate level 6.
    "gzip": "1f8b08000000000000ff958eb109803010452f041b2b4b1bc1052cecacb3498cc1422592d8648ba8082ee0260e66"
            "30096ae9837757dcc1ff19006c18a11d25314a480aebbc1c93a48c9f98d6cc187044f01079636bc77551dec3dd"
            "f0ebafb212afa4ba176dfe7b31318c922bc51bf810fa84bc0b4711e2e7c8000000",
    # Raw snappy block: varint preamble c801 (200 bytes), then tags.
    "snappy": "c801881d000000950301019801100a0110421800939192a57472616365c403616263909000000502000505060901"
              "010c0104200a0000006b65792d310505091c0003090705011038000000420d04187261796c6f6720c2070024636f"
              "6d707265737365640553150101802c000000000300000000000000",
    # lz4 block with the lz4 package's 4-byte little-endian size prefix (c8000000: 200 bytes).
    "lz4": "c8000000f2131d000000950301019801100a0110421800939192a57472616365c40361626390900001001205070001"
           "020013050400910a0000006b65792d310500011b00220003070001020053380000004204007f7261796c6f67200700"
           "1ea1636f6d707265737365645300050200049000800300000000000000",
    # One zstd frame: magic, descriptor 20 (single segment, 1-byte content size c8: 200 bytes), level 3.
    "zstd": "28b52ffd20c83d030064041d000000950301019801100a0110421800939192a57472616365c40361626390900005"
            "000a0000006b65792d31030038000000427261796c6f6720636f6d70726573736564050d00732800e6e0062d1448"
            "95687659e3360a3501e56e67f06201d858037802",
}
V1_LZ4_GOLDEN = bytes.fromhex(
    "0000000000000000" "00000074" "ffffffff" "01" "7e3624ce" "0003" "00000002" "0000018bcfe56800"
    "0000018bcfe56805" "ffffffffffffffff" "ffff" "ffffffff" "00000003"
    "6e000000a39593c4056b65792d31c00800af93c4387261796c6f672007001ef013c40a636f6d70726573736564c093000503"
    "939192a57472616365c4036162639090c0")
"""A magic-1 lz4 batch as raylog wrote them before the Arrow layout (build_v1 of the golden records)."""


def golden(compression: str) -> bytearray:
    return rb.build(**GOLDEN_RECORDS, compression=compression)


def _assert_golden_records(batch: rb.RecordBatch) -> None:
    cols = batch.columns()
    assert cols.keys.to_pylist() == GOLDEN_RECORDS["keys"]
    assert cols.values.to_pylist() == GOLDEN_RECORDS["values"]
    assert batch.timestamps(cols).tolist() == GOLDEN_RECORDS["timestamps_ms"]
    assert cols.headers == [[["trace", b"abc"]], [], []]


@pytest.mark.parametrize("compression", CODECS)
def test_golden_bytes_of_a_fixed_batch_per_codec(compression):
    """A change of the format, the framing or a library's output shows here (and needs a new magic
    if old bytes stop reading: the golden bytes must keep decoding)."""
    expected = bytes.fromhex(HEADER_HEX[compression] + REST_OF_HEADER + GOLDEN_PAYLOAD_HEX[compression])
    assert bytes(golden(compression)) == expected
    batch = rb.RecordBatch(expected)
    batch.validate()
    assert batch.codec == CODEC_IDS[compression]
    _assert_golden_records(batch)


def test_magic_1_lz4_batches_written_before_the_new_codecs_still_decode():
    g = GOLDEN_RECORDS
    assert build_v1(g["values"], keys=g["keys"], timestamps_ms=g["timestamps_ms"], headers=g["headers"]) == V1_LZ4_GOLDEN
    batch = rb.RecordBatch(V1_LZ4_GOLDEN)
    batch.validate()
    assert (batch.magic, batch.codec) == (1, 3)
    _assert_golden_records(batch)


_bytes = st.one_of(st.none(), st.binary(max_size=300))
_records = st.lists(st.tuples(_bytes, _bytes, st.integers(0, 2**40),
                              st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=5),
                                                                      st.one_of(st.none(), st.binary(max_size=9))),
                                                            max_size=2))),
                    min_size=1, max_size=60)


@pytest.mark.parametrize("compression", CODECS)
@settings(max_examples=60, deadline=None)
@given(records=_records, repeat=st.integers(1, 40))
def test_random_records_round_trip(compression, records, repeat):
    """``repeat`` copies the values so most examples are compressible, not only random bytes."""
    keys = [k for k, _, _, _ in records]
    values = [None if v is None else v * repeat for _, v, _, _ in records]
    stamps = [t for _, _, t, _ in records]
    headers = [h for _, _, _, h in records]
    data = rb.build(values, keys=keys, timestamps_ms=stamps, headers=headers, compression=compression)
    batch = rb.RecordBatch(data)
    batch.validate()
    assert batch.codec == CODEC_IDS[compression]
    cols = batch.columns()
    assert cols.keys.to_pylist() == keys
    assert cols.values.to_pylist() == values
    assert batch.timestamps(cols).tolist() == stamps
    want = [[[k, v] for k, v in h] if h else [] for h in headers]
    assert (cols.headers or [[] for _ in records]) == want


# --- what a reader refuses --------------------------------------------------------------------------

def with_body(data: bytes | bytearray, body: bytes) -> bytes:
    """``data`` with its payload replaced by ``body`` and its length and CRC made to match: bytes
    only payload validation can refuse (a CRC proves the producer sent them, not that they inflate)."""
    out = bytearray(data[:rb.HEADER_SIZE]) + body
    rb._INT32.pack_into(out, rb.LENGTH_POS, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body))
    batch = rb.RecordBatch(out)
    batch.set_producer_state(batch.producer_epoch, batch.base_sequence)  # recomputes the CRC
    return bytes(out)


def body_of(compression: str) -> bytes:
    return bytes(golden(compression)[rb.HEADER_SIZE:])


def raw_payload() -> bytes:
    return bytes(golden("none")[rb.HEADER_SIZE:])


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def gzip_member(raw: bytes, isize: int | None = None) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = c.compress(raw) + c.flush()
    size = len(raw) if isize is None else isize
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + deflated + (zlib.crc32(raw).to_bytes(4, "little")
                                                                     + size.to_bytes(4, "little"))


def zstd_with_content_size(frame: bytes, size_field: bytes, descriptor: int) -> bytes:
    """The golden zstd frame (descriptor 20: single segment, 1-byte content size) with another header."""
    assert frame[4] == 0x20
    return frame[:4] + bytes([descriptor]) + size_field + frame[6:]


def _flip(body: bytes, at: int) -> bytes:
    out = bytearray(body)
    out[at] ^= 0x55
    return bytes(out)


def corrupt_bodies() -> dict[str, tuple[str, bytes]]:
    """(codec, payload) that every decoder must refuse, by name; shared with test_jvm_codec.py."""
    gz, sn, zs = body_of("gzip"), body_of("snappy"), body_of("zstd")
    raw = raw_payload()
    snappy_rest = sn[2:]  # after the 2-byte preamble c801
    assert varint(len(raw)) == sn[:2]
    return {
        "gzip truncated in its deflate stream": ("gzip", gz[:40] + gz[-8:]),
        "gzip cut before its trailer": ("gzip", gz[:-3]),
        "gzip flipped deflate byte": ("gzip", _flip(gz, 30)),
        "gzip ISIZE above 256 MiB": ("gzip", gz[:-4] + (2**31).to_bytes(4, "little")),
        "gzip ISIZE one short of the data": ("gzip", gzip_member(raw, len(raw) - 1)),
        "gzip ISIZE one past the data": ("gzip", gzip_member(raw, len(raw) + 1)),
        "gzip trailing garbage": ("gzip", gz + b"junkjunk" + gz[-4:]),
        "gzip two members (output past the declared size)": ("gzip", gz + gz),
        "gzip not gzip": ("gzip", b"\x00" * 30),
        "snappy preamble above 256 MiB": ("snappy", varint(2**31) + snappy_rest),
        "snappy preamble one short of the data": ("snappy", varint(len(raw) - 1) + snappy_rest),
        "snappy preamble one past the data": ("snappy", varint(len(raw) + 1) + snappy_rest),
        "snappy truncated": ("snappy", sn[:-5]),
        "snappy trailing bytes": ("snappy", sn + b"\x00\x00\x00"),
        "snappy preamble that never ends": ("snappy", b"\xff" * 12),
        "zstd content size above 256 MiB": ("zstd", zstd_with_content_size(zs, (2**31).to_bytes(4, "little"), 0xA0)),
        "zstd content size of 2^64 - 1": ("zstd", zstd_with_content_size(zs, b"\xff" * 8, 0xE0)),
        "zstd content size one short of the data": ("zstd", zstd_with_content_size(zs, bytes([len(raw) - 1]), 0x20)),
        "zstd content size one past the data": ("zstd", zstd_with_content_size(zs, bytes([len(raw) + 1]), 0x20)),
        "zstd frame without a content size": ("zstd", zs[:4] + b"\x00\x58" + zs[6:]),
        "zstd truncated": ("zstd", zs[:-4]),
        "zstd flipped block header": ("zstd", _flip(zs, 6)),
        "zstd trailing garbage": ("zstd", zs + b"junkjunk"),
        "zstd two frames (output past the declared size)": ("zstd", zs + zs),
        "zstd not zstd": ("zstd", b"\x28\xb5\x2f\xfc" + zs[4:]),
    }


@pytest.mark.parametrize("name", sorted(corrupt_bodies()))
def test_corrupt_compressed_payloads_are_refused(name):
    compression, body = corrupt_bodies()[name]
    forged = rb.RecordBatch(with_body(golden(compression), body))
    with pytest.raises(CorruptRecordError) as refused:
        forged.validate()
    assert compression in str(refused.value), "the message names the codec"
    assert type(refused.value) is CorruptRecordError


@pytest.mark.parametrize("compression,body", [
    ("gzip", b"\x1f\x8b" + b"\x00" * 12 + (300 << 20).to_bytes(4, "little")),
    ("snappy", varint(300 << 20) + b"\x00" * 10),
    ("zstd", b"\x28\xb5\x2f\xfd\x80\x58" + (300 << 20).to_bytes(4, "little") + b"\x00" * 10),
])
def test_a_declared_size_above_256_mib_is_refused_before_inflating(compression, body):
    """Nothing here would inflate at all: the refusal can only come from the declared size."""
    with pytest.raises(CorruptRecordError, match=f"{compression} payload claims {300 << 20} uncompressed bytes"):
        payload.decode(body, payload.CODEC_BY_NAME[compression], 3)


BOMB_SCRIPT = textwrap.dedent("""
    import json, resource, sys, zlib
    import cramjam
    from raylog.errors import CorruptRecordError
    from raylog.storage import payload

    MIB = 1 << 20
    codec, declared = sys.argv[1], int(sys.argv[2])
    if codec == "gzip":  # 320 MiB of zeros in one member whose trailer claims `declared` bytes
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        parts = [b"\\x1f\\x8b\\x08\\x00\\x00\\x00\\x00\\x00\\x00\\xff"] + [c.compress(bytes(MIB)) for _ in range(320)]
        crc = 0
        for _ in range(320):
            crc = zlib.crc32(bytes(MIB), crc)
        body = b"".join(parts) + c.flush() + crc.to_bytes(4, "little") + declared.to_bytes(4, "little")
    elif codec == "snappy":  # a literal zero, then 64-byte copies of it: 320 MiB from 15 MB
        body = payload_varint = b""
        n = declared
        while n >= 0x80:
            payload_varint += bytes([n & 0x7F | 0x80]); n >>= 7
        body = payload_varint + bytes([n]) + b"\\x00\\x00" + b"\\xfe\\x01\\x00" * (320 * MIB // 64)
    else:  # a streamed zstd frame (no content size) given a content size of `declared`
        c = cramjam.zstd.Compressor()
        for _ in range(320):
            c.compress(bytes(MIB))
        frame = bytes(c.finish())
        assert frame[4] == 0x00
        body = frame[:4] + b"\\x80" + frame[5:6] + declared.to_bytes(4, "little") + frame[6:]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        payload.decode(body, payload.CODEC_BY_NAME[codec], 1)
        error = None
    except CorruptRecordError as exc:
        error = str(exc)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"error": error, "grown_kib": grown_kib, "body": len(body)}))
""")


@pytest.mark.parametrize("compression", ["gzip", "snappy", "zstd"])
def test_a_bomb_that_declares_a_small_size_is_refused_while_inflating(compression):
    """320 MiB of zeros behind a 1 MiB declared size: inflating stops at the declared size, so the
    process's peak memory grows by about that much, not by 320 MiB (its own process, so the peak
    is this decode's)."""
    done = subprocess.run([sys.executable, "-c", BOMB_SCRIPT, compression, str(1 << 20)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["error"] is not None and compression in got["error"], got
    assert got["grown_kib"] < 64 * 1024, f"inflating the bomb grew the process by {got['grown_kib']} KiB"


# --- names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [None, "none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_compression_names_are_accepted(name):
    assert ProducerConfig(compression_type=name).compression_type == name
    expected = 0 if name in (None, "none") else CODEC_IDS[name]
    assert rb.RecordBatch(rb.build([b"x"], compression=name)).codec == expected


def test_an_unknown_compression_name_is_refused_with_the_supported_ones_listed():
    with pytest.raises(InvalidConfigError) as refused:
        ProducerConfig(compression_type="brotli")
    assert all(name in str(refused.value) for name in ("'gzip'", "'snappy'", "'lz4'", "'zstd'", "'none'"))
    with pytest.raises(UnsupportedCodecError, match="'zstd'"):
        rb.build([b"x"], compression="brotli")


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_codec_id_is_refused_with_the_supported_ones_listed(codec):
    data = bytearray(golden("lz4"))
    rb._INT16.pack_into(data, rb.ATTRIBUTES_POS, codec)
    with pytest.raises(UnsupportedCodecError) as refused:
        rb.RecordBatch(data).validate()
    assert "none (0), gzip (1), snappy (2), lz4 (3), zstd (4)" in str(refused.value)


# --- a log holding every codec -----------------------------------------------------------------------

def test_a_partition_log_of_every_codec_mixed_reads_back_after_reopen(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=4096))
    expected, written = [], []
    kinds = [(rb.build, c) for c in ["none", *CODECS]] + [(build_v1, "lz4"), (build_v1, "none")]
    for i in range(60):
        build, compression = kinds[i % len(kinds)]
        values = [b"batch %d record %d " % (i, j) * (j + 1) for j in range(6)]
        keys = [b"k%d" % j if j % 3 else None for j in range(6)]
        log.append(build(values, keys=keys, timestamps_ms=1000 + i, compression=compression,
                         headers=[[("i", b"%d" % i)]] * 6))
        expected += list(zip(keys, values))
        written.append(compression)
    log.close()
    reopened = PartitionLog(tmp_path, TopicConfig(segment_bytes=4096))
    assert len(reopened.segments) > 1, "the batches span segments"
    got = read_all(reopened)
    assert [o for o, _, _ in got] == list(range(360))
    assert [(k, v) for _, k, v in got] == expected
    codecs = []
    offset = 0
    while offset < reopened.log_end_offset:
        for batch in rb.iter_batches(reopened.read(offset, 1 << 20)):
            codecs.append(batch.codec)
            offset = batch.next_offset
    assert codecs == [payload.CODEC_BY_NAME[c] for c in written], "every batch kept its own codec on disk"
    reopened.close()


def test_compaction_rebuilds_a_batch_that_lost_records_with_its_own_codec(tmp_path):
    """The cleaner rebuilds a batch that keeps some of its records; it keeps the batch's codec."""
    log = PartitionLog(tmp_path, TopicConfig(cleanup_policy="compact", segment_bytes=1 << 20,
                                             delete_retention_ms=10**12))
    compressions = ["none", *CODECS]
    for compression in compressions:  # key "dup" in every batch: all but the last lose a record
        log.append(rb.build([b"%s old" % compression.encode(), b"%s kept" % compression.encode()],
                            keys=[b"dup", compression.encode()], timestamps_ms=1000, compression=compression))
    log.roll()
    log.compact()
    batches = list(rb.iter_batches(log.read(0, 1 << 20)))
    assert [b.codec for b in batches] == [payload.CODEC_BY_NAME[c] for c in compressions]
    assert [b.record_count for b in batches] == [1, 1, 1, 1, 2], "the last batch keeps both records"
    assert [v for _, _, v in read_all(log)] == [b"%s kept" % c.encode() for c in compressions[:-1]] + [
        b"zstd old", b"zstd kept"]
    log.close()
