"""Records as Arrow and Arrow as records, in the schemas users of Kafka already know.

Out of raylog (reads):

- Spark's Kafka source (``ColumnBatch.to_arrow``, the Spark bridge)::

      key binary, value binary, topic string, partition int32, offset int64,
      timestamp timestamp, timestampType int32 (0 CreateTime, 1 LogAppendTime),
      headers list<struct<key: string, value: binary>>  (only when asked for)

- Ray Data's ``read_kafka`` (``raylog.data.read_topic``)::

      offset int64, key binary, value binary, topic string, partition int32,
      timestamp int64 (ms), timestamp_type int32 (1 CreateTime, 2 LogAppendTime),
      headers map<string, binary>

Keys and values are views of the fetched buffers; the other columns are built with
numpy, never with a Python object per record (headers excepted: they are objects
already).

Into raylog (writes): the columns of Spark's Kafka sink (value, and optionally key,
headers, partition, topic) plus timestamp, turned into ``send_batch`` calls.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
"""headers: array<struct<key: string, value: binary>>, Spark's includeHeaders layout."""
HEADER_MAP_TYPE = pa.map_(pa.string(), pa.binary())
"""headers as Ray Data's read_kafka gives them (a later header with the same key wins)."""


def spark_schema(include_headers: bool = False, time_zone: str | None = None) -> pa.Schema:
    """Spark's Kafka source columns. Timestamps are ms without a zone for plain Arrow users;
    Spark's mapInArrow wants its own form: microseconds in the session ``time_zone``."""
    ts = pa.timestamp("ms") if time_zone is None else pa.timestamp("us", tz=time_zone)
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()), pa.field("timestamp", ts),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


RAY_DATA_SCHEMA = pa.schema([
    pa.field("offset", pa.int64()), pa.field("key", pa.binary()), pa.field("value", pa.binary()),
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()), pa.field("timestamp", pa.int64()),
    pa.field("timestamp_type", pa.int32()), pa.field("headers", HEADER_MAP_TYPE),
])


def repeated_string(text: str, n: int) -> pa.Array:
    """``n`` copies of ``text`` as an Arrow string array, built from buffers."""
    data = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def _filled(value: int, n: int) -> pa.Array:
    return pa.array(np.full(n, value, dtype=np.int32))


def _header_pairs(headers: list | None, n: int) -> tuple[np.ndarray, list, list]:
    if headers is None:
        return np.zeros(n + 1, dtype=np.int32), [], []
    counts = np.fromiter((len(h) if h else 0 for h in headers), dtype=np.int32, count=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    keys = [k for h in headers if h for k, _ in h]
    values = [v for h in headers if h for _, v in h]
    return offsets, keys, values


def headers_list_array(headers: list | None, n: int) -> pa.Array:
    """The Spark headers column for ``n`` records (an empty list for records without headers)."""
    offsets, keys, values = _header_pairs(headers, n)
    items = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                       fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=HEADER_TYPE)


def headers_map_array(headers: list | None, n: int) -> pa.Array:
    """The Ray Data headers column for ``n`` records."""
    offsets, keys, values = _header_pairs(headers, n)
    return pa.MapArray.from_arrays(pa.array(offsets), pa.array(keys, pa.string()), pa.array(values, pa.binary()),
                                   type=HEADER_MAP_TYPE)


def to_spark_arrow(chunk, schema: pa.Schema) -> pa.RecordBatch:
    """A ColumnBatch as a record batch of ``spark_schema(...)``."""
    n = len(chunk)
    ts_type = schema.field("timestamp").type
    stamps = chunk.timestamps if ts_type.unit == "ms" else chunk.timestamps * 1000
    columns = [chunk.keys, chunk.values, repeated_string(chunk.topic, n), _filled(chunk.partition, n),
               pa.array(chunk.offsets), pa.array(stamps, type=ts_type), _filled(chunk.timestamp_type, n)]
    if len(schema) > len(columns):
        columns.append(headers_list_array(chunk.headers, n))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def to_ray_data_arrow(chunk) -> pa.Table:
    """A ColumnBatch as a table of ``RAY_DATA_SCHEMA`` (timestamp_type as confluent-kafka numbers it)."""
    n = len(chunk)
    columns = [pa.array(chunk.offsets), chunk.keys, chunk.values, repeated_string(chunk.topic, n),
               _filled(chunk.partition, n), pa.array(chunk.timestamps), _filled(chunk.timestamp_type + 1, n),
               headers_map_array(chunk.headers, n)]
    return pa.Table.from_arrays(columns, schema=RAY_DATA_SCHEMA)


