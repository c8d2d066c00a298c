"""AdminClient: topics, partitions and offsets (kafka-python's KafkaAdminClient names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from raylog import ray_calls
from raylog.config import TopicConfig
from raylog.errors import InvalidConfigError, RaylogError, ReplicaNotAvailableError
from raylog.naming import validate_topic_name
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicDescription
from raylog.records import OffsetAndTimestamp, TopicPartition


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    topic_configs: Mapping = field(default_factory=dict)
    """Kafka topic configs, e.g. {'retention.ms': 60000} or {'retention_ms': 60000}."""


class AdminClient:
    def __init__(self, cluster=None):
        from raylog.cluster import default_cluster

        self._cluster = cluster or default_cluster()
        self._controller = self._cluster.controller
        self._timeout_s = self._cluster.config.request_timeout_ms / 1000

    def _call(self, ref):
        return ray_calls.get(ref, self._timeout_s)

    def create_topics(self, new_topics: Iterable[NewTopic]) -> list[TopicDescription]:
        """Create each topic; raises TopicAlreadyExistsError, InvalidTopicError, InvalidConfigError."""
        created = []
        for t in new_topics:
            validate_topic_name(t.name)
            TopicConfig.from_mapping(t.topic_configs)  # reject bad configs before any call
            created.append(self._call(self._controller.create_topic.remote(
                t.name, t.num_partitions, t.replication_factor, dict(t.topic_configs))))
            self._cluster.metadata.invalidate(t.name)
        return created

    def create_topic(self, name: str, num_partitions: int = 1, replication_factor: int = 1,
                     **topic_configs) -> TopicDescription:
        """Shorthand for one topic: create_topic('events', 3, retention_ms=60000)."""
        return self.create_topics([NewTopic(name, num_partitions, replication_factor, topic_configs)])[0]

    def delete_topics(self, names: Iterable[str]) -> None:
        for name in names:
            validate_topic_name(name)
            self._call(self._controller.delete_topic.remote(name))
            self._cluster.metadata.invalidate(name)

    def describe_cluster(self) -> dict:
        """Where the controller runs (Ray's head node), and the live nodes with their replica counts."""
        return self._call(self._controller.describe_cluster.remote())

    def list_topics(self) -> list[str]:
        return self._call(self._controller.list_topics.remote())

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        names = self.list_topics() if names is None else [validate_topic_name(n) for n in names]
        return [self._call(self._controller.describe_topic.remote(n)) for n in names]

    def create_partitions(self, new_totals: Mapping[str, int]) -> None:
        """Grow each topic to the given partition count (partitions are never removed)."""
        for name, total in new_totals.items():
            self._call(self._controller.create_partitions.remote(validate_topic_name(name), total))
            self._cluster.metadata.invalidate(name)

    def describe_partitions(self, topic: str) -> list[dict]:
        """Per partition: leader, replicas (node, alive), ISR, epochs, ``offline`` and
        ``under_replicated``, and the leader replica's own view (node_id, pid, directory, offsets,
        high watermark, size, log counters). An offline partition or an unreachable leader gives
        ``leader_error`` instead of the leader's view, never an error for the whole topic."""
        validate_topic_name(topic)
        states = self._call(self._controller.partition_states.remote(topic))
        self._cluster.metadata.invalidate(topic)
        md = self._cluster.metadata
        refs = []
        for st in states:
            try:
                refs.append(md.leader(topic, st["partition"]).describe.remote())
            except RaylogError as exc:
                refs.append(exc)
        out = []
        for st, ref in zip(states, refs):
            info = dict(st)
            if isinstance(ref, BaseException):
                info["leader_error"] = f"{type(ref).__name__}: {ref}"
            else:
                try:
                    view = ray_calls.get(ref, self._timeout_s)
                    info.update({k: v for k, v in view.items() if k not in info})
                    info["isr"] = st["isr"]
                except RaylogError as exc:
                    info["leader_error"] = f"{type(exc).__name__}: {exc}"
            out.append(info)
        return out

    def describe_replicas(self, topic: str, partition: int) -> list[dict]:
        """Every replica of one partition as it sees itself: role, pid, node, offsets, epochs (an
        unreachable replica gives ``error`` instead)."""
        validate_topic_name(topic)
        handles = self._call(self._controller.replica_handles.remote(topic, partition))
        out = []
        for rid, handle in sorted(handles.items()):
            try:
                if handle is None:
                    raise ReplicaNotAvailableError(f"replica {rid} has no actor (its node is gone)")
                out.append(ray_calls.get(handle.attach.remote(), min(self._timeout_s, 5.0)))
            except RaylogError as exc:
                out.append({"replica_id": rid, "error": f"{type(exc).__name__}: {exc}"})
        return out

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None = None) -> list[TopicPartition]:
        """Preferred leader election: move leadership back to each partition's first replica where it
        is alive and in sync (all partitions, or those given). Returns the partitions that moved."""
        wanted = None if partitions is None else [(validate_topic_name(tp[0]), int(tp[1])) for tp in partitions]
        moved = self._call(self._controller.elect_leaders.remote(wanted))
        for name, _ in moved:
            self._cluster.metadata.invalidate(name)
        return [TopicPartition(t, p) for t, p in moved]

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, list[str]]) -> dict:
        """Move partitions to the given Ray node ids (the first becomes the preferred leader). New
        replicas copy the log and join the ISR before the old ones are dropped."""
        request = {(validate_topic_name(tp[0]), int(tp[1])): list(nodes) for tp, nodes in reassignments.items()}
        result = self._call(self._controller.reassign_partitions.remote(request))
        for name, _ in request:
            self._cluster.metadata.invalidate(name)
        return {TopicPartition(*k): v for k, v in result.items()}

    def list_offsets(self, requests: Mapping[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the offset for a timestamp in ms, EARLIEST_TIMESTAMP (-2) or LATEST_TIMESTAMP (-1)."""
        md = self._cluster.metadata
        tps = list(requests)
        for tp in tps:
            if not isinstance(requests[tp], int) or requests[tp] < EARLIEST_TIMESTAMP:
                raise InvalidConfigError(f"list_offsets timestamp for {tp} must be >= -2, got {requests[tp]!r}")
        results = self._call([md.leader(tp.topic, tp.partition).list_offsets.remote(requests[tp]) for tp in tps])
        return {tp: (None if off < 0 else OffsetAndTimestamp(off, ts)) for tp, (off, ts) in zip(tps, results)}

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: r.offset for tp, r in self.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps}).items()}

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: r.offset for tp, r in self.list_offsets({tp: LATEST_TIMESTAMP for tp in tps}).items()}

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Move each partition's log start offset up to the given offset; returns the new start offsets."""
        md = self._cluster.metadata
        tps = list(before)
        starts = self._call([md.leader(tp.topic, tp.partition).delete_records.remote(before[tp]) for tp in tps])
        return dict(zip(tps, starts))

    def close(self) -> None:
        """Nothing to release: the admin client holds only handles."""
