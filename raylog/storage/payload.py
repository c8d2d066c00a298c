"""The columnar payload inside a record batch, and its compression.

Two layouts exist; the batch's magic byte says which one a payload uses.

Magic 2 (``LAYOUT_ARROW``, written by every producer since the layout change):
each variable-width column is Arrow's binary layout, an int32 offsets array
plus one data blob, so a reader builds numpy views and pyarrow arrays
(``pa.Array.from_buffers``) over the fetched bytes with no work per record::

    u32 LE         header_size
    msgpack        [record_count, key_null_count, value_null_count, sizes, headers]
    zero padding   to a multiple of 8 bytes from the payload start
    buffers        in this order, each zero-padded to a multiple of 8 bytes:
                   key validity, key offsets, key data,
                   value validity, value offsets, value data,
                   timestamp deltas (int64 LE, one per record),
                   offset deltas (int32 LE, one per record, or absent)

``sizes`` holds the unpadded byte length of each of the eight buffers. A
validity buffer is Arrow's bitmap (bit i, least significant first, is 1 when
record i's entry is present) and is empty when the column has no nulls; a
column whose every entry is null (the keys of unkeyed records) has no
buffers at all. ``headers`` is null when no record has headers, else one list
per record of [name (str), value (bytes or null)] pairs, inline in msgpack:
headers are rare and small. Offset deltas are absent except after compaction
removed records. Buffers are 8-byte aligned relative to the payload start so
numpy and Arrow views of a decompressed payload (whose bytes object is
aligned) need no copy.

Magic 1 (``LAYOUT_ROWS``, still read so logs written before the change stay
readable): one msgpack array ``[keys, values, timestamp_deltas, headers,
offset_deltas]`` of per-record bins and ints. Decoding it builds the same
``Columns`` as magic 2, at a cost per record.

A compressed payload is the payload bytes compressed as a whole, framed so
the uncompressed size is declared before any byte is inflated:

- lz4 (3): lz4's block format prefixed by the uncompressed size as 4
  little-endian bytes (the ``store_size`` framing of the ``lz4`` package).
- gzip (1): one RFC 1952 member (mtime 0, so the bytes depend only on the
  input), deflate level 6 (Kafka's default); the declared size is the
  trailer's ISIZE.
- snappy (2): snappy's raw block format, whose varint preamble is the size.
- zstd (4): one zstd frame with its content size in the frame header, level
  3 (Kafka's default).

Blocks beat streaming framings here (lz4's frame; for snappy the xerial
framing Kafka's Java client writes, or snappy's framing format): the payload
is compressed in one call, so chunks buy nothing; the batch CRC32C already
covers it, so per-chunk checksums would be paid twice; and a raylog payload
is not Kafka's record layout, so Kafka's framing buys no interoperability.
Readers take what other gzip writers make (header fields, several members)
as long as the whole payload inflates to the last member's ISIZE. A declared
size above ``MAX_UNCOMPRESSED_BYTES`` is refused before inflating, and a
payload inflates into a buffer of exactly its declared size, so a stream
that would run past it (a decompression bomb) is refused while inflating.

Every decode validates what it reads (lengths, offsets monotonic and inside
the data, bitmaps agreeing with null counts): a CRC only proves the bytes are
what the producer sent, not that they are a payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

import cramjam
import lz4.block
import msgpack
import numpy as np

from raylog.errors import CorruptRecordError, UnsupportedCodecError

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
"""Codec ids are Kafka's (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""

CODEC_BY_NAME = {"none": CODEC_NONE, None: CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY,
                 "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
"""compression_type names (kafka-python's) to codec ids."""
NAME_BY_CODEC = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4",
                 CODEC_ZSTD: "zstd"}
KNOWN_CODECS = frozenset(NAME_BY_CODEC)
SUPPORTED_CODECS = ", ".join(f"{name} ({codec})" for codec, name in sorted(NAME_BY_CODEC.items()))
"""For error messages: 'none (0), gzip (1), snappy (2), lz4 (3), zstd (4)'."""

