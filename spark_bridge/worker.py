"""What runs inside Spark's Python workers: a cached raylog connection, range reads, batch sends.

A Spark task's Python worker is a plain process RayDP's executor (a JVM in a Ray actor)
forks, not a Ray worker: it joins the Ray cluster with ``ray.init(address)`` in the
driver's namespace, then calls the partition leaders' actors directly. Spark reuses
Python workers across tasks (spark.python.worker.reuse), so the connection and the
producer are made once per worker process and kept.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Iterator

import pyarrow as pa

log = logging.getLogger(__name__)

BATCH_ROWS = 50_000
"""Rows per Arrow batch handed to Spark (measured: Spark's per-batch cost shows below ~10,000)."""

_lock = threading.Lock()
_producers: dict[tuple, object] = {}


def cluster(address: str, namespace: str):
    """raylog's Cluster in this worker process, joining Ray on first use."""
    import ray

    from raylog.cluster import attached

    with _lock:
        if not ray.is_initialized():
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            # log_to_driver off: this process's stdout goes to Spark's executor log, and echoing
            # every Ray worker's output into it multiplies logging across tasks.
            ray.init(address=address, namespace=namespace, log_to_driver=False, logging_level="ERROR")
        return attached(namespace)


def producer(address: str, namespace: str, configs: dict):
    """A Producer kept for this worker process (one per distinct configuration)."""
    key = (address, namespace, tuple(sorted(configs.items())))
    c = cluster(address, namespace)
    with _lock:
        found = _producers.get(key)
        if found is None or found._closed:
            found = _producers[key] = c.producer(**configs)
        return found


def read_ranges(address: str, namespace: str, plan_batches: Iterator[pa.RecordBatch], schema: pa.Schema,
                fail_on_data_loss: bool, timeout_s: float) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of a read: each input row is a planned range, each output batch the
    records of its fetches in Spark's Kafka schema."""
    from raylog.arrow_records import coalesce, to_spark_arrow
    from raylog.range_reader import read_range
    from raylog.ranges import OffsetRange

    c = cluster(address, namespace)
    for plan in plan_batches:
        for row in plan.to_pylist():
            r = OffsetRange(row["topic"], row["partition"], row["from_offset"], row["until_offset"])
            chunks = read_range(c, r, timeout_s, fail_on_data_loss)
            yield from coalesce((to_spark_arrow(chunk, schema) for chunk in chunks), BATCH_ROWS)


def write_batches(address: str, namespace: str, configs: dict, topic: str | None, timeout_s: float,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body of a write: send_batch per Arrow batch (and topic); the task ends once every
    record is acknowledged, yielding how many it wrote. A failed record fails the task, which
    Spark retries: at-least-once, as Spark's Kafka sink."""
    from raylog.arrow_records import send_all

    written = send_all(producer(address, namespace, configs), batches, topic, timeout_s)
    yield pa.RecordBatch.from_arrays([pa.array([written], pa.int64())], names=["written"])
