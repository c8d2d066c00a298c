"""Micro-batch streaming from topics into a user's function: a Spark StreamingQuery over
``readStream.format("raylog")`` with ``foreachBatch``, plus what raylog users had from the
consumer-group loop it replaces.

Spark's checkpoint (``checkpoint_location``) keeps the stream's position: each batch's end
offsets are written there before the batch runs, and a batch that failed, or was running when
the driver died, runs again with the same id and the same records after a restart. On top of
that ``stream``:

- runs ``process(df, batch_id)`` again on the same DataFrame up to ``max_batch_retries`` times
  when it raises, before the query fails;
- commits each finished batch's end offsets to the consumer group ``group_id`` (metadata
  ``{"batch_id": n}``), so the group's lag shows the stream's progress in raylog's tools;
- starts, when the checkpoint is new, from the group's committed offsets where it has them (a
  stream moved from the group loop of earlier versions, or a checkpoint lost, continues where
  the group was), and elsewhere from ``starting_offsets``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import quote, urlparse
from typing import Any, Callable, Iterable

from raylog import ray_calls
from raylog.cluster import default_cluster
from raylog.errors import GroupIdNotFoundError, IllegalStateError, InvalidConfigError, KafkaTimeoutError, RaylogError
from raylog.logs import get_logger
from raylog.records import OffsetAndMetadata, TopicPartition
from raylog.ranges import EARLIEST, LATEST, ReadSpec, check_starting_covers, parse_options
from spark_bridge.launch import spark_of
from spark_bridge.planner import canonical_options, positions
from spark_bridge.read import kafka_client_options

log = get_logger(__name__)

_NOT_FOR_STREAMS = ("assign", "subscribe", "subscribe_pattern", "ending_offsets", "ending_timestamp",
                    "ending_offsets_by_timestamp")
_TIMESTAMP_STARTS = ("starting_timestamp", "starting_offsets_by_timestamp")


def batch_end_offsets(checkpoint: str, batch_id: int, spark=None) -> dict[TopicPartition, int]:
    """The end offsets Spark logged for ``batch_id`` before running it (its offset log: a version
    line, the batch's metadata, then one line per source). A checkpoint on a filesystem other
    than the local one is read through Spark's Hadoop filesystem (``spark`` given)."""
    parsed = urlparse(checkpoint)
    if parsed.scheme in ("", "file"):
        local = Path(parsed.path if parsed.scheme else checkpoint)
        lines = (local / "offsets" / str(batch_id)).read_text().splitlines()
    else:
        jvm = spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
        fs = path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
        stream = fs.open(path)
        try:
            lines = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8").splitlines()
        finally:
            stream.close()
    return {tp: p.offset for tp, p in positions(json.loads(lines[2])).items()}


def stream(spark, topic: str | Iterable[str], group_id: str, process: Callable[[Any, int], None], *,
           checkpoint_location: str | None = None, trigger_interval_s: float = 1.0, max_batch_retries: int = 3,
           retry_backoff_s: float = 1.0, commit_timeout_s: float = 120.0, **options: Any):
    """Start a Spark StreamingQuery calling ``process(df, batch_id)`` with each batch of records of
    ``topic``. Options: starting_offsets (default "latest"), starting timestamps,
    max_offsets_per_trigger, min_offsets_per_trigger, max_trigger_delay, min_partitions,
    fail_on_data_loss, include_headers. ``checkpoint_location`` defaults to
    ``<data_root>/spark-checkpoints/group-<group_id, URL-quoted>`` of the cluster. A batch's
    commit to the group rides out retriable errors (a coordinator restarting) for
    ``commit_timeout_s`` (120 s, as delivery_timeout_ms), then fails the query with
    KafkaTimeoutError. One stream per group at a time."""
    topics = [topic] if isinstance(topic, str) else list(topic)
    options = canonical_options(kafka_client_options(options))
    if any(k in options for k in _NOT_FOR_STREAMS):
        raise InvalidConfigError("a stream reads its topics from the group's offsets onwards: assign, subscribe, "
                                 "subscribe_pattern and ending_* do not apply")
    if not callable(process):
        raise InvalidConfigError(f"process must be callable as process(df, batch_id), got {process!r}")
    for name, value in (("trigger_interval_s", trigger_interval_s), ("retry_backoff_s", retry_backoff_s),
                        ("commit_timeout_s", commit_timeout_s)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise InvalidConfigError(f"{name} must be a number of seconds >= 0, got {value!r}")
    if not isinstance(max_batch_retries, int) or isinstance(max_batch_retries, bool) or max_batch_retries < 0:
        raise InvalidConfigError(f"max_batch_retries must be an int >= 0, got {max_batch_retries!r}")
    cluster = default_cluster()
    for name in topics:
        cluster.metadata.topic(name)  # UnknownTopicOrPartitionError now, not in the query
    admin = cluster.admin()
    try:
        described = admin.describe_consumer_groups([group_id])[0]
    except GroupIdNotFoundError:
        described = {"members": []}
    if described.get("members"):
        raise IllegalStateError(f"group {group_id!r} has active members; a stream needs the group to itself")
    if checkpoint_location is None:
        root = ray_calls.get(cluster.controller.cluster_config.remote(), 60)["data_root"]
        # A group id is any string: quoted and prefixed, it names one directory under the root.
        checkpoint_location = os.path.join(os.path.expanduser(root), "spark-checkpoints",
                                           f"group-{quote(group_id, safe='')}")
    committed = {tp: om.offset for tp, om in admin.list_consumer_group_offsets(group_id).items() if tp.topic in topics}
    if committed:
        options = _from_committed(options, committed, topics, cluster)

    def run_batch(df, batch_id: int) -> None:
        for attempt in range(max_batch_retries + 1):
            try:
                process(df, batch_id)
                break
            except Exception as exc:
                if attempt == max_batch_retries:
                    raise
                log.warning("stream of group %r: process(df, %d) raised %r; running the batch again (attempt %d of "
                            "%d)", group_id, batch_id, exc, attempt + 2, max_batch_retries + 1)
                time.sleep(retry_backoff_s)
        ends = batch_end_offsets(checkpoint_location, batch_id, session)
        meta = json.dumps({"batch_id": batch_id})
        _retrying(lambda: _commit(cluster, group_id, {tp: OffsetAndMetadata(o, meta) for tp, o in ends.items()}),
                  retry_backoff_s, commit_timeout_s, f"stream of group {group_id!r}: the commit of batch {batch_id}")

    session = spark_of(spark)
    reader = session.readStream.format("raylog").option("subscribe", ",".join(topics))
    for name, value in options.items():
        reader = reader.option(name, value if isinstance(value, str) else json.dumps(value))
    return (reader.load().writeStream.foreachBatch(run_batch).option("checkpointLocation", checkpoint_location)
            .trigger(processingTime=f"{trigger_interval_s} seconds").start())


def _from_committed(options: dict, committed: dict[TopicPartition, int], topics: list[str], cluster) -> dict:
    """``options`` starting where the group committed, and elsewhere where they said (JSON must
    then name every partition without a committed offset, as raylog.ranges requires)."""
    starting = options.get("starting_offsets", "latest")
    default = {"earliest": EARLIEST, "latest": LATEST}.get(starting) if isinstance(starting, str) else None
    given = {} if default is not None else parse_options({"subscribe": topics, "starting_offsets": starting},
                                                          batch=False).starting
    if any(k in options for k in _TIMESTAMP_STARTS):
        log.warning("stream: the group has committed offsets; partitions without one start at the latest offset "
                    "(starting timestamps apply to a group with none)")
        default = LATEST
    partitions = [TopicPartition(name, p) for name in topics for p in range(cluster.metadata.partition_count(name))]
    if default is None:
        check_starting_covers(ReadSpec(starting=given), [tp for tp in partitions if tp not in committed])
    out: dict[str, dict[str, int]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, {})[str(tp.partition)] = committed.get(tp, default if default is not None else
                                                                          given.get(tp))
    rest = {k: v for k, v in options.items() if k not in _TIMESTAMP_STARTS + ("starting_offsets",)}
    return {**rest, "starting_offsets": json.dumps(out)}


def _commit(cluster, group_id: str, offsets: dict) -> None:
    committer = cluster.consumer(group_id=group_id, enable_auto_commit=False)
    try:
        committer.commit(offsets)
    finally:
        committer.close(autocommit=False)


def _retrying(call: Callable[[], None], backoff_s: float, timeout_s: float, what: str) -> None:
    """``call()`` through retriable errors (a coordinator restarting or moving), as Spark's Kafka
    source rides out broker failovers, for ``timeout_s``: then KafkaTimeoutError (a coordinator
    that never comes back must not hold foreachBatch forever). Any other error fails the batch."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except RaylogError as exc:
            if not exc.retriable:
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(f"{what} did not succeed within {timeout_s} s: {exc}") from exc
            log.warning("%s: %s; retrying", what, exc)
            time.sleep(min(backoff_s, left))
