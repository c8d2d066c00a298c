"""Batch reads: ``spark.read.format("raylog")`` with the offsets fixed when ``read`` is called.

``read`` plans on the driver with the connector's own planner (spark_bridge/planner.py: the
options of Spark's Kafka source, resolved into offset ranges with one round of list_offsets
to the partition leaders) and hands the planned ranges to the format, so every action on the
returned DataFrame reads the same records. ``spark.read.format("raylog")`` used directly
plans when a query runs, as Spark's Kafka source does. Either way the records are read by
the connector in Spark's executors, columnar (docs/architecture.md, "Spark").
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from raylog.cluster import default_cluster
from raylog.errors import InvalidConfigError
from raylog.logs import get_logger
from spark_bridge.jvm_errors import named
from spark_bridge.launch import spark_of
from spark_bridge.planner import SparkPlanner, canonical_options

log = get_logger(__name__)

KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
             "timestampType int")
KAFKA_DDL_WITH_HEADERS = KAFKA_DDL + ", headers array<struct<key: string, value: binary>>"


def kafka_client_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without Kafka client settings (kafka.*), each named in a warning: a Kafka job's
    options work unchanged."""
    out = {}
    for name, value in options.items():
        if name.lower().startswith("kafka."):
            log.warning("option %s is ignored (a Kafka client setting; raylog reads and writes through its "
                        "replicas' actors)", name)
        else:
            out[name] = value
    return out


def read(spark, topics: str | Iterable[str] | None = None, **options: Any):
    """The records of ``topics`` (or of the ``assign`` / ``subscribe`` / ``subscribe_pattern``
    option) as a DataFrame of Spark's Kafka source columns; options as Spark's Kafka source
    (snake_case or camelCase names), see raylog.ranges and docs/architecture.md."""
    options = canonical_options(kafka_client_options(options))
    if topics is not None:
        if any(k in options for k in ("assign", "subscribe", "subscribe_pattern")):
            raise InvalidConfigError("give the topics either as an argument or as assign/subscribe/subscribe_pattern")
        options["subscribe"] = [topics] if isinstance(topics, str) else list(topics)
    if "max_offsets_per_trigger" in options:
        raise InvalidConfigError("max_offsets_per_trigger applies to streams (spark_bridge.stream), not batch reads")
    cluster = default_cluster()
    answer = json.loads(SparkPlanner(cluster.config.namespace).plan(json.dumps(options)))
    if "error" in answer:
        raise named(*answer["error"][:2])
    for warning in answer["warnings"]:
        log.warning(warning)
    reader = spark_of(spark).read.format("raylog").option("raylog.ranges", json.dumps(answer))
    for name in ("include_headers", "fail_on_data_loss"):
        if name in options:
            reader = reader.option(name.replace("_", ""), str(options[name]).lower())
    return reader.load()