GZIP_LEVEL = 6
"""zlib's default, and Kafka's (compression.gzip.level)."""
ZSTD_LEVEL = 3
"""zstd's default, and Kafka's (compression.zstd.level)."""

LAYOUT_ROWS = 1
LAYOUT_ARROW = 2

MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024
"""Refuse to inflate a payload past this: a forged size prefix must not allocate gigabytes."""

ALIGNMENT = 8
_U32 = struct.Struct("<I")
_EMPTY = memoryview(b"")
_NONE_TYPE = type(None)
_KEY_TYPES = {bytes, _NONE_TYPE}
_HEADER_TYPES = {list, _NONE_TYPE}


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """``count`` variable-width entries in Arrow's binary layout (bytes or null each)."""

    count: int
    offsets: np.ndarray | None
    """int32, count + 1 entries, first 0, non-decreasing, last = len(data); None when all null."""
    data: memoryview
    validity: memoryview | None
    """Arrow's validity bitmap, or None when no entry is null (or every entry is)."""
    null_count: int

    @classmethod
    def from_pylist(cls, items: Sequence[bytes | None], lengths: np.ndarray | None = None,
                    nulls: int | None = None) -> "BinaryColumn":
        """Build from bytes and None entries (the producer's path: a few C calls per column).
        ``lengths`` (0 for None) and ``nulls`` may be given when the caller knows them already."""
        count = len(items)
        if nulls is None:
            nulls = items.count(None) if count else 0
        if nulls == count:
            return cls(count, None, _EMPTY, None, count)
        validity = None
        if nulls:
            present = np.fromiter((x is not None for x in items), dtype=bool, count=count)
            validity = memoryview(np.packbits(present, bitorder="little").tobytes())
            items = [b"" if x is None else x for x in items]
        if lengths is None:
            lengths = np.fromiter(map(len, items), dtype=np.int64, count=count)
        offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:], dtype=np.int32)
        return cls(count, offsets, memoryview(b"".join(items)), validity, nulls)

    @classmethod
    def nulls(cls, count: int) -> "BinaryColumn":
        return cls(count, None, _EMPTY, None, count)

    def __len__(self) -> int:
        return self.count

    def present(self) -> np.ndarray:
        """Bool per entry: True where the entry is bytes, False where it is null."""
        if self.null_count == 0:
            return np.ones(self.count, dtype=bool)
        if self.offsets is None:
            return np.zeros(self.count, dtype=bool)
        bits = np.frombuffer(self.validity, dtype=np.uint8)
        return np.unpackbits(bits, count=self.count, bitorder="little").astype(bool)

    def lengths(self) -> np.ndarray:
        """Byte length of each entry (0 for nulls), int64."""
        if self.offsets is None:
            return np.zeros(self.count, dtype=np.int64)
        return np.diff(self.offsets).astype(np.int64)

    def to_pylist(self) -> list[bytes | None]:
        """One Python object per entry: costs per record, for code that needs it (compaction)."""
        if self.offsets is None:
            return [None] * self.count
        data = bytes(self.data)
        bounds = self.offsets.tolist()
        out = [data[a:b] for a, b in zip(bounds, bounds[1:])]
        if self.null_count:
            for i in np.flatnonzero(~self.present()).tolist():
                out[i] = None
        return out


@dataclass(frozen=True, slots=True)
class Columns:
    """Decoded payload columns of one batch; each holds one entry per record."""

    keys: BinaryColumn
    values: BinaryColumn
    timestamp_deltas: np.ndarray
    """int64: record timestamp minus the batch's base_timestamp."""
    headers: list | None
    """None when no record has headers, else one list of [name, value] pairs per record."""
    offset_deltas: np.ndarray | None
    """int64 record offset minus base_offset; None when the records are base..base+count-1."""


