"""The columnar payload inside a record batch, and its lz4 framing.

The payload is one msgpack array of parallel columns, so building or decoding a
batch costs a handful of C calls rather than Python work per record:

    [keys, values, timestamp_deltas, headers, offset_deltas]

- keys, values: lists of bytes or None (a None value is a tombstone).
- timestamp_deltas: ints, record timestamp minus the batch's base_timestamp.
- headers: None when no record has headers, else one list per record of
  [name (str), value (bytes or None)] pairs.
- offset_deltas: None when the records hold offsets base..base+count-1 (every
  batch a producer builds); a list of ints only after compaction removed records.

With codec lz4 the msgpack bytes are compressed as a whole with lz4's block
format, prefixed by the uncompressed size as 4 little-endian bytes (the
``store_size`` framing of the ``lz4`` package). Block beats frame format here:
no frame header or checksum to pay for, and the batch CRC already covers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import lz4.block
import msgpack

from raylog.errors import CorruptRecordError, UnsupportedCodecError

CODEC_NONE = 0
CODEC_LZ4 = 3
"""Codec ids are Kafka's (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd); raylog implements 0 and 3."""

CODEC_BY_NAME = {"none": CODEC_NONE, None: CODEC_NONE, "lz4": CODEC_LZ4}
KNOWN_CODECS = frozenset(CODEC_BY_NAME.values())

MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024
"""Refuse to inflate a payload past this: a forged size prefix must not allocate gigabytes."""

_NONE_TYPE = type(None)
_KEY_TYPES = {bytes, _NONE_TYPE}
_HEADER_TYPES = {list, _NONE_TYPE}


@dataclass(frozen=True, slots=True)
class Columns:
    """Decoded payload columns of one batch; lists are parallel, one entry per record."""

    keys: list
    values: list
    timestamp_deltas: list
    headers: list | None
    offset_deltas: list | None


def codec_id(compression_type: str | None) -> int:
    """Map a compression_type name ('lz4', 'none') to its codec id."""
    try:
        return CODEC_BY_NAME[compression_type]
    except KeyError:
        raise UnsupportedCodecError(f"unsupported compression_type {compression_type!r}; use 'lz4' or 'none'") from None


def encode(
    keys: Sequence,
    values: Sequence,
    timestamp_deltas: Sequence[int],
    headers: Sequence | None,
    offset_deltas: Sequence[int] | None,
    codec: int,
) -> bytes:
    """Pack the columns and compress them with ``codec``."""
    raw = msgpack.packb([keys, values, timestamp_deltas, headers, offset_deltas], use_bin_type=True)
    if codec == CODEC_LZ4:
        return lz4.block.compress(raw, store_size=True)
    if codec == CODEC_NONE:
        return raw
    raise UnsupportedCodecError(f"unknown codec id {codec}")


def decode(payload: bytes | memoryview, codec: int, record_count: int) -> Columns:
    """Inflate and unpack a payload; raise CorruptRecordError unless it holds ``record_count`` records."""
    if codec == CODEC_LZ4:
        if len(payload) < 4:
            raise CorruptRecordError("lz4 payload shorter than its size prefix")
        size = int.from_bytes(payload[:4], "little")
        if size > MAX_UNCOMPRESSED_BYTES:
            raise CorruptRecordError(f"lz4 payload claims {size} uncompressed bytes (> {MAX_UNCOMPRESSED_BYTES})")
        try:
            raw = lz4.block.decompress(payload)
        except Exception as exc:  # lz4.block.LZ4BlockError is not exported consistently
            raise CorruptRecordError(f"lz4 payload does not decompress: {exc}") from None
    elif codec == CODEC_NONE:
        raw = payload
    else:
        raise UnsupportedCodecError(f"unknown codec id {codec}")
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
    # The type checks cost more than msgpack's decode (22 us per 1024-record column, measured with
    # bench/storage_bench.py's batches); count(None) is ~1 us and only None equals None, so the
    # common all-null keys column skips the full check.
    if (keys.count(None) != record_count and not set(map(type, keys)) <= _KEY_TYPES) \
            or not set(map(type, values)) <= _KEY_TYPES:
        raise CorruptRecordError("payload keys and values must be bytes or null")
    if not set(map(type, ts_deltas)) <= {int}:
        raise CorruptRecordError("payload timestamp deltas must be integers")
    if headers is not None and (type(headers) is not list or len(headers) != record_count
                                or not set(map(type, headers)) <= _HEADER_TYPES):
        raise CorruptRecordError("payload headers must be null or one list per record")
    if offset_deltas is not None:
        if type(offset_deltas) is not list or len(offset_deltas) != record_count:
            raise CorruptRecordError("payload offset deltas must be one int per record")
        if any(b <= a for a, b in zip(offset_deltas, offset_deltas[1:])):
            raise CorruptRecordError("payload offset deltas must strictly increase")
    return Columns(keys, values, ts_deltas, headers, offset_deltas)
