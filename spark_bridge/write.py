"""Writes: a DataFrame with Spark's Kafka sink columns into topics, sent from the executors.

The driver checks the columns (a missing value or a wrong type fails here, before any task
runs, so nothing is written) and the producer settings, then ``mapInArrow`` sends each Arrow
batch a task receives with ``send_batch`` from a producer kept in that Python worker. A task
returns once all its records are acknowledged (acks "all" by default); a failed task is
retried by Spark, so a write is at-least-once, as Spark's Kafka sink is.
"""

from __future__ import annotations

from typing import Any

from raylog.cluster import default_cluster
from raylog.config import ProducerConfig, config_from_mapping
from raylog.arrow_records import SINK_COLUMNS, check_sink_schema
from raylog.errors import InvalidConfigError
from spark_bridge import worker
from spark_bridge.launch import ray_address

WRITE_TIMEOUT_S = 300.0
"""How long a task waits for its records' acknowledgements before failing."""


def _check_columns(df, topic: str | None) -> list[str]:
    """The columns to send; InvalidRecordError naming a missing or mistyped one (Spark's type names)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    fields, shown = [], {}
    for f in df.schema.fields:
        if f.name not in SINK_COLUMNS:
            continue
        shown[f.name] = f.dataType.simpleString()
        try:
            fields.append(to_arrow_schema(StructType([f])).field(0))
        except Exception:  # noqa: BLE001 - a type Arrow cannot carry is a wrong type for the sink
            fields.append(pa.field(f.name, pa.struct([])))
    return check_sink_schema(pa.schema(fields), topic is not None, shown)


def write(df, topic: str | None = None, **options: Any) -> int:
    """Send ``df`` (columns value, and optionally key, headers, partition, topic, timestamp) to
    ``topic`` (which wins over a topic column); ``options`` are producer settings (acks,
    compression_type, batch_size, linger_ms, ...). Returns the number of records written."""
    configs = dict(options)
    for name in ("key_serializer", "value_serializer"):
        if name in configs:
            raise InvalidConfigError(f"{name} does not apply to DataFrame writes: the columns are bytes or strings")
    config_from_mapping(ProducerConfig, configs)
    columns = _check_columns(df, topic)
    cluster = default_cluster()
    if topic is not None:
        cluster.metadata.topic(topic)  # UnknownTopicOrPartitionError / InvalidTopicError before any task
    address, namespace = ray_address(), cluster.config.namespace

    def send(batches):
        yield from worker.write_batches(address, namespace, configs, topic, WRITE_TIMEOUT_S, batches)

    counts = df.select(*columns).mapInArrow(send, "written long")
    total = counts.groupBy().sum("written").collect()[0][0]
    return int(total or 0)
