"""The Arrow schema of records read out of raylog, declared once (Spark's Kafka source columns).

Spark's Kafka source gives a DataFrame of exactly these columns; the Spark
bridge and ``ColumnBatch.to_arrow`` build them, so a DataFrame read from
raylog has the schema a Spark user of Kafka expects.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
"""headers: array<struct<key: string, value: binary>>, Spark's includeHeaders layout."""

KAFKA_FIELDS = [
    pa.field("key", pa.binary()),            # null when the record has no key
    pa.field("value", pa.binary()),          # null for a tombstone
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("ms")),  # CreateTime or LogAppendTime, per timestampType
    pa.field("timestampType", pa.int32()),   # 0 CreateTime, 1 LogAppendTime
]
KAFKA_SCHEMA = pa.schema(KAFKA_FIELDS)
KAFKA_SCHEMA_WITH_HEADERS = pa.schema(KAFKA_FIELDS + [pa.field("headers", HEADER_TYPE)])


def headers_array(headers: list | None, count: int) -> pa.Array:
    """The headers column for ``count`` records (an empty list for records without headers)."""
    if headers is None:
        offsets = pa.array(np.zeros(count + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array([], HEADER_TYPE.value_type))
    return pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers], HEADER_TYPE)



