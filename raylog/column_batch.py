"""ColumnBatch: the vectorized view of fetched records, decoded column by column.

A fetch returns whole record batches as one buffer; decoding it costs a few C
calls per batch (msgpack + lz4), never Python work per record, so a consumer
that works on columns (numpy, Arrow, Spark) reads at the decode floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raylog.errors import CorruptRecordError
from raylog.records import ConsumerRecord
from raylog.storage.batch import iter_batches


@dataclass(frozen=True, slots=True)
class ColumnBatch:
    """Records of one partition in offset order, as parallel columns."""

    topic: str
    partition: int
    offsets: np.ndarray
    """int64, strictly increasing."""
    timestamps: np.ndarray
    """int64 ms."""
    timestamp_type: int
    """0 CreateTime, 1 LogAppendTime."""
    keys: list
    values: list
    headers: list | None
    """None when no record has headers, else one list of (name, value) pairs per record."""
    next_offset: int
    """Where the next fetch starts: one past the last offset of the last batch read."""

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int) -> "ColumnBatch":
        next_offset = self.next_offset if stop >= len(self) else int(self.offsets[stop])
        return ColumnBatch(self.topic, self.partition, self.offsets[start:stop], self.timestamps[start:stop],
                           self.timestamp_type, self.keys[start:stop], self.values[start:stop],
                           None if self.headers is None else self.headers[start:stop], next_offset)

    def records(self, key_deserializer=None, value_deserializer=None) -> list[ConsumerRecord]:
        """One ConsumerRecord per record (costs Python work per record; columns do not)."""
        keys = self.keys if key_deserializer is None else [
            None if k is None else key_deserializer(k) for k in self.keys]
        values = self.values if value_deserializer is None else [
            None if v is None else value_deserializer(v) for v in self.values]
        headers = self.headers or [None] * len(self)
        t, p, tt = self.topic, self.partition, self.timestamp_type
        return [ConsumerRecord(t, p, o, ts, tt, k, v, [tuple(h) for h in hs] if hs else [])
                for o, ts, k, v, hs in zip(self.offsets.tolist(), self.timestamps.tolist(), keys, values, headers)]


def decode(topic: str, partition: int, buf, start_offset: int, check_crcs: bool = True) -> ColumnBatch:
    """Decode every batch in a fetch buffer, dropping records below ``start_offset``."""
    offsets, timestamps, keys, values, headers = [], [], [], [], []
    any_headers = False
    ts_type = 0
    next_offset = start_offset
    for batch in iter_batches(buf):
        if check_crcs and batch.compute_crc() != batch.crc:
            raise CorruptRecordError(f"{topic}-{partition}: fetched batch at offset {batch.base_offset} fails its CRC")
        cols = batch.columns()
        n = batch.record_count
        base = batch.base_offset
        offs = (np.arange(base, base + n, dtype=np.int64) if cols.offset_deltas is None
                else base + np.asarray(cols.offset_deltas, dtype=np.int64))
        if batch.log_append_time:
            ts = np.full(n, batch.max_timestamp, dtype=np.int64)
            ts_type = 1
        else:
            ts = batch.base_timestamp + np.asarray(cols.timestamp_deltas, dtype=np.int64)
        skip = 0
        if base < start_offset:
            skip = int(np.searchsorted(offs, start_offset))
        if skip < n:
            offsets.append(offs[skip:] if skip else offs)
            timestamps.append(ts[skip:] if skip else ts)
            keys.extend(cols.keys[skip:] if skip else cols.keys)
            values.extend(cols.values[skip:] if skip else cols.values)
            if cols.headers is not None:
                if not any_headers:
                    headers = [[] for _ in range(len(keys) - (n - skip))]
                    any_headers = True
                headers.extend(cols.headers[skip:])
            elif any_headers:
                headers.extend([[]] * (n - skip))
        next_offset = max(next_offset, batch.next_offset)
    empty = np.empty(0, dtype=np.int64)
    return ColumnBatch(topic, partition,
                       np.concatenate(offsets) if len(offsets) > 1 else (offsets[0] if offsets else empty),
                       np.concatenate(timestamps) if len(timestamps) > 1 else (timestamps[0] if timestamps else empty),
                       ts_type, keys, values, headers if any_headers else None, next_offset)


__all__ = ["ColumnBatch", "decode"]