class ArrowBinary:
    """A pyarrow binary or string array as ``send_batch``'s keys or values: lengths, nulls and each
    batch's payload column come from its buffers (the payload's layout is Arrow's), so sending
    Arrow data makes no Python object per record. batch_builder.ListBinary is the list twin."""

    __slots__ = ("array", "nulls")

    def __init__(self, array, what: str = "value"):
        from raylog.errors import InvalidRecordError

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        t = array.type
        if pa.types.is_null(t):
            array = pa.nulls(len(array), pa.binary())
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            array = array.cast(pa.binary())
        elif not pa.types.is_binary(t):
            raise InvalidRecordError(f"{what}s must be a binary or string array, got {t}")
        self.array = array
        self.nulls = array.null_count

    def __len__(self) -> int:
        return len(self.array)

    @staticmethod
    def _offsets(array) -> np.ndarray:
        return np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)

    def present(self) -> np.ndarray:
        if self.nulls == 0:
            return np.ones(len(self.array), dtype=bool)
        return self.array.is_valid().to_numpy(zero_copy_only=False)

    def lengths(self) -> np.ndarray:
        n = len(self.array)
        if self.nulls == n:
            return np.zeros(n, dtype=np.int64)
        lengths = np.diff(self._offsets(self.array)).astype(np.int64)
        if self.nulls:
            lengths[~self.present()] = 0  # Arrow lets a null slot span bytes; the payload's do not
        return lengths

    def column(self, idx: np.ndarray, contiguous: bool, lengths: np.ndarray | None = None,
               nulls: int | None = None):
        """The entries at ``idx`` as a payload BinaryColumn over (a gathered copy of) the array's
        buffers; ``lengths`` and ``nulls`` are ListBinary's arguments, not needed here."""
        import pyarrow.compute as pc

        from raylog.storage.payload import BinaryColumn

        sub = self.array.slice(int(idx[0]), len(idx)) if contiguous else self.array.take(pa.array(idx))
        n, null_count = len(sub), sub.null_count
        if null_count == n:
            return BinaryColumn.nulls(n)
        validity = None
        if null_count:
            valid = sub.is_valid()
            validity = memoryview(np.packbits(valid.to_numpy(zero_copy_only=False), bitorder="little").tobytes())
            sub = pc.if_else(valid, sub, pa.scalar(b"", pa.binary()))  # the payload's null slots are empty
        offsets = self._offsets(sub)
        data = memoryview(sub.buffers()[2] or b"")[int(offsets[0]):int(offsets[-1])]
        return BinaryColumn(n, (offsets - offsets[0]).astype(np.int32), data, validity, null_count)


def coalesce(batches: Iterable, min_rows: int) -> Iterable:
    """Arrow record batches (or tables) joined into ones of at least ``min_rows`` rows (the last
    may be smaller): a fetch decodes into one small batch per producer batch, and Spark and
    Ray Data pay per batch they receive."""
    pending, rows = [], 0
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows >= min_rows:
            yield _joined(pending)
            pending, rows = [], 0
    if pending:
        yield _joined(pending)


def _joined(parts: list):
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], pa.Table):
        return pa.concat_tables(parts).combine_chunks()
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]


# --- Arrow into send_batch: Spark's Kafka sink columns ------------------------------------------

_BYTES = "binary or string"
SINK_COLUMNS = {
    "value": _BYTES,
    "key": _BYTES,
    "topic": "string",
    "partition": "int",
    "headers": "array<struct<key: string, value: binary>> or map<string, binary>",
    "timestamp": "timestamp or long (ms)",
}
"""Columns a write sends (Spark's Kafka sink, plus timestamp) and the types each accepts;
other columns are ignored."""


