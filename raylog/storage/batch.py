"""RecordBatch: raylog's one binary batch format, shared by producer, broker and consumer.

A producer builds a batch; the leader stamps base_offset and leader_epoch in
place and appends the same bytes; followers and consumers receive them
unchanged. The header is Kafka's v2 batch header, big-endian:

    offset  size  field
         0     8  base_offset        first offset of the batch (stamped by the leader)
         8     4  batch_length       bytes after this field: total size = 12 + batch_length
        12     4  leader_epoch       epoch of the leader that appended it (stamped)
        16     1  magic              format version, MAGIC
        17     4  crc                CRC32C of every byte from attributes to the end
        21     2  attributes         bits 0-2 codec, bit 3 timestamp type, bit 4 transactional, bit 5 control
        23     4  last_offset_delta  last offset minus base_offset (kept when compaction drops records)
        27     8  base_timestamp     ms; record timestamps are deltas from it
        35     8  max_timestamp      ms; largest record timestamp (or the broker's, for LogAppendTime)
        43     8  producer_id        -1 when not idempotent
        51     2  producer_epoch
        53     4  base_sequence
        57     4  record_count
        61        payload            see payload.py (columns in Arrow's binary layout, optionally compressed)

The CRC starts at attributes so the broker can stamp base_offset and
leader_epoch (and never anything else) without recomputing it: the bytes a
producer checksummed are the bytes a consumer verifies.

Version history of the magic byte: 1 = this header with per-record msgpack
bins in the payload (still read); 2 = this header with the Arrow-layout
payload (written since). Changing the layout means a new magic and new golden
bytes in the tests.

A RecordBatch is a view: it never copies the buffer it reads. It is not
thread-safe; its owner serialises access.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, Sequence

import crc32c
import numpy as np

from raylog.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCodecError
from raylog.storage import payload as _payload

MAGIC = _payload.LAYOUT_ARROW
"""What this version writes."""
READABLE_MAGICS = frozenset((_payload.LAYOUT_ROWS, _payload.LAYOUT_ARROW))

HEADER = struct.Struct(
    ">"
    "q"  # base_offset
    "i"  # batch_length
    "i"  # leader_epoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # last_offset_delta
    "q"  # base_timestamp
    "q"  # max_timestamp
    "q"  # producer_id
    "h"  # producer_epoch
    "i"  # base_sequence
    "i"  # record_count
)
HEADER_SIZE = HEADER.size

BASE_OFFSET_POS = 0
LENGTH_POS = BASE_OFFSET_POS + struct.calcsize(">q")
LEADER_EPOCH_POS = LENGTH_POS + struct.calcsize(">i")
MAGIC_POS = LEADER_EPOCH_POS + struct.calcsize(">i")
CRC_POS = MAGIC_POS + struct.calcsize(">b")
ATTRIBUTES_POS = CRC_POS + struct.calcsize(">I")
LAST_OFFSET_DELTA_POS = ATTRIBUTES_POS + struct.calcsize(">h")
BASE_TIMESTAMP_POS = LAST_OFFSET_DELTA_POS + struct.calcsize(">i")
MAX_TIMESTAMP_POS = BASE_TIMESTAMP_POS + struct.calcsize(">q")
PRODUCER_ID_POS = MAX_TIMESTAMP_POS + struct.calcsize(">q")
PRODUCER_EPOCH_POS = PRODUCER_ID_POS + struct.calcsize(">q")
BASE_SEQUENCE_POS = PRODUCER_EPOCH_POS + struct.calcsize(">h")
RECORD_COUNT_POS = BASE_SEQUENCE_POS + struct.calcsize(">i")
LOG_OVERHEAD = LEADER_EPOCH_POS
"""Bytes before batch_length's coverage starts: total size = LOG_OVERHEAD + batch_length."""

assert CRC_POS == 17 and ATTRIBUTES_POS == 21 and RECORD_COUNT_POS == 57 and HEADER_SIZE == 61

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What the log keeps about a batch it validated: enough to index and account for it."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int