def codec_id(compression_type: str | None) -> int:
    """Map a compression_type name ('gzip', 'snappy', 'lz4', 'zstd', 'none' or None) to its codec id."""
    try:
        return CODEC_BY_NAME[compression_type]
    except (KeyError, TypeError):
        names = ", ".join(repr(name) for name in CODEC_BY_NAME)
        raise UnsupportedCodecError(f"unsupported compression_type {compression_type!r}; use one of {names}") from None


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def encode(keys: BinaryColumn, values: BinaryColumn, timestamp_deltas: np.ndarray, headers: Sequence | None,
           offset_deltas: Sequence[int] | None, codec: int) -> bytes:
    """Lay the columns out as magic-2 payload bytes and compress them with ``codec``."""
    count = values.count
    buffers: list = []
    for col in (keys, values):
        if col.offsets is None:
            buffers += [_EMPTY, _EMPTY, _EMPTY]
        else:
            buffers += [col.validity or _EMPTY, col.offsets.astype("<i4", copy=False), col.data]
    buffers.append(np.asarray(timestamp_deltas, dtype="<i8"))
    buffers.append(_EMPTY if offset_deltas is None else np.asarray(offset_deltas, dtype="<i4"))
    sizes = [memoryview(b).nbytes for b in buffers]
    header = msgpack.packb([count, keys.null_count, values.null_count, sizes, headers], use_bin_type=True)
    parts = [_U32.pack(len(header)), header, bytes(_pad(4 + len(header)))]
    for buf, size in zip(buffers, sizes):
        if size:
            parts.append(buf)
            parts.append(bytes(_pad(size)))
    raw = b"".join(parts)
    if codec == CODEC_LZ4:
        return lz4.block.compress(raw, store_size=True)
    if codec == CODEC_NONE:
        return raw
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(raw, level=ZSTD_LEVEL))
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(raw))
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(raw, level=GZIP_LEVEL))
    raise UnsupportedCodecError(f"unknown codec id {codec}; raylog supports {SUPPORTED_CODECS}")


# Why cramjam for gzip, snappy and zstd: one wheel (Rust bindings over the reference C libraries)
# with no system library to install, which releases the GIL while it works, and whose *_into
# calls inflate into a caller's buffer and fail rather than grow it, which is the bomb bound.
# python-snappy is now a shim over cramjam; zstandard measured the same speed for zstd alone.
# lz4 stays on the lz4 package: the bytes of existing batches are its block format.

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MIN_MEMBER = 18
"""A gzip member's 10-byte header and 8-byte trailer (CRC32, ISIZE)."""


def _gzip_size(payload) -> int:
    if len(payload) < _GZIP_MIN_MEMBER:
        raise CorruptRecordError(f"gzip payload of {len(payload)} bytes is shorter than a gzip member")
    return _U32.unpack_from(payload, len(payload) - 4)[0]


def _snappy_size(payload) -> int:
    try:
        return cramjam.snappy.decompress_raw_len(payload)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"snappy payload has no size preamble: {exc}") from None


def _zstd_size(payload) -> int:
    """The first frame's Frame_Content_Size (RFC 8878 3.1.1.1); required, since the encoder always writes it."""
    if len(payload) < 6 or payload[:4] != _ZSTD_MAGIC:
        raise CorruptRecordError("zstd payload does not start with a zstd frame")
    descriptor = payload[4]
    single_segment = (descriptor >> 5) & 1
    size_bytes = (single_segment, 2, 4, 8)[descriptor >> 6]
    if not size_bytes:
        raise CorruptRecordError("zstd frame does not declare its content size")
    at = 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3]
    if at + size_bytes > len(payload):
        raise CorruptRecordError("zstd payload ends inside its frame header")
    size = int.from_bytes(payload[at:at + size_bytes], "little")
    return size + 256 if size_bytes == 2 else size


_DECLARED_SIZE = {CODEC_GZIP: _gzip_size, CODEC_SNAPPY: _snappy_size, CODEC_ZSTD: _zstd_size}
_DECOMPRESS_INTO = {CODEC_GZIP: cramjam.gzip.decompress_into, CODEC_SNAPPY: cramjam.snappy.decompress_raw_into,
                    CODEC_ZSTD: cramjam.zstd.decompress_into}


