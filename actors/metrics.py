"""Every raylog metric, declared once (ray.util.metrics), and the recorders the actors call.

Ray's metrics agent on each node exports them in Prometheus' text format on
``http://127.0.0.1:<metrics_export_port>/metrics`` (``ray.nodes()[i]["MetricsExportPort"]``),
a few seconds after they are recorded (Ray's metrics_report_interval_ms, 10 s by default).
docs/metrics.md lists each with its unit and tags; a unit test keeps that page and ``METRICS``
in step. Counters are exported with Prometheus' ``_total`` suffix; ``rate()`` of the produce
and fetch counters gives records/s and bytes/s.

What each costs the hot paths: produce and fetch update two counters and a histogram once per
call (one batch, or one fetch of several MB), never per record; gauges are set on timers (a
replica's heartbeat, every replica_heartbeat_interval_ms; the controller's node check, every
node_check_interval_ms; a coordinator's GROUP_METRICS_INTERVAL_S), and the controller's when a
value changed or gauge_refresh_s() passed: Ray (2.60) drops a gauge series not set again within
two report intervals. bench/client_bench.py measured the produce path with and without them
(docs/metrics.md).

Metrics are declared on first use in each process (``declared()``), so importing this module
(the driver imports actors.controller to start it) registers nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import ray

from raylog.storage.batch import HEADER_SIZE, RecordBatch, peek_length

PARTITION_TAGS = ("topic", "partition")
REPLICA_TAGS = ("topic", "partition", "replica")
GROUP_TAGS = ("group",)
GROUP_PARTITION_TAGS = ("group", "topic", "partition")
EVENT_TAGS = ("event",)

LATENCY_BOUNDARIES_MS = [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000]
"""Histogram buckets for produce and fetch latency: from an in-memory append (well under a
millisecond) to acks='all' waits and long-poll fetches (up to request timeouts of 30 s)."""
METRICS_ENV = "RAYLOG_METRICS"
"""Set to 0 in the environment Ray's workers inherit and raylog's actors record no metrics (the
bench's "before"; a switch for anyone who wants none)."""
GROUP_METRICS_INTERVAL_S = 5.0
"""How often a group coordinator sets its groups' member and lag gauges. The log end offsets it
subtracts from reach the controller with replica heartbeats (every 2 s by default)."""


def gauge_refresh_s() -> float:
    """How often the controller sets an unchanged gauge again: half Ray's report interval (which
    Ray floors at 1 s; 10 s by default). Ray's metrics agent forgets a series not set within two
    intervals: a partition's isr_size vanished from the endpoint some 20 s after it was last set."""
    try:
        interval_ms = ray._config.metrics_report_interval_ms()
    except AttributeError:  # a Ray without this (private) accessor: its default
        interval_ms = 10_000
    return max(interval_ms, 1000) / 2000


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its attribute here, Ray metric kind, exported name, unit, tags, meaning."""

    attr: str
    kind: str
    name: str
    unit: str
    tags: tuple[str, ...]
    description: str


METRICS = (
    # partition replicas: per call (counters, histograms) and per heartbeat (gauges)
    MetricSpec("produce_records", "counter", "raylog_produce_records", "records", PARTITION_TAGS,
               "Records appended by produce calls at the leader (retried duplicates excluded)."),
    MetricSpec("produce_bytes", "counter", "raylog_produce_bytes", "bytes", PARTITION_TAGS,
               "Record batch bytes appended by produce calls at the leader."),
    MetricSpec("fetch_records", "counter", "raylog_fetch_records", "records", PARTITION_TAGS,
               "Offsets covered by consumer fetches (followers' fetches excluded)."),
    MetricSpec("fetch_bytes", "counter", "raylog_fetch_bytes", "bytes", PARTITION_TAGS,
               "Record batch bytes returned by consumer fetches."),
    MetricSpec("produce_latency_ms", "histogram", "raylog_produce_latency_ms", "milliseconds", PARTITION_TAGS,
               "Time a successful produce call spent in the leader, acks='all' waits included."),
    MetricSpec("fetch_latency_ms", "histogram", "raylog_fetch_latency_ms", "milliseconds", PARTITION_TAGS,
               "Time a consumer fetch spent in the leader, long-poll waits (max_wait_ms) included."),
    MetricSpec("log_end_offset", "gauge", "raylog_log_end_offset", "offset", REPLICA_TAGS,
               "The replica's log end offset (the next offset it will write)."),
    MetricSpec("high_watermark", "gauge", "raylog_high_watermark", "offset", REPLICA_TAGS,
               "The replica's high watermark (consumers read below it)."),
    MetricSpec("log_size_bytes", "gauge", "raylog_log_size_bytes", "bytes", REPLICA_TAGS,
               "Bytes of the replica's segments on disk."),
    MetricSpec("log_segments", "gauge", "raylog_log_segments", "segments", REPLICA_TAGS,
               "Segments in the replica's log."),
    MetricSpec("follower_lag", "gauge", "raylog_follower_lag_records", "records", REPLICA_TAGS,
               "Set by the leader per follower (tag replica): its log end minus the follower's."),
    # the controller
    MetricSpec("isr_size", "gauge", "raylog_isr_size", "replicas", PARTITION_TAGS,
               "Replicas in the partition's ISR."),
    MetricSpec("under_replicated", "gauge", "raylog_under_replicated", "0 or 1", PARTITION_TAGS,
               "1 while the ISR is smaller than the replica set (reassignment's new replicas aside)."),
    MetricSpec("offline", "gauge", "raylog_offline", "0 or 1", PARTITION_TAGS,
               "1 while the partition has no leader."),
    MetricSpec("leader_elections", "counter", "raylog_leader_elections", "elections", PARTITION_TAGS,
               "Leader changes the controller committed (offline transitions included)."),
    MetricSpec("controller_events", "counter", "raylog_controller_events", "events", EVENT_TAGS,
               "Controller events by kind (tag event): election, partition_offline, isr_shrink, isr_expand, "
               "reassignment_started, reassignment_completed, replica_died, replica_fenced, node_registered, "
               "node_missing, node_lost, node_refused, topic_created, topic_deleted, partitions_added."),
    MetricSpec("nodes", "gauge", "raylog_nodes", "nodes", ("state",),
               "Registered nodes by state (tag state): alive, registered (running, replicas still starting), "
               "missing."),
    # group coordinators
    MetricSpec("group_members", "gauge", "raylog_group_members", "members", GROUP_TAGS,
               "Members of the consumer group."),
    MetricSpec("group_rebalances", "counter", "raylog_group_rebalances", "rebalances", GROUP_TAGS,
               "Group epoch bumps: a member joined or left, a subscription or a partition count changed."),
    MetricSpec("group_lag", "gauge", "raylog_group_lag_records", "records", GROUP_PARTITION_TAGS,
               "The partition's high watermark minus the group's committed offset."),
)


class _Declared:
    """The Ray metric objects of this process, one per MetricSpec."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        for spec in METRICS:
            description = f"{spec.description} Unit: {spec.unit}."
            if spec.kind == "counter":
                metric = Counter(spec.name, description, spec.tags)
            elif spec.kind == "gauge":
                metric = Gauge(spec.name, description, spec.tags)
            else:
                metric = Histogram(spec.name, description, LATENCY_BOUNDARIES_MS, spec.tags)
            setattr(self, spec.attr, metric)


_declared: _Declared | None = None


def enabled() -> bool:
    return os.environ.get(METRICS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _disable(recorder: object, *methods: str) -> None:
    for name in methods:
        setattr(recorder, name, _nothing)


def _nothing(*args, **kwargs) -> None:
    return None


def declared() -> _Declared:
    global _declared
    if _declared is None:
        _declared = _Declared()
    return _declared


def fetched_offsets(data, offset: int) -> int:
    """How many offsets from ``offset`` the whole batches in ``data`` cover (records, less any a
    compacted log removed): reads only each batch's length field and the last batch's header."""
    end = len(data)
    if end < HEADER_SIZE:
        return 0
    first_base, _ = peek_length(data, 0)
    pos, last = 0, 0
    while pos + HEADER_SIZE <= end:
        _, size = peek_length(data, pos)
        if size < HEADER_SIZE or pos + size > end:
            break
        last, pos = pos, pos + size
    return max(0, RecordBatch(data, last).next_offset - max(offset, first_base))


class ReplicaMetrics:
    """One partition replica's recorder: tags built once; ``produced``/``fetched`` per call,
    ``report`` per heartbeat."""

    def __init__(self, topic: str, partition: int, replica_id: int):
        if not enabled():
            _disable(self, "produced", "fetched", "report")
            return
        self._m = declared()
        self._partition = {"topic": topic, "partition": str(partition)}
        self._replica = {**self._partition, "replica": str(replica_id)}
        self._lag_tags: dict[int, dict] = {}

    def produced(self, records: int, size: int, seconds: float) -> None:
        m, tags = self._m, self._partition
        if records > 0:
            m.produce_records.inc(records, tags)
            m.produce_bytes.inc(size, tags)
        m.produce_latency_ms.observe(seconds * 1000, tags)

    def fetched(self, data, offset: int, seconds: float) -> None:
        m, tags = self._m, self._partition
        if len(data):
            m.fetch_bytes.inc(len(data), tags)
            records = fetched_offsets(data, offset)
            if records > 0:
                m.fetch_records.inc(records, tags)
        m.fetch_latency_ms.observe(seconds * 1000, tags)

    def report(self, log_end_offset: int, high_watermark: int, size_bytes: int, segments: int,
               follower_ends: dict[int, int] | None) -> None:
        """Set the replica's gauges; ``follower_ends`` (the leader's view of each follower's log
        end, -1 while unknown) sets the follower lag gauges, None (not the leader) zeroes them."""
        m, tags = self._m, self._replica
        m.log_end_offset.set(log_end_offset, tags)
        m.high_watermark.set(high_watermark, tags)
        m.log_size_bytes.set(size_bytes, tags)
        m.log_segments.set(segments, tags)
        if follower_ends:
            for follower, end in follower_ends.items():
                if follower not in self._lag_tags:
                    self._lag_tags[follower] = {**self._partition, "replica": str(follower)}
                m.follower_lag.set(log_end_offset - end if end >= 0 else log_end_offset, self._lag_tags[follower])
        elif self._lag_tags:
            # No longer the leader: the new leader reports these followers now.
            for tags in self._lag_tags.values():
                m.follower_lag.set(0, tags)
            self._lag_tags.clear()


class ControllerMetrics:
    """The controller's recorder: events and elections as they are committed, partition gauges
    on its node check (set when they change, and again every gauge_refresh_s())."""

    def __init__(self) -> None:
        if not enabled():
            _disable(self, "event", "election", "partition", "forget", "nodes")
            return
        self._m = declared()
        self._last: dict[tuple, tuple] = {}
        self._refresh_s = gauge_refresh_s()

    def event(self, kind: str, count: int = 1) -> None:
        self._m.controller_events.inc(count, {"event": kind})

    def election(self, topic: str, partition: int) -> None:
        self._m.leader_elections.inc(1, {"topic": topic, "partition": str(partition)})

    def _changed(self, key: tuple, value: tuple | int) -> bool:
        """Whether a gauge must be set now: its value changed, or it is due again."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and last[0] == value and now - last[1] < self._refresh_s:
            return False
        self._last[key] = (value, now)
        return True

    def partition(self, topic: str, partition: int, isr_size: int, under_replicated: bool, offline: bool) -> None:
        if not self._changed((topic, partition), (isr_size, under_replicated, offline)):
            return
        tags = {"topic": topic, "partition": str(partition)}
        self._m.isr_size.set(isr_size, tags)
        self._m.under_replicated.set(int(under_replicated), tags)
        self._m.offline.set(int(offline), tags)

    def nodes(self, by_state: dict[str, int]) -> None:
        for state in ("alive", "registered", "missing"):
            value = by_state.get(state, 0)
            if self._changed(("nodes", state), value):
                self._m.nodes.set(value, {"state": state})

    def forget(self, topic: str, partition: int) -> None:
        """A deleted partition: its gauges go to 0 (Ray exports a gauge's last value until it ages out)."""
        if self._last.pop((topic, partition), None) is not None:
            tags = {"topic": topic, "partition": str(partition)}
            self._m.isr_size.set(0, tags)
            self._m.under_replicated.set(0, tags)
            self._m.offline.set(0, tags)


class GroupMetrics:
    """A group coordinator's recorder."""

    def __init__(self) -> None:
        if not enabled():
            _disable(self, "rebalance", "members", "lag")
            return
        self._m = declared()

    def rebalance(self, group: str) -> None:
        self._m.group_rebalances.inc(1, {"group": group})

    def members(self, group: str, count: int) -> None:
        self._m.group_members.set(count, {"group": group})

    def lag(self, group: str, topic: str, partition: int, lag: int) -> None:
        self._m.group_lag.set(lag, {"group": group, "topic": topic, "partition": str(partition)})
