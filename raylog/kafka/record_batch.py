"""Kafka's RecordBatch v2 (magic 2) as Kafka clients send and read it, converted to and from
raylog's batches.

raylog's batch header is Kafka's v2 header byte for byte (raylog/storage/batch.py); only what
follows it differs. Kafka's records section is a sequence of varint-framed records::

    length            varint   bytes after this field
    attributes        int8     unused (0)
    timestamp_delta   varlong  from the batch's base_timestamp
    offset_delta      varint   from the batch's base_offset
    key_length        varint   -1 for a null key
    key
    value_length      varint   -1 for a null value
    value
    header_count      varint
      header_key_length varint, header_key (UTF-8), header_value_length varint (-1 null), value

compressed as a whole by the batch's codec: gzip (a gzip stream), snappy (Kafka's Java xerial
framing, or a raw block), lz4 (lz4's frame format), zstd (one or more frames, with or without a
content size). A produced batch is converted into a raylog batch keeping everything a record is:
producer id, epoch and sequence, timestamps and their type, offsets deltas (a compacted batch's
gaps), keys, values and headers with their nulls. A fetched raylog batch is converted back, keeping
its base offset and leader epoch; it is sent uncompressed (a listener on the consumer's host:
compressing costs the listener's CPU to save loopback bytes).

Both ways have two paths. Records without headers (the common case) are read and written a field
at a time across the whole batch with numpy (4x and 3.4x the record-at-a-time paths, measured in
docs/performance.md); batches with headers, with a record of 8 KiB or more (its length a varint
of 3 bytes or more), and bytes the column path does not expect go one record at a time, which
also names what is wrong with a damaged batch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam
import crc32c
import lz4.frame
import numpy as np

from raylog.errors import CorruptRecordError, RecordTooLargeError, UnsupportedCodecError
from raylog.storage import batch as raylog_batch
from raylog.storage import payload

HEADER = raylog_batch.HEADER
HEADER_SIZE = raylog_batch.HEADER_SIZE
KAFKA_MAGIC = 2
CONTROL = raylog_batch.CONTROL
TRANSACTIONAL = raylog_batch.TRANSACTIONAL
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class KafkaBatch:
    """One decoded Kafka batch: its header fields and one entry per record in each column."""

    base_offset: int
    leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    offset_deltas: np.ndarray
    timestamp_deltas: np.ndarray
    key_column: payload.BinaryColumn
    value_column: payload.BinaryColumn
    headers: list[list[tuple[str, bytes | None]]] | None
    """None when no record has a header."""

    @property
    def codec(self) -> int:
        return self.attributes & raylog_batch.CODEC_MASK

    @property
    def record_count(self) -> int:
        return self.value_column.count

    @property
    def keys(self) -> list[bytes | None]:
        """The keys as Python objects (one per record: for tests and tools, not the hot path)."""
        return self.key_column.to_pylist()

    @property
    def values(self) -> list[bytes | None]:
        """The values as Python objects (one per record: for tests and tools, not the hot path)."""
        return self.value_column.to_pylist()


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (or varlong) at ``pos``: (value, position after it)."""
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("a record's varint runs past the end of the batch")
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise CorruptRecordError("a record's varint does not fit 64 bits")
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("a record's varint is longer than 10 bytes")