def _inflate(payload: bytes | memoryview, codec: int):
    if codec in _DECLARED_SIZE:
        name = NAME_BY_CODEC[codec]
        size = _DECLARED_SIZE[codec](payload)
        if size > MAX_UNCOMPRESSED_BYTES:
            raise CorruptRecordError(f"{name} payload claims {size} uncompressed bytes (> {MAX_UNCOMPRESSED_BYTES})")
        out = np.empty(size, dtype=np.uint8)  # aligned, and not zeroed first: every byte gets written
        try:
            got = _DECOMPRESS_INTO[codec](payload, out)
        except cramjam.DecompressionError as exc:
            raise CorruptRecordError(f"{name} payload does not decompress into its {size} declared bytes: {exc}") \
                from None
        if got != size:
            raise CorruptRecordError(f"{name} payload inflated to {got} bytes, it declares {size}")
        return out
    if codec == CODEC_LZ4:
        if len(payload) < 4:
            raise CorruptRecordError("lz4 payload shorter than its size prefix")
        size = _U32.unpack_from(payload)[0]
        if size > MAX_UNCOMPRESSED_BYTES:
            raise CorruptRecordError(f"lz4 payload claims {size} uncompressed bytes (> {MAX_UNCOMPRESSED_BYTES})")
        try:
            return lz4.block.decompress(payload)
        except Exception as exc:  # lz4.block.LZ4BlockError is not exported consistently
            raise CorruptRecordError(f"lz4 payload does not decompress: {exc}") from None
    if codec == CODEC_NONE:
        return payload
    raise UnsupportedCodecError(f"unknown codec id {codec}; raylog supports {SUPPORTED_CODECS}")


def decode(payload: bytes | memoryview, codec: int, record_count: int, layout: int = LAYOUT_ARROW) -> Columns:
    """Inflate and lay out a payload; raise CorruptRecordError unless it holds ``record_count`` records."""
    raw = _inflate(payload, codec)
    if layout == LAYOUT_ARROW:
        return _decode_arrow(memoryview(raw).cast("B"), record_count)
    if layout == LAYOUT_ROWS:
        return _decode_rows(raw, record_count)
    raise CorruptRecordError(f"unknown payload layout {layout}")


def _binary(count: int, nulls: int, validity: memoryview, offsets: memoryview, data: memoryview,
            name: str) -> BinaryColumn:
    if not (isinstance(nulls, int) and 0 <= nulls <= count):
        raise CorruptRecordError(f"payload {name} null count {nulls!r} is not within 0..{count}")
    if nulls == count:
        if len(validity) or len(offsets) or len(data):
            raise CorruptRecordError(f"payload {name} column is all null but carries buffers")
        return BinaryColumn.nulls(count)
    if len(offsets) != 4 * (count + 1):
        raise CorruptRecordError(f"payload {name} offsets hold {len(offsets)} bytes, not {4 * (count + 1)}")
    offs = np.frombuffer(offsets, dtype="<i4")
    if offs[0] != 0 or offs[-1] != len(data) or (count and (np.diff(offs) < 0).any()):
        raise CorruptRecordError(f"payload {name} offsets are not a non-decreasing run from 0 to {len(data)}")
    if nulls:
        if len(validity) != (count + 7) // 8:
            raise CorruptRecordError(f"payload {name} validity bitmap holds {len(validity)} bytes for {count} records")
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=count, bitorder="little")
        if count - int(bits.sum()) != nulls:
            raise CorruptRecordError(f"payload {name} validity bitmap disagrees with its null count {nulls}")
    elif len(validity):
        raise CorruptRecordError(f"payload {name} has a validity bitmap but no nulls")
    return BinaryColumn(count, offs, data, validity if nulls else None, nulls)