def _accepts(name: str, t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return name not in ("value", "topic", "timestamp")
    if name in ("value", "key"):
        return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t) \
            or pa.types.is_large_string(t)
    if name == "topic":
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    if name == "partition":
        return pa.types.is_integer(t)
    if name == "timestamp":
        return pa.types.is_timestamp(t) or pa.types.is_integer(t)
    if pa.types.is_map(t):
        return pa.types.is_string(t.key_type) and pa.types.is_binary(t.item_type)
    if pa.types.is_list(t) and pa.types.is_struct(t.value_type):
        fields = {f.name: f.type for f in t.value_type}
        return set(fields) == {"key", "value"} and pa.types.is_string(fields["key"]) \
            and pa.types.is_binary(fields["value"])
    return False


def check_sink_schema(schema: pa.Schema, topic_given: bool, shown: dict[str, str] | None = None) -> list[str]:
    """The columns of ``schema`` a write sends; InvalidRecordError naming the first column that is
    missing or of a wrong type (``shown`` gives the caller's own type names for the message)."""
    from raylog.errors import InvalidRecordError

    names = set(schema.names)
    if "value" not in names:
        raise InvalidRecordError(f"no 'value' column ({_BYTES}) to write; the columns are {sorted(names)}")
    if not topic_given and "topic" not in names:
        raise InvalidRecordError("no topic to write to: give topic= or a 'topic' column (string)")
    columns = []
    for name, expected in SINK_COLUMNS.items():
        if name not in names or (name == "topic" and topic_given):
            continue
        actual = schema.field(name).type
        if not _accepts(name, actual):
            got = (shown or {}).get(name, str(actual))
            raise InvalidRecordError(f"column {name!r} must be {expected}, got {got}; nothing was written")
        columns.append(name)
    return columns


def _millis(stamps: pa.Array):
    from raylog.errors import InvalidRecordError

    if stamps.null_count:
        raise InvalidRecordError("the timestamp column has nulls: give every record a timestamp or drop the column")
    if pa.types.is_timestamp(stamps.type):
        stamps = stamps.cast(pa.timestamp("ms", tz=stamps.type.tz), safe=False)
    return stamps.cast(pa.int64()).to_numpy()


def _header_list(array: pa.Array) -> list:
    if pa.types.is_null(array.type):
        return [None] * len(array)
    if pa.types.is_map(array.type):
        return array.to_pylist()
    return [None if hs is None else [(h["key"], h["value"]) for h in hs] for hs in array.to_pylist()]


def send_all(producer, batches: Iterable[pa.RecordBatch | pa.Table], topic: str | None, timeout_s: float) -> int:
    """Send every row of ``batches`` (to ``topic``, or to each row's topic column) with one
    send_batch per batch and topic; returns the number sent once all are acknowledged, raising the
    first failure."""
    import pyarrow.compute as pc

    from raylog.errors import InvalidRecordError

    futures, sent = [], 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if topic is not None:
            futures.append(producer.send_batch(topic, **send_batch_args(batch)))
        else:
            topics = batch.column("topic")
            if topics.null_count:
                raise InvalidRecordError("a row to write has a null topic and no topic was given")
            for name in pc.unique(topics).to_pylist():
                futures.append(producer.send_batch(name, **send_batch_args(batch.filter(pc.equal(topics, name)))))
        sent += batch.num_rows
    producer.flush(timeout_s)
    for future in futures:
        future.wait(timeout_s)
    return sent


def send_batch_args(batch: pa.RecordBatch | pa.Table) -> dict:
    """``Producer.send_batch`` keyword arguments for the rows of ``batch`` (columns as checked by
    check_sink_schema). Keys and values stay Arrow arrays, sent from their buffers."""
    names = batch.schema.names
    column = batch.column
    args = {"values": column("value")}
    if "key" in names:
        args["keys"] = column("key")
    if "headers" in names:
        args["headers"] = _header_list(column("headers"))
    if "partition" in names:
        args["partition"] = column("partition").to_pylist()
    if "timestamp" in names:
        args["timestamps_ms"] = _millis(column("timestamp"))
    return args