def build(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    timestamps_ms: Sequence[int] | int = 0,
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
    compression: str | None = "lz4",
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytearray:
    """Encode one batch from Python lists. ``timestamps_ms`` is one int per record, or one for all."""
    count = len(values)
    if count == 0:
        raise CorruptRecordError("a record batch holds at least one record")
    if isinstance(timestamps_ms, int):
        timestamps = np.full(count, timestamps_ms, dtype=np.int64)
    else:
        timestamps = np.fromiter(timestamps_ms, dtype=np.int64, count=len(timestamps_ms))
    if keys is not None and len(keys) != count:
        raise CorruptRecordError("keys, values and timestamps must have one entry per record")
    key_col = _payload.BinaryColumn.nulls(count) if keys is None else _payload.BinaryColumn.from_pylist(keys)
    return build_columns(key_col, _payload.BinaryColumn.from_pylist(values), timestamps, headers, compression,
                         offset_deltas, last_offset_delta, base_offset, producer_id, producer_epoch, base_sequence)


def build_columns(
    keys: _payload.BinaryColumn,
    values: _payload.BinaryColumn,
    timestamps_ms: np.ndarray,
    headers: Sequence | None = None,
    compression: str | None = "lz4",
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytearray:
    """Encode one batch from columns already in Arrow's layout (the producer's path); the result is
    writable so the producer can stamp its epoch and sequence when it sends it."""
    count = values.count
    if count == 0:
        raise CorruptRecordError("a record batch holds at least one record")
    if keys.count != count or len(timestamps_ms) != count:
        raise CorruptRecordError("keys, values and timestamps must have one entry per record")
    base_ts = int(timestamps_ms.min())
    max_ts = int(timestamps_ms.max())
    hdrs = None
    if headers is not None and any(headers):
        if len(headers) != count:
            raise CorruptRecordError("headers must have one entry per record")
        hdrs = [[[k, v] for k, v in h] if h else [] for h in headers]
    if offset_deltas is not None:
        offset_deltas = list(offset_deltas)
    if last_offset_delta is None:
        last_offset_delta = offset_deltas[-1] if offset_deltas is not None else count - 1
    codec = _payload.codec_id(compression)
    body = _payload.encode(keys, values, timestamps_ms - base_ts, hdrs, offset_deltas, codec)
    out = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), NO_LEADER_EPOCH, MAGIC, 0,
                     codec, last_offset_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    out[HEADER_SIZE:] = body
    _UINT32.pack_into(out, CRC_POS, crc32c.crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return out


class RecordBatch:
    """A view of one batch at ``position`` of ``buf``; accessors read fixed header offsets."""

    __slots__ = ("buf", "position")

    def __init__(self, buf, position: int = 0):
        self.buf = buf
        self.position = position

    def _field(self, s: struct.Struct, pos: int) -> int:
        return s.unpack_from(self.buf, self.position + pos)[0]

    @property
    def base_offset(self) -> int:
        return self._field(_INT64, BASE_OFFSET_POS)

    @property
    def batch_length(self) -> int:
        return self._field(_INT32, LENGTH_POS)

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def leader_epoch(self) -> int:
        return self._field(_INT32, LEADER_EPOCH_POS)

    @property
    def magic(self) -> int:
        return self.buf[self.position + MAGIC_POS]

    @property
    def crc(self) -> int:
        return self._field(_UINT32, CRC_POS)

    @property
    def attributes(self) -> int:
        return self._field(_INT16, ATTRIBUTES_POS)

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND)

    @property
    def last_offset_delta(self) -> int:
        return self._field(_INT32, LAST_OFFSET_DELTA_POS)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return self._field(_INT64, BASE_TIMESTAMP_POS)

    @property
    def max_timestamp(self) -> int:
        return self._field(_INT64, MAX_TIMESTAMP_POS)

    @property
    def producer_id(self) -> int:
        return self._field(_INT64, PRODUCER_ID_POS)

    @property
    def producer_epoch(self) -> int:
        return self._field(_INT16, PRODUCER_EPOCH_POS)

    @property
    def base_sequence(self) -> int:
        return self._field(_INT32, BASE_SEQUENCE_POS)

    @property
    def record_count(self) -> int:
        return self._field(_INT32, RECORD_COUNT_POS)

    def header(self) -> tuple:
        return HEADER.unpack_from(self.buf, self.position)

    def compute_crc(self) -> int:
        start = self.position + ATTRIBUTES_POS
        end = self.position + self.size
        return crc32c.crc32c(memoryview(self.buf)[start:end])

    def validate(self, max_bytes: int | None = None, check_payload: bool = True) -> None:
        """Raise CorruptRecordError (or a subclass) unless this is a whole, intact batch.

        Checks, in order: the header fits, batch_length is sane and fits the
        buffer, the size bound, magic, record_count and last_offset_delta agree, the codec is
        known, the CRC matches and (``check_payload``) the payload decodes to
        record_count records.
        """
        available = len(self.buf) - self.position
        if available < HEADER_SIZE:
            raise CorruptRecordError(f"{available} bytes cannot hold a batch header ({HEADER_SIZE})")
        (base_offset, length, _epoch, magic, crc, attributes, last_delta, _bts, _mts,
         _pid, _pep, _seq, count) = self.header()
        size = LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"batch_length {length} is shorter than a header")
        if size > available:
            raise CorruptRecordError(f"batch_length {length} runs past the {available} bytes given")
        if max_bytes is not None and size > max_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max_message_bytes {max_bytes}")
        if magic not in READABLE_MAGICS:
            raise CorruptRecordError(f"unknown magic {magic} (this version reads {sorted(READABLE_MAGICS)})")
        if count <= 0 or last_delta < count - 1:
            raise CorruptRecordError(f"record_count {count} does not fit last_offset_delta {last_delta}")
        if base_offset < 0:
            raise CorruptRecordError(f"negative base_offset {base_offset}")
        codec = attributes & CODEC_MASK
        if codec not in _payload.KNOWN_CODECS:
            raise UnsupportedCodecError(f"batch uses compression codec {codec}; raylog supports "
                                        f"{_payload.SUPPORTED_CODECS}")
        actual = self.compute_crc()
        if actual != crc:
            raise CorruptRecordError(f"crc mismatch: header says {crc:#010x}, bytes give {actual:#010x}")
        if check_payload:
            self.columns()

    def columns(self) -> _payload.Columns:
        """Decode the payload (trusts the header; call validate() on untrusted bytes)."""
        start = self.position + HEADER_SIZE
        end = self.position + self.size
        return _payload.decode(memoryview(self.buf)[start:end], self.codec, self.record_count, self.magic)

    def offsets(self, cols: _payload.Columns) -> np.ndarray:
        """int64 offset of each record."""
        base = self.base_offset
        if cols.offset_deltas is None:
            return np.arange(base, base + self.record_count, dtype=np.int64)
        return base + cols.offset_deltas

    def timestamps(self, cols: _payload.Columns) -> np.ndarray:
        """int64 timestamp (ms) of each record: the broker's for LogAppendTime."""
        if self.log_append_time:
            return np.full(self.record_count, self.max_timestamp, dtype=np.int64)
        return self.base_timestamp + cols.timestamp_deltas

    def stamp(self, base_offset: int, leader_epoch: int) -> None:
        """Write base_offset and leader_epoch in place; both sit outside the CRC."""
        _INT64.pack_into(self.buf, self.position + BASE_OFFSET_POS, base_offset)
        _INT32.pack_into(self.buf, self.position + LEADER_EPOCH_POS, leader_epoch)

    def set_producer_state(self, producer_epoch: int, base_sequence: int) -> None:
        """Stamp the producer epoch and first sequence (the producer assigns them when it first
        sends the batch); both are inside the CRC, so it is recomputed."""
        _INT16.pack_into(self.buf, self.position + PRODUCER_EPOCH_POS, producer_epoch)
        _INT32.pack_into(self.buf, self.position + BASE_SEQUENCE_POS, base_sequence)
        _UINT32.pack_into(self.buf, self.position + CRC_POS, self.compute_crc())

    def set_log_append_time(self, now_ms: int) -> None:
        """Mark the batch LogAppendTime with the broker's clock; this one does recompute the CRC."""
        attrs = self.attributes | TIMESTAMP_TYPE_LOG_APPEND
        _INT16.pack_into(self.buf, self.position + ATTRIBUTES_POS, attrs)
        _INT64.pack_into(self.buf, self.position + MAX_TIMESTAMP_POS, now_ms)
        _UINT32.pack_into(self.buf, self.position + CRC_POS, self.compute_crc())

    def info(self) -> BatchInfo:
        return BatchInfo(self.position, self.size, self.base_offset, self.last_offset,
                         self.max_timestamp, self.record_count)

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.record_count}, size={self.size})")


def peek_length(buf, position: int) -> tuple[int, int]:
    """(base_offset, total size) of the batch at ``position``, read without validation."""
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, position)
    return base_offset, LOG_OVERHEAD + length


def iter_batches(buf, start: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
    """Views of the consecutive batches of a trusted buffer (log reads, fetch responses)."""
    end = len(buf) if end is None else end
    pos = start
    while pos + HEADER_SIZE <= end:
        _, size = peek_length(buf, pos)
        if size < HEADER_SIZE or pos + size > end:
            return
        yield RecordBatch(buf, pos)
        pos += size


def validate_all(buf, max_bytes: int | None = None, check_payload: bool = True) -> list[BatchInfo]:
    """Validate a buffer made only of whole batches; raise on the first bad byte."""
    infos = []
    pos = 0
    n = len(buf)
    if n == 0:
        raise CorruptRecordError("empty buffer holds no record batch")
    while pos < n:
        batch = RecordBatch(buf, pos)
        batch.validate(max_bytes, check_payload)
        infos.append(batch.info())
        pos += batch.size
    return infos
