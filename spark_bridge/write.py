"""Writes: a DataFrame with Spark's Kafka sink columns into topics, through ``format("raylog")``.

``write`` checks the producer settings here, then runs ``df.write.format("raylog")``: the
connector checks the columns on the driver (a missing value or a wrong type fails before any
task runs, so nothing is written) and its executors send record batches to the partition
leaders' actors. A task returns once its records are acknowledged (acks "all" by default); a
failed task is retried by Spark, so a write is at-least-once, as Spark's Kafka sink is.
"""

from __future__ import annotations

import uuid
from typing import Any

from raylog.config import ProducerConfig, config_from_mapping
from raylog.errors import InvalidConfigError
from raylog.logs import get_logger
from spark_bridge.jvm_errors import raylog_errors
from spark_bridge.read import kafka_client_options


log = get_logger(__name__)

SINK_SETTINGS = ("acks", "compression_type", "batch_size", "delivery_timeout_ms", "buffer_memory")
"""The producer settings the connector's sink honours; the others are a client's (threads, buffers)."""


def write(df, topic: str | None = None, **options: Any) -> int:
    """Send ``df`` (columns value, and optionally key, headers, partition, topic, timestamp) to
    ``topic`` (which wins over a topic column); ``options`` are producer settings (acks,
    compression_type, batch_size, delivery_timeout_ms, buffer_memory: what a task's open batches
    hold together, 32 MiB). Returns the number of records acknowledged
    by the task attempts Spark committed. A write is at-least-once, as Spark's Kafka sink: an
    attempt that failed, or a speculative copy Spark dropped, may have appended records too, under
    its own producer id, and they are not in the count."""
    configs = kafka_client_options(options)
    for name in ("key_serializer", "value_serializer"):
        if name in configs:
            raise InvalidConfigError(f"{name} does not apply to DataFrame writes: the columns are bytes or strings")
    config_from_mapping(ProducerConfig, configs)
    write_id = uuid.uuid4().hex
    writer = df.write.format("raylog").mode("append").option("raylog.write_id", write_id)
    if topic is not None:
        writer = writer.option("topic", topic)
    for name, value in configs.items():
        if name not in SINK_SETTINGS:
            log.warning("producer setting %s does not apply to a Spark write (the sink is an idempotent producer per "
                        "task with %s) and is ignored", name, ", ".join(SINK_SETTINGS))
            continue
        writer = writer.option(name, "none" if value is None else str(value))
    with raylog_errors():
        writer.save()
    return int(df.sparkSession._jvm.io.raylog.spark.RaylogProvider.written(write_id))
