"""Micro-batch streaming from topics into a user's function, with a consumer group's offsets.

``stream(spark, topic, group_id, process)`` runs, on a driver thread, the loop Spark's
``foreachBatch`` runs: each trigger plans the records the group has not committed yet
(bounded by max_offsets_per_trigger, split over partitions in proportion to their lag, as
Spark does), reads them as a DataFrame (the batch read's machinery, so the same schema and
the same high watermark bound), calls ``process(df, batch_id)``, and commits only after it
returns: at-least-once, with a batch id that lets a sink be idempotent.

The group's committed offsets are the stream's checkpoint. Before a batch runs, its plan is
committed as offset metadata (each partition keeps its committed offset, with
``{"batch_id": n, "until": end}``); after ``process`` succeeds the ends are committed with
``{"batch_id": n}``. A stream restarted after a crash finds a planned batch not marked done
and runs it again with the same id and the same ranges, which is what Spark's offset log
gives a foreachBatch sink.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import Any, Callable, Iterable

from raylog.cluster import default_cluster
from raylog.errors import (
    GroupIdNotFoundError, IllegalStateError, InvalidConfigError, OffsetOutOfRangeError, RaylogError,
)
from raylog.ranges import EARLIEST, LATEST, ReadSpec, parse_options, plan, share_by_lag
from raylog.records import OffsetAndMetadata, TopicPartition
from spark_bridge.read import ranges_frame

log = logging.getLogger(__name__)


class MicroBatchStream:
    """A running stream (Spark's StreamingQuery, in snake_case): ``stop``, ``await_termination``,
    ``is_active``, ``exception``, ``last_progress`` and ``recent_progress``."""

    def __init__(self, spark, cluster, topics: list[str], group_id: str, process: Callable, spec: ReadSpec,
                 trigger_interval_s: float, max_batch_retries: int, retry_backoff_s: float):
        self._spark = spark
        self._cluster = cluster
        self._admin = cluster.admin()
        self._committer = cluster.consumer(group_id=group_id, enable_auto_commit=False)
        self.topics = topics
        self.group_id = group_id
        self._process = process
        self._spec = spec
        self._interval = trigger_interval_s
        self._retries = max_batch_retries
        self._backoff = retry_backoff_s
        self._stop = threading.Event()
        self.exception: BaseException | None = None
        self.recent_progress: list[dict] = []
        self._thread = threading.Thread(target=self._run, name=f"raylog-stream-{group_id}", daemon=True)
        self._thread.start()

    # --- the StreamingQuery surface ---------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._thread.is_alive()

    @property
    def last_progress(self) -> dict | None:
        return self.recent_progress[-1] if self.recent_progress else None

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the batch in progress (if any) is processed and committed."""
        self._stop.set()
        self._thread.join(timeout_s)

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait for the stream to end (False if still running after ``timeout_s``); re-raises what
        ended it when ``process`` kept failing or a read could not be planned."""
        self._thread.join(timeout_s)
        if self.exception is not None:
            raise self.exception
        return not self._thread.is_alive()

    def __enter__(self) -> "MicroBatchStream":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._retrying(self._next_batch)
                if batch is None:
                    self._stop.wait(self._interval)
                    continue
                self._run_batch(*batch)
        except BaseException as exc:  # noqa: BLE001 - kept for await_termination, as Spark does
            self.exception = exc
            log.error("stream of group %r stopped: %s", self.group_id, exc)
        finally:
            self._committer.close(autocommit=False)

    def _run_batch(self, batch_id: int, starts: dict, ends: dict) -> None:
        fixed = dataclasses.replace(self._spec, starting=starts, ending=ends, starting_timestamp=None,
                                    starting_by_timestamp=None, ending_timestamp=None, ending_by_timestamp=None)
        # The planned ends, never the high watermarks of now: a batch planned before a crash can end
        # above a new leader's high watermark, and trimming it while committing the planned ends would
        # skip records for good. The read waits until the records are there (read_range).
        ranges, warnings = plan(fixed, list(starts), self._admin.beginning_offsets(starts), ends)
        for warning in warnings:
            log.warning("stream of group %r, batch %d: %s", self.group_id, batch_id, warning)
        began = time.monotonic()
        for attempt in range(self._retries + 1):
            df = ranges_frame(self._spark, self._cluster, ranges, self._spec.include_headers,
                              self._spec.fail_on_data_loss)
            try:
                self._process(df, batch_id)
                break
            except Exception as exc:
                if attempt == self._retries:
                    raise
                log.warning("stream of group %r: process(df, %d) raised %r; running the batch again (attempt %d of "
                            "%d)", self.group_id, batch_id, exc, attempt + 2, self._retries + 1)
                if self._stop.wait(self._backoff):
                    raise IllegalStateError(f"stream stopped while batch {batch_id} was being retried") from exc
        meta = json.dumps({"batch_id": batch_id})
        self._retrying(lambda: self._committer.commit({tp: OffsetAndMetadata(end, meta) for tp, end in ends.items()}))
        self.recent_progress = self.recent_progress[-99:] + [{
            "batch_id": batch_id, "num_input_rows": sum(r.size for r in ranges),
            "duration_s": round(time.monotonic() - began, 3),
            "ranges": [(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges]}]

    def _retrying(self, call):
        """``call()`` until it returns, through retriable errors (a coordinator or leader restarting or
        moving), as Spark's Kafka source rides out broker failovers; any other error ends the stream.
        A planning step retried this way is consistent: a plan whose commit landed is found and run
        again, one whose commit did not is made anew."""
        while True:
            try:
                return call()
            except RaylogError as exc:
                if not exc.retriable or self._stop.is_set():
                    raise
                log.warning("stream of group %r: %s; retrying", self.group_id, exc)
                self._stop.wait(self._backoff)

    def _partitions(self) -> list[TopicPartition]:
        out = []
        for topic in self.topics:
            self._cluster.metadata.invalidate(topic)  # partitions added since the last trigger join in
            out += [TopicPartition(topic, p) for p in range(self._cluster.metadata.partition_count(topic))]
        return out

    def _next_batch(self) -> tuple[int, dict, dict] | None:
        """(batch id, start and end offset per partition) of the batch to run now, or None."""
        partitions = self._partitions()
        committed = self._admin.list_consumer_group_offsets(self.group_id, partitions)
        marks = {tp: _mark(om.metadata) for tp, om in committed.items()}
        planned = {tp: m for tp, m in marks.items() if "until" in m}
        if planned:  # a batch that was planned and not done: the same one again
            batch_id = max(m["batch_id"] for m in planned.values())
            starts = {tp: committed[tp].offset for tp, m in planned.items() if m["batch_id"] == batch_id}
            ends = {tp: planned[tp]["until"] for tp in starts}
            log.info("stream of group %r: running planned batch %d again", self.group_id, batch_id)
            return batch_id, starts, ends
        batch_id = max((m.get("batch_id", -1) for m in marks.values()), default=-1) + 1
        starts = {tp: committed[tp].offset for tp in partitions if tp in committed}
        starts.update(self._initial_offsets([tp for tp in partitions if tp not in committed]))
        latest = self._admin.end_offsets(partitions)
        lags = {tp: max(0, latest[tp] - starts[tp]) for tp in partitions}
        if not any(lags.values()):
            return None
        limit = self._spec.max_offsets_per_trigger
        shares = share_by_lag(lags, limit) if limit else lags
        ends = {tp: starts[tp] + shares.get(tp, 0) for tp in partitions}
        self._committer.commit({tp: OffsetAndMetadata(starts[tp], json.dumps({"batch_id": batch_id, "until": end}))
                                for tp, end in ends.items()})
        return batch_id, starts, ends

    def _initial_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Where partitions the group never committed start (starting_offsets / starting timestamps)."""
        if not partitions:
            return {}
        spec = self._spec
        stamps = {tp: s for tp, (s, _) in spec.timestamps_needed(partitions).items() if s is not None}
        found = self._admin.list_offsets(stamps) if stamps else {}
        earliest = self._admin.beginning_offsets(partitions)
        latest = self._admin.end_offsets(partitions)
        out = {}
        for tp in partitions:
            if tp in stamps:
                if found[tp] is None and spec.starting_strategy == "error":
                    raise OffsetOutOfRangeError(f"{tp.topic}-{tp.partition} has no record at or after starting "
                                                f"timestamp {stamps[tp]}", earliest[tp], latest[tp])
                out[tp] = latest[tp] if found[tp] is None else found[tp].offset
                continue
            start = spec.starting.get(tp, LATEST) if isinstance(spec.starting, dict) else \
                (EARLIEST if spec.starting == "earliest" else LATEST)
            out[tp] = earliest[tp] if start == EARLIEST else latest[tp] if start == LATEST else start
        return out


def _mark(metadata: str) -> dict:
    try:
        mark = json.loads(metadata) if metadata else {}
    except ValueError:
        return {}
    return mark if isinstance(mark, dict) and isinstance(mark.get("batch_id"), int) else {}


def stream(spark, topic: str | Iterable[str], group_id: str, process: Callable[[Any, int], None], *,
           trigger_interval_s: float = 1.0, max_batch_retries: int = 3, retry_backoff_s: float = 1.0,
           **options: Any) -> MicroBatchStream:
    """Start a micro-batch loop calling ``process(df, batch_id)`` with each batch of records of
    ``topic`` the group ``group_id`` has not committed. Options: starting_offsets (default
    "latest", used where the group has no offset yet), starting timestamps, max_offsets_per_trigger,
    min_partitions, fail_on_data_loss, include_headers. A batch whose ``process`` raises runs again
    (same id, same records) up to ``max_batch_retries`` times; then the stream stops and
    ``await_termination`` raises. One stream per group at a time."""
    topics = [topic] if isinstance(topic, str) else list(topic)
    if any(k in options for k in ("assign", "subscribe", "subscribe_pattern", "ending_offsets", "ending_timestamp",
                                  "ending_offsets_by_timestamp")):
        raise InvalidConfigError("a stream reads its topics from the group's offsets onwards: assign, subscribe, "
                                 "subscribe_pattern and ending_* do not apply")
    if not callable(process):
        raise InvalidConfigError(f"process must be callable as process(df, batch_id), got {process!r}")
    for name, value in (("trigger_interval_s", trigger_interval_s), ("retry_backoff_s", retry_backoff_s)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise InvalidConfigError(f"{name} must be a number of seconds >= 0, got {value!r}")
    if not isinstance(max_batch_retries, int) or isinstance(max_batch_retries, bool) or max_batch_retries < 0:
        raise InvalidConfigError(f"max_batch_retries must be an int >= 0, got {max_batch_retries!r}")
    spec = parse_options({**options, "subscribe": topics}, batch=False)
    cluster = default_cluster()
    for name in topics:
        cluster.metadata.topic(name)  # UnknownTopicOrPartitionError now, not on the stream's thread
    admin = cluster.admin()
    try:
        described = admin.describe_consumer_groups([group_id])[0]
    except GroupIdNotFoundError:
        described = {"members": []}
    if described.get("members"):
        raise IllegalStateError(f"group {group_id!r} has active members; a stream needs the group to itself")
    return MicroBatchStream(spark, cluster, topics, group_id, process, spec, trigger_interval_s, max_batch_retries,
                            retry_backoff_s)