def _put_varint(out: bytearray, value: int) -> None:
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _bytes_at(buf: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    length, pos = _varint(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"a record's {what} length is {length}")
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptRecordError(f"a record's {what} of {length} bytes runs past the end of the batch")
    return buf[pos:end], end


def _decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == payload.CODEC_NONE:
            return data
        if codec == payload.CODEC_GZIP:
            out = bytes(cramjam.gzip.decompress(data))
        elif codec == payload.CODEC_SNAPPY:
            out = _snappy(data)
        elif codec == payload.CODEC_LZ4:
            out = lz4.frame.decompress(data)
        elif codec == payload.CODEC_ZSTD:
            out = bytes(cramjam.zstd.decompress(data))
        else:
            raise UnsupportedCodecError(f"batch uses compression codec {codec}; Kafka's are {payload.SUPPORTED_CODECS}")
    except (cramjam.DecompressionError, RuntimeError, ValueError) as exc:
        raise CorruptRecordError(f"a {payload.NAME_BY_CODEC[codec]} batch does not decompress: {exc}") from None
    if len(out) > payload.MAX_UNCOMPRESSED_BYTES:
        raise CorruptRecordError(f"a batch inflates past {payload.MAX_UNCOMPRESSED_BYTES} bytes")
    return out


def _snappy(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, pos = bytearray(), 16  # magic, then two int32 versions
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("a xerial snappy block's length is cut short")
        (length,) = _UINT32.unpack_from(data, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(data[pos:pos + length])
        pos += length
        if len(out) > payload.MAX_UNCOMPRESSED_BYTES:
            break
    return bytes(out)


def decode(buf, max_bytes: int | None = None) -> list[KafkaBatch]:
    """Every batch in a Produce request's (or a Fetch answer's) records field. Raises
    CorruptRecordError (or UnsupportedCodecError) for anything that is not whole, intact v2
    batches; nothing is decoded from a batch whose CRC fails."""
    buf = bytes(buf)
    out, pos = [], 0
    while pos < len(buf):
        if len(buf) - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{len(buf) - pos} trailing bytes cannot hold a batch header")
        (base_offset, length, leader_epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         pid, pepoch, base_seq, count) = HEADER.unpack_from(buf, pos)
        size = raylog_batch.LOG_OVERHEAD + length
        if magic != KAFKA_MAGIC:
            raise CorruptRecordError(f"record batch magic {magic}: only v2 batches (magic 2) are taken")
        if length < HEADER_SIZE - raylog_batch.LOG_OVERHEAD or pos + size > len(buf):
            raise CorruptRecordError(f"batch_length {length} does not fit the {len(buf) - pos} bytes given")
        if max_bytes is not None and size > max_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max_message_bytes {max_bytes}")
        if count < 0 or (count and count > last_delta + 1):
            raise CorruptRecordError(f"record_count {count} does not fit last_offset_delta {last_delta}")
        if crc32c.crc32c(buf[pos + raylog_batch.ATTRIBUTES_POS:pos + size]) != crc:
            raise CorruptRecordError("a record batch's CRC32C does not match its bytes")
        records = _decompress(attributes & raylog_batch.CODEC_MASK, buf[pos + HEADER_SIZE:pos + size])
        out.append(_records(records, count, (base_offset, leader_epoch, attributes, last_delta, base_ts, max_ts,
                                             pid, pepoch, base_seq)))
        pos += size
    return out


def _records(data: bytes, count: int, header: tuple) -> KafkaBatch:
    """The batch's records: by columns when no record has headers (the common case), else one
    record at a time; both refuse exactly the same bytes (the column path hands anything unusual
    to the other, which names what is wrong)."""
    columns = _columns(data, count)
    if columns is None:
        return _each_record(data, count, header)
    offset_deltas, ts_deltas, keys, values = columns
    _check_offset_deltas(offset_deltas, header[3])
    return KafkaBatch(*header, offset_deltas, ts_deltas, keys, values, None)


_TEN = np.arange(10, dtype=np.int64)
_SHIFTS = (7 * _TEN).astype(np.uint64)
_SHORT = 3
"""Bytes of the window tried first: a varint of a record's field in a batch is nearly always at
most 3 bytes (values under 2**20: a timestamp delta of 17 minutes, a 1 MB value)."""


def _varints(padded: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The zigzag varint at each position of ``at`` in ``padded`` (the records with 10 zero bytes
    after them): (values, sizes); None where one is 10 bytes long or unterminated (rare: left to
    the exact path)."""
    first = padded[at]
    if (first < 0x80).all():  # a byte each (a null key's -1, a header count's 0): no window to read
        raw = first.astype(np.int64)
        return (raw >> 1) ^ -(raw & 1), np.ones(len(at), dtype=np.int64)
    span = _SHORT
    window = padded[at[:, None] + _TEN[:span]]
    ends = (window & 0x80) == 0
    if not ends.any(axis=1).all():  # one longer than the short window: read the whole 10 bytes
        span = 10
        window = padded[at[:, None] + _TEN]
        ends = (window & 0x80) == 0
        if not ends.any(axis=1).all():
            return None
    sizes = ends.argmax(axis=1) + 1
    if (sizes >= 10).any():
        return None
    groups = (window & 0x7F).astype(np.uint64) * (_TEN[:span] < sizes[:, None])
    raw = (groups << _SHIFTS[:span]).sum(axis=1, dtype=np.uint64)
    return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64), sizes


def _columns(data: bytes, count: int) -> tuple[np.ndarray, np.ndarray, payload.BinaryColumn,
                                                payload.BinaryColumn] | None:
    """(offset deltas, timestamp deltas, key column, value column) of ``count`` records with no
    headers, found with numpy a field at a time across every record; None for anything else."""
    size = len(data)
    if count == 0 or size == 0 or count > size // 2:  # a record is at least 2 bytes
        return None
    # Only where each record begins is found one record at a time (each depends on the last), with
    # as little as can be done per record: its length's zigzag sign and size are checked after,
    # across all of them. A length of 3 bytes or more (a record of 8 KiB) goes to the exact path.
    positions: list[int] = []
    mark = positions.append
    pos = 0
    try:
        for _ in range(count):
            mark(pos)
            b = data[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
            else:
                c = data[pos + 1]
                if c >= 0x80:
                    return None
                pos += 2 + (((b & 0x7F) | (c << 7)) >> 1)
    except IndexError:
        return None
    if pos != size:
        return None
    padded = np.zeros(size + 10, dtype=np.uint8)
    padded[:size] = np.frombuffer(data, dtype=np.uint8)
    record_at = np.array(positions, dtype=np.int64)
    lead = padded[record_at].astype(np.int64)
    two = lead >= 0x80
    if two.any():
        lead = np.where(two, (lead & 0x7F) | (padded[record_at + 1].astype(np.int64) << 7), lead)
    if ((lead & 1) | (lead < 2)).any():  # an odd zigzag is a negative length; every record has a byte
        return None
    starts = record_at + 1 + two
    ends = np.empty(count, dtype=np.int64)
    ends[:-1] = record_at[1:]
    ends[-1] = size
    # Each field is read for every record at once; a record whose fields run past its end goes to
    # the exact path before the next read (the padding covers one varint past the data, no more).
    at = starts + 1  # past the attributes byte
    deltas = []
    for _timestamp_then_offset in range(2):
        found = _varints(padded, at)
        if found is None:
            return None
        deltas.append(found[0])
        at = at + found[1]
        if (at > ends).any():
            return None
    columns = []
    for _key_then_value in range(2):
        found = _varints(padded, at)
        if found is None or (found[0] < -1).any():
            return None
        lengths, widths = found
        begin = at + widths
        at = begin + np.maximum(lengths, 0)
        if (at > ends).any():
            return None
        columns.append(_binary_column(padded, begin, lengths))
    found = _varints(padded, at)
    if found is None or found[0].any() or not np.array_equal(at + found[1], ends):
        return None  # headers somewhere, or fields that do not add up: the exact path decides
    return deltas[1], deltas[0], columns[0], columns[1]


def _binary_column(padded: np.ndarray, begin: np.ndarray, lengths: np.ndarray) -> payload.BinaryColumn:
    """The byte strings at ``begin`` of these ``lengths`` (-1: null), in Arrow's layout."""
    count = len(lengths)
    present = lengths >= 0
    nulls = count - int(present.sum())
    if nulls == count:
        return payload.BinaryColumn.nulls(count)
    sizes = np.where(present, lengths, 0)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:], dtype=np.int32)
    inside = _ranges_mask(len(padded), begin, sizes)
    validity = memoryview(np.packbits(present, bitorder="little").tobytes()) if nulls else None
    return payload.BinaryColumn(count, offsets, memoryview(padded[inside].tobytes()), validity, nulls)


def _ranges_mask(length: int, begin: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A bool per byte of a ``length``-byte buffer: True inside one of the ranges [begin, begin +
    size). The ranges are disjoint and in order (one record's field each): +1 where each starts,
    -1 where it ends, and the running sum is 0 or 1, a bool array as it stands."""
    kept = sizes > 0
    marks = np.zeros(length + 1, dtype=np.int8)
    marks[begin[kept]] = 1
    marks[begin[kept] + sizes[kept]] -= 1  # -= : a range may end where the next one starts
    return np.cumsum(marks[:-1], dtype=np.int8).view(bool)


def _check_offset_deltas(deltas: np.ndarray, last_delta: int) -> None:
    if len(deltas) and (deltas[-1] != last_delta or deltas[0] < 0 or (np.diff(deltas) <= 0).any()):
        raise CorruptRecordError("a record batch's offset deltas are not increasing up to last_offset_delta")


def _each_record(data: bytes, count: int, header: tuple) -> KafkaBatch:
    offset_deltas, ts_deltas, keys, values, headers = [], [], [], [], []
    pos = 0
    for _ in range(count):
        length, pos = _varint(data, pos)
        end = pos + length
        if length < 1 or end > len(data):
            raise CorruptRecordError(f"a record of {length} bytes does not fit its batch")
        pos += 1  # attributes
        ts, pos = _varint(data, pos)
        delta, pos = _varint(data, pos)
        key, pos = _bytes_at(data, pos, "key")
        value, pos = _bytes_at(data, pos, "value")
        n, pos = _varint(data, pos)
        if n < 0 or n > length:
            raise CorruptRecordError(f"a record claims {n} headers")
        pairs = []
        for _h in range(n):
            name, pos = _bytes_at(data, pos, "header key")
            if name is None:
                raise CorruptRecordError("a record header has a null key")
            hvalue, pos = _bytes_at(data, pos, "header value")
            try:
                pairs.append((name.decode("utf-8"), hvalue))
            except UnicodeDecodeError:
                raise CorruptRecordError("a record header's key is not UTF-8") from None
        if pos != end:
            raise CorruptRecordError("a record's fields do not add up to its length")
        offset_deltas.append(delta)
        ts_deltas.append(ts)
        keys.append(key)
        values.append(value)
        headers.append(pairs)
    if pos != len(data):
        raise CorruptRecordError("a record batch holds more bytes than its records")
    deltas = np.array(offset_deltas, dtype=np.int64)
    _check_offset_deltas(deltas, header[3])
    return KafkaBatch(*header, deltas, np.array(ts_deltas, dtype=np.int64), payload.BinaryColumn.from_pylist(keys),
                      payload.BinaryColumn.from_pylist(values), headers if any(headers) else None)


def to_raylog(kb: KafkaBatch) -> bytearray:
    """The raylog batch holding exactly ``kb``'s records, compressed with its codec."""
    if kb.record_count == 0:
        raise CorruptRecordError("a produced record batch holds at least one record")
    if kb.attributes & (CONTROL | TRANSACTIONAL):
        raise CorruptRecordError("transactional and control batches are not taken (no transactions)")
    count = kb.record_count
    # Deltas strictly increasing from >= 0 (checked at decode) that end at count - 1 are 0..count-1.
    deltas = None if kb.offset_deltas[-1] == count - 1 else kb.offset_deltas.tolist()
    out = raylog_batch.build_columns(kb.key_column, kb.value_column, kb.base_timestamp + kb.timestamp_deltas,
                                     kb.headers, payload.NAME_BY_CODEC[kb.codec], deltas, kb.last_offset_delta, 0,
                                     kb.producer_id, kb.producer_epoch, kb.base_sequence)
    if kb.attributes & raylog_batch.TIMESTAMP_TYPE_LOG_APPEND:
        raylog_batch.RecordBatch(out).set_log_append_time(kb.max_timestamp)
    return out


def from_raylog(batch: raylog_batch.RecordBatch) -> bytes:
    """``batch`` (a stored, intact raylog batch) as an uncompressed Kafka v2 batch."""
    cols = batch.columns()
    count = batch.record_count
    by_columns = not cols.headers and all(_nulls_are_empty(c) for c in (cols.keys, cols.values))
    body = _encode_columns(cols, count) if by_columns else _encode_each(cols, count)
    (base_offset, _length, leader_epoch, _magic, _crc, attributes, last_delta, base_ts, max_ts, pid, pepoch,
     base_seq, _count) = batch.header()
    attributes &= ~raylog_batch.CODEC_MASK
    out = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(out, 0, base_offset, HEADER_SIZE - raylog_batch.LOG_OVERHEAD + len(body), leader_epoch,
                     KAFKA_MAGIC, 0, attributes, last_delta, base_ts, max_ts, pid, pepoch, base_seq, count)
    out[HEADER_SIZE:] = body
    _UINT32.pack_into(out, raylog_batch.CRC_POS, crc32c.crc32c(memoryview(out)[raylog_batch.ATTRIBUTES_POS:]))
    return bytes(out)


def _nulls_are_empty(column: payload.BinaryColumn) -> bool:
    """Whether the column's data is exactly its entries' bytes (a null spanning bytes is legal in
    Arrow's layout, and the column encoder copies the data as a whole)."""
    return column.null_count == 0 or column.offsets is None or not column.lengths()[~column.present()].any()


def _zigzag_widths(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value zigzag-encoded (uint64) and its varint's width in bytes."""
    raw = ((values << 1) ^ (values >> 63)).astype(np.uint64)
    widths = np.ones(len(values), dtype=np.int64)
    for k in range(1, 10):
        widths += (raw >> np.uint64(7 * k)) != 0
    return raw, widths


def _put_varints(out: np.ndarray, at: np.ndarray, raw: np.ndarray, widths: np.ndarray) -> None:
    for k in range(int(widths.max())):
        rows = widths > k
        group = ((raw[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[at[rows] + k] = group | np.where(widths[rows] > k + 1, 0x80, 0).astype(np.uint8)


def _encode_columns(cols: payload.Columns, count: int) -> bytes:
    """Kafka's records of a batch without headers, built with numpy a field at a time."""
    ts_raw, ts_w = _zigzag_widths(cols.timestamp_deltas.astype(np.int64))
    deltas = np.arange(count, dtype=np.int64) if cols.offset_deltas is None else cols.offset_deltas.astype(np.int64)
    od_raw, od_w = _zigzag_widths(deltas)
    key_len = np.where(cols.keys.present(), cols.keys.lengths(), -1)
    value_len = np.where(cols.values.present(), cols.values.lengths(), -1)
    kl_raw, kl_w = _zigzag_widths(key_len)
    vl_raw, vl_w = _zigzag_widths(value_len)
    key_size, value_size = np.maximum(key_len, 0), np.maximum(value_len, 0)
    # attributes (1), timestamp, offset, key length, key, value length, value, header count (1: 0)
    body = 1 + ts_w + od_w + kl_w + key_size + vl_w + value_size + 1
    len_raw, len_w = _zigzag_widths(body)
    ends = np.cumsum(len_w + body)
    starts = ends - len_w - body
    out = np.zeros(int(ends[-1]), dtype=np.uint8)
    _put_varints(out, starts, len_raw, len_w)
    at = starts + len_w + 1
    for raw, widths in ((ts_raw, ts_w), (od_raw, od_w), (kl_raw, kl_w)):
        _put_varints(out, at, raw, widths)
        at = at + widths
    _fill(out, at, key_size, cols.keys)
    at = at + key_size
    _put_varints(out, at, vl_raw, vl_w)
    at = at + vl_w
    _fill(out, at, value_size, cols.values)
    return out.tobytes()


def _fill(out: np.ndarray, at: np.ndarray, sizes: np.ndarray, column: payload.BinaryColumn) -> None:
    """Each entry of ``column`` (its bytes, in order) at ``at`` in ``out``."""
    if sizes.any():
        out[_ranges_mask(len(out), at, sizes)] = np.frombuffer(column.data, dtype=np.uint8)[:int(sizes.sum())]


def _encode_each(cols: payload.Columns, count: int) -> bytearray:
    """Kafka's records of a batch with headers, one record at a time."""
    keys, values = cols.keys.to_pylist(), cols.values.to_pylist()
    deltas = range(count) if cols.offset_deltas is None else cols.offset_deltas.tolist()
    ts = cols.timestamp_deltas.tolist()
    headers = cols.headers
    body = bytearray()
    record = bytearray()
    for i in range(count):
        record.clear()
        record.append(0)
        _put_varint(record, ts[i])
        _put_varint(record, deltas[i])
        for field in (keys[i], values[i]):
            if field is None:
                _put_varint(record, -1)
            else:
                _put_varint(record, len(field))
                record += field
        pairs = headers[i] if headers else ()
        _put_varint(record, len(pairs))
        for name, hvalue in pairs:
            raw = name.encode("utf-8")
            _put_varint(record, len(raw))
            record += raw
            if hvalue is None:
                _put_varint(record, -1)
            else:
                _put_varint(record, len(hvalue))
                record += hvalue
        _put_varint(body, len(record))
        body += record
    return body


def from_raylog_log(data) -> bytes:
    """Every whole batch of a replica's fetch answer, as Kafka v2 batches."""
    return b"".join(from_raylog(b) for b in raylog_batch.iter_batches(data))
