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
from raylog.errors import OffsetOutOfRangeError, RaylogError, UnknownTopicOrPartitionError
from raylog.logs import get_logger
from raylog.range_reader import plan_read, resolve_partitions
from raylog.ranges import KNOWN_OPTIONS, EARLIEST, LATEST, ReadSpec, check_starting_covers, parse_options, plan
from raylog.records import TopicPartition

log = get_logger(__name__)

PLANNER_ACTOR_NAME = "raylog-spark-planner"
NODE_CACHE_S = 30.0

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


def _offsets_json(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return out


def _from_json(offsets: dict) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


class SparkPlanner:
    """Plain class (tests drive it without an actor); ``planner_actor`` makes it one."""

    def __init__(self, namespace: str):
        from raylog.cluster import attached

        self._cluster = attached(namespace)
        self._admin = self._cluster.admin()
        self._hosts: dict[str, str] = {}
        self._hosts_at = 0.0
        self._directories: dict[tuple[str, int, int], str] = {}

    # --- answers for the JVM (JSON strings) ----------------------------------------------------

    def plan(self, options: str) -> str:
        """A batch read: {"ranges": [[topic, partition, from, until, host], ...], "warnings": [...],
        "compacted": [topics whose offsets have gaps]}."""
        return _answer(lambda: self._plan(json.loads(options)))

    def start_offsets(self, options: str) -> str:
        """Where a new stream starts, per partition: {"offsets": {topic: {partition: offset}}}."""
        return _answer(lambda: {"offsets": _offsets_json(self._start_offsets(self._spec(json.loads(options), False)))})

    def latest_offsets(self, options: str) -> str:
        """The high watermark and log start of every partition a stream reads:
        {"latest": {...}, "earliest": {...}} (partitions added since are in them)."""
        return _answer(lambda: self._latest(self._spec(json.loads(options), False)))

    def plan_between(self, options: str, start: str, end: str) -> str:
        """A micro-batch's ranges from ``start`` to ``end`` (Kafka's offset JSON; a partition missing
        from ``start`` starts at its log start), with failOnDataLoss applied: as ``plan``."""
        return _answer(lambda: self._plan_between(self._spec(json.loads(options), False), _from_json(json.loads(start)),
                                                  _from_json(json.loads(end))))

    def leader(self, topic: str, partition: int) -> str:
        """{"name": the leader replica's actor name, "host": its node's address, "ray_node_id" (the Ray
        node it runs on), "epoch" (its leader epoch), "directory" (its partition directory, for reads
        on its node)}."""
        return _answer(lambda: self._leader(topic, int(partition), refresh=True))

    def partition_count(self, topic: str) -> str:
        """{"partitions": n, "max_message_bytes": m} of a topic a writer sends to."""
        def count():
            md = self._cluster.metadata
            md.invalidate(topic)
            return {"partitions": md.partition_count(topic), "max_message_bytes": md.topic(topic).max_message_bytes}
        return _answer(count)

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

    def _placed(self, ranges, warnings) -> dict:
        out = []
        for r in ranges:
            where = self._leader(r.topic, r.partition, refresh=False)
            out.append([r.topic, r.partition, r.from_offset, r.until_offset, where["host"]])
        compacted = sorted({r.topic for r in ranges
                            if self._cluster.metadata.describe(r.topic).config.get("cleanup_policy") == "compact"})
        return {"ranges": out, "warnings": warnings, "compacted": compacted}

    def _start_offsets(self, spec: ReadSpec) -> dict[TopicPartition, int]:
        partitions = resolve_partitions(self._cluster, spec)
        if not partitions:
            return {}
        earliest = self._admin.beginning_offsets(partitions)
        latest = self._admin.end_offsets(partitions)
        stamps = {tp: s for tp, (s, _) in spec.timestamps_needed(partitions).items() if s is not None}
        check_starting_covers(spec, [tp for tp in partitions if tp not in stamps])
        found = self._admin.list_offsets(stamps) if stamps else {}
        out = {}
        for tp in partitions:
            if tp in stamps:
                if found[tp] is None and spec.starting_strategy == "error":
                    raise OffsetOutOfRangeError(
                        f"{tp.topic}-{tp.partition} has no record at or after starting timestamp {stamps[tp]}",
                        earliest[tp], latest[tp])
                out[tp] = latest[tp] if found[tp] is None else found[tp].offset
                continue
            start = spec.starting[tp] if isinstance(spec.starting, dict) else \
                (EARLIEST if spec.starting == "earliest" else LATEST)
            out[tp] = earliest[tp] if start == EARLIEST else latest[tp] if start == LATEST else start
        return out

    def _latest(self, spec: ReadSpec) -> dict:
        partitions = resolve_partitions(self._cluster, spec)
        return {"latest": _offsets_json(self._admin.end_offsets(partitions) if partitions else {}),
                "earliest": _offsets_json(self._admin.beginning_offsets(partitions) if partitions else {})}

    def _plan_between(self, spec: ReadSpec, start: dict[TopicPartition, int], end: dict[TopicPartition, int]) -> dict:
        partitions = sorted(end)
        earliest = self._admin.beginning_offsets(partitions) if partitions else {}
        starts = {tp: start.get(tp, earliest[tp]) for tp in partitions}
        if not spec.fail_on_data_loss:
            # Retention passed the whole batch: it reads nothing (plan warns what was skipped).
            end = {tp: max(o, earliest[tp]) for tp, o in end.items()}
        fixed = dataclasses.replace(spec, starting=starts, ending=end, starting_timestamp=None,
                                    starting_by_timestamp=None, ending_timestamp=None, ending_by_timestamp=None,
                                    max_offsets_per_trigger=None)
        # The planned ends, not today's high watermarks: a batch Spark planned before a restart can
        # end above a new leader's high watermark; its tasks wait for those records (the reader).
        ranges, warnings = plan(fixed, partitions, earliest, {tp: max(end[tp], starts[tp]) for tp in partitions})
        return self._placed(ranges, warnings)

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
                "directory": self._directory(topic, partition, epoch)}

    def _directory(self, topic: str, partition: int, epoch: int) -> str:
        """The leader's partition directory, where a task on its node reads the segments
        (LocalSegments.java); asked of the leader once per epoch."""
        key = (topic, partition, epoch)
        if key not in self._directories:
            try:
                handle = self._cluster.metadata.leader(topic, partition)
                self._directories[key] = ray_calls.get(handle.read_location.remote(), 30)[1]
            except RaylogError:
                return ""
        return self._directories[key]

    def _host(self, ray_node_id: str) -> str:
        if ray_node_id not in self._hosts or time.monotonic() - self._hosts_at > NODE_CACHE_S:
            self._hosts = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
            self._hosts_at = time.monotonic()
        return self._hosts.get(ray_node_id, "")


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