def _decode_arrow(raw: memoryview, record_count: int) -> Columns:
    if len(raw) < 4:
        raise CorruptRecordError("payload shorter than its header size")
    header_size = _U32.unpack_from(raw)[0]
    if header_size > len(raw) - 4:
        raise CorruptRecordError(f"payload header size {header_size} runs past the {len(raw)} payload bytes")
    try:
        header = msgpack.unpackb(raw[4:4 + header_size], raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:
        raise CorruptRecordError(f"payload header is not msgpack: {exc}") from None
    if type(header) is not list or len(header) != 5:
        raise CorruptRecordError("payload header must be an array of 5 fields")
    count, key_nulls, value_nulls, sizes, headers = header
    if count != record_count:
        raise CorruptRecordError(f"payload holds {count!r} records, the batch header says {record_count}")
    if type(sizes) is not list or len(sizes) != 8 or not all(type(s) is int and s >= 0 for s in sizes):
        raise CorruptRecordError("payload buffer sizes must be 8 non-negative integers")
    pos = 4 + header_size
    pos += _pad(pos)
    bufs = []
    for size in sizes:
        end = pos + size
        if end > len(raw):
            raise CorruptRecordError(f"payload buffer of {size} bytes at {pos} runs past the {len(raw)} payload bytes")
        bufs.append(raw[pos:end])
        pos = end + _pad(size)
    keys = _binary(count, key_nulls, bufs[0], bufs[1], bufs[2], "key")
    values = _binary(count, value_nulls, bufs[3], bufs[4], bufs[5], "value")
    if len(bufs[6]) != 8 * count:
        raise CorruptRecordError(f"payload timestamp deltas hold {len(bufs[6])} bytes for {count} records")
    ts_deltas = np.frombuffer(bufs[6], dtype="<i8")
    offset_deltas = None
    if len(bufs[7]):
        if len(bufs[7]) != 4 * count:
            raise CorruptRecordError(f"payload offset deltas hold {len(bufs[7])} bytes for {count} records")
        offset_deltas = np.frombuffer(bufs[7], dtype="<i4").astype(np.int64)
        if offset_deltas[0] < 0 or (np.diff(offset_deltas) <= 0).any():
            raise CorruptRecordError("payload offset deltas must be non-negative and strictly increase")
    _check_headers(headers, count)
    return Columns(keys, values, ts_deltas, headers, offset_deltas)


def _check_headers(headers, count: int) -> None:
    if headers is None:
        return
    if type(headers) is not list or len(headers) != count or not set(map(type, headers)) <= _HEADER_TYPES:
        raise CorruptRecordError("payload headers must be null or one list per record")


def _decode_rows(raw, record_count: int) -> Columns:
    """Magic 1: per-record msgpack bins, turned into the same columns."""
    try:
        cols = msgpack.unpackb(raw, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:
        raise CorruptRecordError(f"payload is not a msgpack column set: {exc}") from None
    if type(cols) is not list or len(cols) != 5:
        raise CorruptRecordError("payload must be an array of 5 columns")
    keys, values, ts_deltas, headers, offset_deltas = cols
    for name, col in (("keys", keys), ("values", values), ("timestamp_deltas", ts_deltas)):
        if type(col) is not list or len(col) != record_count:
            raise CorruptRecordError(f"payload column {name} does not hold {record_count} records")
    if not set(map(type, keys)) <= _KEY_TYPES or not set(map(type, values)) <= _KEY_TYPES:
        raise CorruptRecordError("payload keys and values must be bytes or null")
    if not set(map(type, ts_deltas)) <= {int}:
        raise CorruptRecordError("payload timestamp deltas must be integers")
    _check_headers(headers, record_count)
    deltas = None
    if offset_deltas is not None:
        if type(offset_deltas) is not list or len(offset_deltas) != record_count \
                or not set(map(type, offset_deltas)) <= {int}:
            raise CorruptRecordError("payload offset deltas must be one int per record")
        deltas = np.asarray(offset_deltas, dtype=np.int64)
        if (np.diff(deltas) <= 0).any():
            raise CorruptRecordError("payload offset deltas must strictly increase")
    try:
        ts = np.asarray(ts_deltas, dtype=np.int64)
    except OverflowError:
        raise CorruptRecordError("payload timestamp deltas must fit 64 bits") from None
    return Columns(BinaryColumn.from_pylist(keys), BinaryColumn.from_pylist(values), ts, headers, deltas)
