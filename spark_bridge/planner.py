"""The Spark connector's planner: the Python actor its JVM side asks what to read and where.

The connector (spark_bridge/jvm) runs in Spark's driver and executors, which are Ray Java
workers; it calls the partition leaders' actors itself for the bytes, but the Kafka source's
option semantics (raylog.ranges) and the cluster's metadata live in Python. So one actor per
raylog namespace, started by ``spark_bridge.session()``, answers the driver's planning calls
and the tasks' leader look-ups with raylog's own client. Calls and answers are JSON strings,
the one shape every Ray language reads; a raylog error comes back as
``{"error": [class name, message, retriable]}``: the JVM retries a retriable one and raises
any other as a RaylogSparkException naming it.

It is a threaded actor (its client is synchronous): a stream's trigger and a task's look-up
are answered side by side.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Callable

import ray

from raylog import ray_calls
from raylog.errors import NotLeaderForPartitionError, OffsetOutOfRangeError, RaylogError, UnknownTopicOrPartitionError
from raylog.logs import get_logger
from raylog.range_reader import plan_read, resolve_partitions
from raylog.ranges import (KNOWN_OPTIONS, EARLIEST, LATEST, LogNow, OffsetRange, Position, ReadSpec,
                           check_starting_covers, parse_options, readable, split)
from raylog.records import TopicPartition

log = get_logger(__name__)

PLANNER_ACTOR_NAME = "raylog-spark-planner"
NODE_CACHE_S = 30.0
REQUEST_TIMEOUT_S = 30.0
CACHE_KEPT = 10_000
"""Answers kept per leader epoch (a leader's directory, where an epoch ends): cleared past this many."""
DELETION_RACE_ATTEMPTS = 3
"""A stream lists its topics again this often when one vanishes while its offsets are asked."""

_CANONICAL = {name.replace("_", ""): name for name in KNOWN_OPTIONS}
"""Spark hands a source its options lower-cased (startingoffsets): back to raylog's names."""


def canonical_options(options: dict[str, Any]) -> dict[str, Any]:
    """Spark's lower-cased (or camelCase, or snake_case) option names as raylog.ranges' names;
    an unknown one is kept as given so parse_options names it."""
    return {_CANONICAL.get(k.replace("_", "").lower(), k): v for k, v in options.items()}


def _answer(call: Callable[[], Any]) -> str:
    try:
        return json.dumps(call())
    except RaylogError as exc:
        # A topic that does not exist fails a Spark plan at once, as Spark's Kafka source does (a
        # client's metadata retries are for topics being created, which a query cannot wait on).
        retriable = exc.retriable and not isinstance(exc, UnknownTopicOrPartitionError)
        return json.dumps({"error": [type(exc).__name__, str(exc), retriable]})
    except Exception as exc:  # noqa: BLE001 - a bug here must reach the JVM as an error, not a hang
        log.exception("Spark planner call failed")
        return json.dumps({"error": ["ActorCallError", f"raylog's Spark planner failed: {exc!r}", False]})


RAYLOG_KEY = "@raylog"
"""A stream offset's raylog part, beside Kafka's {"topic": {"partition": offset}} (no topic can be
named so): {"ids": {topic: topic id}, "epochs": {topic: {partition: leader epoch of the record
before the offset}}}, from which a re-created topic or a diverged log is found."""


def _offsets_json(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return out


def _from_json(offsets: dict) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, parts in offsets.items() if t != RAYLOG_KEY
            for p, o in parts.items()}


def positions_json(positions: dict[TopicPartition, Position]) -> dict:
    """A stream offset: Kafka's JSON, and raylog's topic ids and epochs under RAYLOG_KEY."""
    out: dict = _offsets_json({tp: p.offset for tp, p in positions.items()})
    ids = {tp.topic: p.topic_id for tp, p in sorted(positions.items()) if p.topic_id}
    epochs = _offsets_json({tp: p.epoch for tp, p in positions.items() if p.epoch >= 0})
    if ids or epochs:
        out[RAYLOG_KEY] = {"ids": ids, "epochs": epochs}
    return out


def positions(offsets: dict) -> dict[TopicPartition, Position]:
    """``positions_json``'s inverse; Kafka's plain JSON (a user's startingOffsets, an older
    checkpoint) gives positions without ids or epochs."""
    extra = offsets.get(RAYLOG_KEY) or {}
    ids, epochs = extra.get("ids", {}), _from_json(extra.get("epochs", {}))
    return {tp: Position(o, epochs.get(tp, -1), ids.get(tp.topic, "")) for tp, o in _from_json(offsets).items()}


class SparkPlanner:
    """Plain class (tests drive it without an actor); ``planner_actor`` makes it one."""

    def __init__(self, namespace: str):
        from raylog.cluster import attached

        self._cluster = attached(namespace)
        self._admin = self._cluster.admin()
        self._hosts: dict[str, str] = {}
        self._hosts_at = 0.0
        self._epoch_ends: dict[tuple[str, int, int, int], int] = {}

    # --- answers for the JVM (JSON strings) ----------------------------------------------------

    def plan(self, options: str) -> str:
        """A batch read: {"ranges": [as ``_placed`` gives them], "warnings": [...], "compacted": [topics
        whose offsets can have gaps]}."""
        return _answer(lambda: self._plan(json.loads(options)))

    def start_offsets(self, options: str) -> str:
        """Where a new stream starts, per partition: {"offsets": stream offset JSON, "warnings": [...]}
        (a JSON start outside [earliest, latest] is data loss: an error, or a warning and the nearest
        end with failOnDataLoss off)."""
        return _answer(lambda: self._start_offsets(self._spec(json.loads(options), False)))

    def latest_offsets(self, options: str) -> str:
        """Where every partition a stream reads ends now (its high watermark; partitions added since
        are in it): {"latest": stream offset JSON}."""
        return _answer(lambda: {"latest": positions_json(self._latest(self._spec(json.loads(options), False)))})

    def next_offsets(self, options: str, start: str) -> str:
        """A stream trigger: where each partition carries on from ``start`` (the stream's offset) and
        where it ends now, {"start": ..., "latest": ..., "warnings": [...]}, with what was lost decided
        by raylog.ranges.place (an error when failOnDataLoss is on); partitions of deleted topics
        are left out of both."""
        return _answer(lambda: self._next(self._spec(json.loads(options), False), positions(json.loads(start))))

    def plan_between(self, options: str, start: str, end: str) -> str:
        """A micro-batch's ranges from ``start`` to ``end`` (stream offsets; a partition missing from
        ``start`` starts at its log start), with failOnDataLoss applied: as ``plan``."""
        return _answer(lambda: self._plan_between(self._spec(json.loads(options), False),
                                                  positions(json.loads(start)), positions(json.loads(end))))

    def remaining(self, topic: str, partition: int, offset: int, until: int, until_epoch: int, topic_id: str,
                 fail_on_data_loss: bool) -> str:
        """For a range reader that found records gone or the log ending below its range: the part of
        [offset, until) still in the log, {"from": f, "until": u, "warnings": [...]}, decided as for
        planning (an error when failOnDataLoss is on)."""
        def decide():
            tp = TopicPartition(topic, int(partition))
            start, end = Position(int(offset), -1, topic_id), Position(int(until), int(until_epoch), topic_id)
            begin, stop, lost = readable(tp, start, end, self._logs({tp: [end]})[tp], bool(fail_on_data_loss))
            return {"from": begin, "until": stop, "warnings": lost}
        return _answer(decide)

    def leader(self, topic: str, partition: int) -> str:
        """{"name": the leader replica's actor name, "host": its node's address, "ray_node_id" (the Ray
        node it runs on), "epoch" (its leader epoch), "directory" (its partition directory, for reads
        on its node)}."""
        return _answer(lambda: self._leader(topic, int(partition), refresh=True))

    def partition_count(self, topic: str) -> str:
        """{"partitions": n, "max_message_bytes": m, "leaders": each partition's leader actor name ("" for
        none)} of a topic a writer sends to: one call per task and topic, where a leader per partition
        was a call each (a burst at the controller per stage); ``leader`` after a send fails."""
        def count():
            md = self._cluster.metadata
            md.invalidate(topic)
            partitions = md.describe(topic).partitions
            return {"partitions": len(partitions), "max_message_bytes": md.topic(topic).max_message_bytes,
                    "leaders": [p.actor_name if p.leader is not None else "" for p in partitions]}
        return _answer(count)

    def read_options(self, options: str, planned: bool = False) -> str:
        """A read's options checked (raylog.ranges.parse_options, the one check the Python API uses
        too), and what the JVM keeps of them: {"fail_on_data_loss", "include_headers",
        "max_offsets_per_trigger", "min_offsets_per_trigger" (-1: none), "max_trigger_delay_ms"}.
        ``planned``: the read's ranges were planned already (spark_bridge.read), so it names no topics."""
        def check():
            given = json.loads(options)
            if planned and not set(canonical_options(given)) & {"assign", "subscribe", "subscribe_pattern"}:
                given["assign"] = "{}"
            spec = self._spec(given, False)
            return {"fail_on_data_loss": spec.fail_on_data_loss, "include_headers": spec.include_headers,
                    "max_offsets_per_trigger": spec.max_offsets_per_trigger or -1,
                    "min_offsets_per_trigger": spec.min_offsets_per_trigger or -1,
                    "max_trigger_delay_ms": spec.max_trigger_delay_ms}
        return _answer(check)

    def topics(self) -> str:
        """{"topics": [every topic's name]}: the connector matches subscribePattern against them
        with Java's regular expressions, as Spark's Kafka source does."""
        return _answer(lambda: {"topics": sorted(self._admin.list_topics())})

    def ping(self) -> int:
        return 1

    # --- the work ----------------------------------------------------------------------------

    def _spec(self, options: dict, batch: bool) -> ReadSpec:
        return parse_options(canonical_options(options), batch=batch, spark_names=True)

    def _plan(self, options: dict) -> dict:
        spec = self._spec(options, True)
        if spec.max_offsets_per_trigger is not None:
            spec = dataclasses.replace(spec, max_offsets_per_trigger=None)  # a stream's option; batch reads ignore it
        return self._placed(*plan_read(self._cluster, spec))

    def _placed(self, ranges: list[OffsetRange], warnings: list[str],
                ends: dict[TopicPartition, Position] | None = None) -> dict:
        """The ranges for the JVM (RaylogScanBuilder.ranges): topic, partition, from, until, the
        epoch of the record before until (-1: not known) and the topic's id, which a reader hands
        back (``remaining``) when it finds the log changed under it, and the leader as ``leader``
        answers (the task starts with it, asking the planner only after it failed)."""
        ends = ends or {}
        out = []
        for r in ranges:
            end = ends.get(TopicPartition(r.topic, r.partition))
            out.append({"topic": r.topic, "partition": r.partition, "from": r.from_offset, "until": r.until_offset,
                        "until_epoch": end.epoch if end is not None and end.offset == r.until_offset else -1,
                        "topic_id": self._topic_id(r.topic),
                        "leader": self._leader(r.topic, r.partition, refresh=False)})
        # A topic compacted once keeps its gaps after its policy goes back to delete.
        compacted = sorted({r.topic for r in ranges if self._cluster.metadata.describe(r.topic).ever_compacted})
        return {"ranges": out, "warnings": warnings, "compacted": compacted}

    def _start_offsets(self, spec: ReadSpec) -> dict:
        partitions = resolve_partitions(self._cluster, spec)
        if not partitions:
            return {"offsets": {}, "warnings": []}
        logs = self._logs({tp: [] for tp in partitions}, refresh=False)
        stamps = {tp: s for tp, (s, _) in spec.timestamps_needed(partitions).items() if s is not None}
        check_starting_covers(spec, [tp for tp in partitions if tp not in stamps])
        found = self._admin.list_offsets(stamps) if stamps else {}
        out, warnings = {}, []
        for tp in partitions:
            log = logs[tp]
            if tp in stamps:
                if found[tp] is None and spec.starting_strategy == "error":
                    raise OffsetOutOfRangeError(
                        f"{tp.topic}-{tp.partition} has no record at or after starting timestamp {stamps[tp]}",
                        log.log_start, log.end)
                at = Position(log.end, log.end_epoch) if found[tp] is None else \
                    Position(found[tp].offset, found[tp].leader_epoch)
            else:
                start = spec.starting[tp] if isinstance(spec.starting, dict) else \
                    (EARLIEST if spec.starting == "earliest" else LATEST)
                # A JSON start is checked against [earliest, latest] now, as Kafka's source does.
                at = Position(log.log_start) if start == EARLIEST else \
                    Position(log.end, log.end_epoch) if start == LATEST else Position(start)
            begin, _, lost = readable(tp, at, None, log, spec.fail_on_data_loss)
            warnings += lost
            out[tp] = Position(begin, at.epoch if begin == at.offset else -1, log.topic_id)
        return {"offsets": positions_json(out), "warnings": warnings}

    def _topic_id(self, topic: str) -> str:
        return self._cluster.metadata.describe(topic).topic_id

    def _logs(self, at: dict[TopicPartition, list[Position]], refresh: bool = True) -> dict[TopicPartition, LogNow]:
        """Each partition's log now (``refresh``: its topic's metadata asked afresh, for its id). For
        each position whose epoch is older than the log's last record's, or that is past the log's
        end, the current leader's end of that epoch: from it ``place`` finds a log that diverged
        from what was read (or knows a position is still good while a new leader's high watermark
        catches up)."""
        partitions = list(at)
        if refresh:
            for topic in {tp.topic for tp in partitions}:
                self._cluster.metadata.invalidate(topic)
        earliest = self._admin.beginning_offsets(partitions)
        latest = self._admin.list_offsets({tp: LATEST for tp in partitions})
        out = {}
        for tp in partitions:
            end, topic_id = latest[tp], self._topic_id(tp.topic)
            epoch_end = {}
            for pos in at[tp]:
                if 0 <= pos.epoch and pos.topic_id in ("", topic_id) \
                        and (pos.epoch < end.leader_epoch or pos.offset > end.offset):
                    epoch_end[pos.epoch] = self._epoch_end(tp, topic_id, pos.epoch)
            out[tp] = LogNow(earliest[tp], end.offset, topic_id, epoch_end, end.leader_epoch)
        return out

    def _epoch_end(self, tp: TopicPartition, topic_id: str, epoch: int) -> int:
        """Where the current leader's log holds ``epoch`` (the largest epoch <= it) up to: Kafka's
        OffsetsForLeaderEpoch, asked at the leader epoch the metadata gives (a replica at another
        epoch refuses; the metadata is asked again). Kept per leader epoch: only a new leader
        changes it. A leader that led at ``epoch`` or after holds every record acknowledged at it."""
        md = self._cluster.metadata

        def ask():
            leader_epoch = md.describe(tp.topic).partitions[tp.partition].leader_epoch
            if epoch > leader_epoch:
                # Read from a leader this metadata has not heard of: asking an older one could find
                # a divergence that is not there.
                raise NotLeaderForPartitionError(f"{tp.topic}-{tp.partition}: metadata at leader epoch "
                                                 f"{leader_epoch} is older than epoch {epoch}")
            key = (topic_id, tp.partition, epoch, leader_epoch)
            if key not in self._epoch_ends:
                if len(self._epoch_ends) > CACHE_KEPT:
                    self._epoch_ends.clear()
                handle = md.leader(tp.topic, tp.partition)
                self._epoch_ends[key] = ray_calls.get(handle.end_offset_for_epoch.remote(epoch, leader_epoch),
                                                      REQUEST_TIMEOUT_S)[1]
            return self._epoch_ends[key]
        return ray_calls.with_retries(ask, REQUEST_TIMEOUT_S, on_retry=lambda: md.invalidate(tp.topic))

    def _latest(self, spec: ReadSpec) -> dict[TopicPartition, Position]:
        _, logs = self._reading(spec, {})
        return {tp: Position(log.end, log.end_epoch, log.topic_id) for tp, log in logs.items()}

    def _reading(self, spec: ReadSpec, start: dict[TopicPartition, Position]) \
            -> tuple[list[TopicPartition], dict[TopicPartition, LogNow]]:
        """The partitions a running stream reads now and their logs. A topic deleted after it was
        listed and before its offsets were asked is listed again, and then gone: a stream reports
        it as a deleted topic rather than failing on it (the chaos of a concurrent delete)."""
        def read():
            partitions = resolve_partitions(self._cluster, spec, missing_ok=True)
            return partitions, (self._logs({tp: [start[tp]] if tp in start else [] for tp in partitions},
                                           refresh=False) if partitions else {})
        return _despite_deletions(read)

    def _next(self, spec: ReadSpec, start: dict[TopicPartition, Position]) -> dict:
        partitions, logs = self._reading(spec, start)
        reading = set(partitions)
        warnings = self._gone(spec, [tp for tp in start if tp not in reading])
        begins, latest = {}, {}
        for tp in partitions:
            log, at = logs[tp], start.get(tp)
            begin, _, lost = readable(tp, at, None, log, spec.fail_on_data_loss)
            warnings += lost
            begins[tp] = at if at is not None and not lost else Position(begin, -1, log.topic_id)
            latest[tp] = Position(log.end, log.end_epoch, log.topic_id) if log.end > begin else begins[tp]
        return {"start": positions_json(begins), "latest": positions_json(latest), "warnings": warnings}

    def _gone(self, spec: ReadSpec, partitions: list[TopicPartition]) -> list[str]:
        """Partitions a stream read that no longer exist (their topic was deleted): lost, as Kafka's
        source reports them."""
        if not partitions:
            return []
        lost = (f"{', '.join(f'{tp.topic}-{tp.partition}' for tp in sorted(partitions))}: deleted (the topic no "
                "longer exists); records not yet read there are lost")
        if spec.fail_on_data_loss:
            raise OffsetOutOfRangeError(f"{lost}. Set failOnDataLoss=false to read on without them")
        return [lost]

    def _plan_between(self, spec: ReadSpec, start: dict[TopicPartition, Position],
                      end: dict[TopicPartition, Position]) -> dict:
        def read():
            existing = set(self._admin.list_topics())
            partitions = sorted(tp for tp in end if tp.topic in existing)
            return existing, partitions, (self._logs({tp: [p for p in (start.get(tp), end[tp]) if p is not None]
                                                      for tp in partitions}) if partitions else {})
        existing, partitions, logs = _despite_deletions(read)
        warnings = self._gone(spec, [tp for tp in end if tp.topic not in existing])
        ranges = []
        for tp in partitions:
            # The recorded end, even above today's high watermark (a new leader's catching up; its
            # tasks wait for it): only a log that diverged, was re-created or lost records changes
            # what a batch Spark recorded reads.
            begin, until, lost = readable(tp, start.get(tp), end[tp], logs[tp], spec.fail_on_data_loss)
            warnings += lost
            if until > begin:
                ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
        return self._placed(split(ranges, spec.min_partitions), warnings, end)

    def _leader(self, topic: str, partition: int, refresh: bool) -> dict:
        md = self._cluster.metadata
        if refresh:
            md.invalidate(topic)
        info = md.describe(topic).partitions
        if not 0 <= partition < len(info):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{len(info) - 1}, not [{partition}]")
        leader = info[partition].leader
        if leader is None:
            md.invalidate(topic)
            return {"name": "", "host": "", "ray_node_id": "", "epoch": -1, "directory": ""}
        epoch = info[partition].leader_epoch
        return {"name": info[partition].actor_name, "host": self._host(leader.ray_node_id),
                "ray_node_id": leader.ray_node_id, "epoch": epoch,
                # Where a task on the leader's node reads the segments (LocalSegments.java): from the
                # metadata, not the leader, whose answer a paused leader would hold up.
                "directory": leader.directory if leader.ray_node_id else ""}

    def _host(self, ray_node_id: str) -> str:
        if ray_node_id not in self._hosts or time.monotonic() - self._hosts_at > NODE_CACHE_S:
            self._hosts = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
            self._hosts_at = time.monotonic()
        return self._hosts.get(ray_node_id, "")


def _despite_deletions(read: Callable[[], Any]) -> Any:
    """``read()``, which lists topics and then asks their logs, again when a topic listed is deleted
    before its logs were asked (DELETION_RACE_ATTEMPTS in all): listed again, it is gone, and the
    stream reports it deleted rather than failing on it (found by the chaos run's topic re-creation)."""
    attempts = DELETION_RACE_ATTEMPTS
    while True:
        try:
            return read()
        except UnknownTopicOrPartitionError:
            attempts -= 1
            if attempts == 0:
                raise


def ensure_planner(namespace: str):
    """The planner actor of ``namespace``, started if none runs: on this (the driver's) node while it
    lives, no CPU, restarted by Ray if it dies (it keeps no state)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor = ray.remote(num_cpus=0, max_concurrency=16, max_restarts=-1)(SparkPlanner)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    handle = actor.options(name=PLANNER_ACTOR_NAME, namespace=namespace, get_if_exists=True, lifetime="detached",
                           scheduling_strategy=here).remote(namespace)
    ray.get(handle.ping.remote(), timeout=120)
    return handle
