"""AdminClient: topics, partitions and offsets (kafka-python's KafkaAdminClient names)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import ray

from raylog import ray_calls
from raylog.config import TopicConfig
from raylog.errors import (
    GroupIdNotFoundError, InvalidConfigError, InvalidGroupIdError, InvalidOffsetError, RaylogError,
    InvalidPartitionError, ReplicaNotAvailableError,
    TopicCreationIncompleteError, UnknownTopicOrPartitionError,
)
from raylog.naming import is_count, validate_topic_name, validate_topic_shape
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicDescription
from raylog.records import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition


PROGRESS_INTERVAL_S = 0.5
"""How often a waiting create_topics asks the controller how many replicas have started."""


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

    def create_topics(self, new_topics: Iterable[NewTopic],
                      progress: Callable[[str, int, int], None] | None = None) -> list[TopicDescription]:
        """Create each topic, waiting as long as its replicas keep starting (a replica process takes
        about a second of CPU, so hundreds take minutes on a small machine); ``progress(name,
        started, total)`` is called as they do. Raises TopicAlreadyExistsError, InvalidTopicError,
        InvalidConfigError, InvalidPartitionError, InvalidReplicationFactorError, and
        TopicCreationIncompleteError when replicas stop starting (creating it again finishes it)."""
        created = []
        for t in new_topics:
            validate_topic_name(t.name)
            validate_topic_shape(t.num_partitions, t.replication_factor)
            TopicConfig.from_mapping(t.topic_configs)  # reject bad configs before any call
            ref = self._controller.create_topic.remote(t.name, t.num_partitions, t.replication_factor,
                                                       dict(t.topic_configs))
            created.append(self._await_creation(ref, t.name, progress))
            self._cluster.metadata.invalidate(t.name)
        return created

    def create_topic(self, name: str, num_partitions: int = 1, replication_factor: int = 1,
                     progress: Callable[[str, int, int], None] | None = None, **topic_configs) -> TopicDescription:
        """Shorthand for one topic: create_topic('events', 3, retention_ms=60000)."""
        return self.create_topics([NewTopic(name, num_partitions, replication_factor, topic_configs)], progress)[0]

    def _await_creation(self, ref, name: str, progress: Callable[[str, int, int], None] | None):
        """The controller's answer to a creation, waited for while replicas keep starting: after
        request_timeout_ms without one more, TopicCreationIncompleteError (the controller goes on)."""
        started, changed_at, report = -1, time.monotonic(), None
        while True:
            ready, _ = ray.wait([ref], timeout=PROGRESS_INTERVAL_S)
            if ready:
                return self._call(ref)
            try:
                report = self._call(self._controller.creation_progress.remote(name))
            except UnknownTopicOrPartitionError:
                report = None  # not recorded yet: validation and placement are still running
            now = time.monotonic()
            if report is not None and report["total"]:
                if progress is not None:
                    progress(name, report["started"], report["total"])
                if report["started"] != started:
                    started, changed_at = report["started"], now
            if now - changed_at > self._timeout_s:
                missing = report["missing"] if report else []
                raise TopicCreationIncompleteError(
                    f"topic {name!r}: no replica started within request_timeout_ms={self._timeout_s * 1000:.0f} "
                    f"({started if started >= 0 else 0} of {report['total'] if report else '?'} started; missing "
                    f"(partition, replica) {missing[:10]}{' ...' if len(missing) > 10 else ''}); the controller "
                    "goes on starting them, and creating the topic again waits for the rest", missing)

    def delete_topics(self, names: Iterable[str]) -> None:
        for name in names:
            validate_topic_name(name)
            self._call(self._controller.delete_topic.remote(name))
            self._cluster.metadata.invalidate(name)

    def describe_cluster(self) -> dict:
        """Where the controller runs (Ray's head node), and the live nodes with their replica counts."""
        return self._call(self._controller.describe_cluster.remote())

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, without raylog's internal ones (__consumer_offsets) unless asked, as Kafka's
        Admin.listTopics does."""
        return self._call(self._controller.list_topics.remote(include_internal))

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        names = self.list_topics() if names is None else [validate_topic_name(n) for n in names]
        return [self._call(self._controller.describe_topic.remote(n)) for n in names]

    def create_partitions(self, new_totals: Mapping[str, int],
                          progress: Callable[[str, int, int], None] | None = None) -> None:
        """Grow each topic to the given partition count (partitions are never removed), waiting as
        create_topics does."""
        for name, total in new_totals.items():
            if not is_count(total):
                raise InvalidPartitionError(f"topic {name!r} cannot grow to {total!r} partitions")
            ref = self._controller.create_partitions.remote(validate_topic_name(name), total)
            self._await_creation(ref, name, progress)
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
        results = ray_calls.with_retries(
            lambda: self._call([md.leader(tp.topic, tp.partition).list_offsets.remote(requests[tp]) for tp in tps]),
            self._timeout_s, on_retry=lambda: [md.invalidate(t) for t in {tp.topic for tp in tps}])
        return {tp: (None if off < 0 else OffsetAndTimestamp(off, ts)) for tp, (off, ts) in zip(tps, results)}

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: r.offset for tp, r in self.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps}).items()}

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: r.offset for tp, r in self.list_offsets({tp: LATEST_TIMESTAMP for tp in tps}).items()}

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Move each partition's log start offset up to the given offset; returns the new start offsets."""
        md = self._cluster.metadata
        tps = list(before)
        for tp in tps:
            offset = before[tp]
            if not isinstance(offset, int) or isinstance(offset, bool) or (offset < 0 and offset != LATEST_TIMESTAMP):
                raise InvalidOffsetError(f"delete_records for {tp.topic}-{tp.partition} needs an offset >= 0 (or -1 "
                                         f"for the high watermark), got {offset!r}")
        starts = self._call([md.leader(tp.topic, tp.partition).delete_records.remote(before[tp]) for tp in tps])
        return dict(zip(tps, starts))

    # --- consumer groups ----------------------------------------------------------------------

    def _coordinator(self, group_id: str):
        from raylog.consumer.group_member import coordinator_for

        if not isinstance(group_id, str) or not group_id:
            raise InvalidGroupIdError(f"group id must be a non-empty string, got {group_id!r}")
        return coordinator_for(self._cluster, group_id, self._timeout_s)

    def list_consumer_groups(self) -> list[dict]:
        """Every group: {group_id, state, member_count}, from every coordinator."""
        from raylog.naming import coordinator_actor_name

        import ray

        partitions = self._call(self._controller.ensure_offsets_topic.remote())
        handles = [ray.get_actor(coordinator_actor_name(p), namespace=self._cluster.config.namespace)
                   for p in range(partitions)]
        groups = self._call([h.list_groups.remote() for h in handles])
        return sorted((g for part in groups for g in part), key=lambda g: g["group_id"])

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> list[dict]:
        """Per group: state, epochs, assignor and members (member and instance id, client host node
        and client id (actor and process), member epoch, assigned and target partitions)."""
        return [self._call(self._coordinator(g).describe_group.remote(g)) for g in group_ids]

    def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (kafka-python's name)."""
        wanted = None if partitions is None else [[tp[0], int(tp[1])] for tp in partitions]
        rows = self._call(self._coordinator(group_id).fetch_offsets.remote(group_id, wanted))
        return {TopicPartition(t, p): OffsetAndMetadata(o, m) for t, p, o, m in rows}

    def consumer_group_lag(self, group_id: str) -> dict:
        """Lag per partition (high watermark minus committed offset, for every partition of every
        topic the group has offsets for or is subscribed to) and summed per member."""
        coordinator = self._coordinator(group_id)
        committed = self.list_consumer_group_offsets(group_id)
        try:
            described = self._call(coordinator.describe_group.remote(group_id))
        except GroupIdNotFoundError:
            described = {"members": []}
        owner = {}
        topics = {tp.topic for tp in committed}
        for m in described["members"]:
            for t, p in m["assigned"]:
                owner[TopicPartition(t, p)] = m["member_id"]
                topics.add(t)
            topics.update(m["subscribed_topics"] or ())
        tps = []
        for topic in sorted(topics):
            try:
                n = len(self.describe_topics([topic])[0].partitions)
            except UnknownTopicOrPartitionError:
                continue
            tps += [TopicPartition(topic, p) for p in range(n)]
        ends = self.end_offsets(tps) if tps else {}
        rows, per_member = [], {}
        for tp in tps:
            om = committed.get(tp)
            end = ends[tp]
            lag = end - om.offset if om is not None else None
            member = owner.get(tp)
            rows.append({"topic": tp.topic, "partition": tp.partition, "committed": None if om is None else om.offset,
                         "end_offset": end, "lag": lag, "member_id": member})
            if member is not None:
                per_member[member] = per_member.get(member, 0) + (lag if lag is not None else end)
        return {"group_id": group_id, "partitions": rows,
                "members": [{"member_id": m, "lag": lag} for m, lag in sorted(per_member.items())],
                "total_lag": sum(r["lag"] if r["lag"] is not None else r["end_offset"] for r in rows)}

    def reset_consumer_group_offsets(self, group_id: str, topics: Iterable[str], *, to: str | None = None,
                                     timestamp_ms: int | None = None, shift_by: int | None = None,
                                     offsets: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Move a group's committed offsets, as kafka-consumer-groups --reset-offsets: ``to`` "earliest"
        or "latest", a ``timestamp_ms`` (the first offset at or after it, else the end), a
        ``shift_by`` N from the committed offset (clamped to the log), or explicit ``offsets``.
        Only while the group has no members (NonEmptyGroupError). Returns the new offsets."""
        chosen = [x is not None for x in (to, timestamp_ms, shift_by, offsets)]
        if sum(chosen) != 1:
            raise InvalidConfigError("reset_consumer_group_offsets takes exactly one of to, timestamp_ms, shift_by, offsets")
        if to is not None and to not in ("earliest", "latest"):
            raise InvalidConfigError(f"to must be 'earliest' or 'latest', got {to!r}")
        tps = []
        for topic in topics:
            n = len(self.describe_topics([validate_topic_name(topic)])[0].partitions)
            tps += [TopicPartition(topic, p) for p in range(n)]
        if offsets is not None:
            target = {TopicPartition(*tp): o for tp, o in offsets.items()}
            for tp, o in target.items():
                if not isinstance(o, int) or o < 0:
                    raise InvalidOffsetError(f"offset for {tp} must be an int >= 0, got {o!r}")
        elif to == "earliest":
            target = self.beginning_offsets(tps)
        elif to == "latest":
            target = self.end_offsets(tps)
        elif timestamp_ms is not None:
            found = self.list_offsets({tp: timestamp_ms for tp in tps})
            ends = self.end_offsets(tps)
            target = {tp: (found[tp].offset if found[tp] is not None else ends[tp]) for tp in tps}
        else:
            committed = self.list_consumer_group_offsets(group_id, tps)
            starts, ends = self.beginning_offsets(tps), self.end_offsets(tps)
            target = {tp: min(max(committed[tp].offset + shift_by if tp in committed else starts[tp], starts[tp]),
                              ends[tp]) for tp in tps}
        payload = [[tp.topic, tp.partition, o] for tp, o in target.items()]
        self._call(self._coordinator(group_id).reset_offsets.remote(group_id, payload))
        return target

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups and their committed offsets; only groups with no members (NonEmptyGroupError)."""
        for g in group_ids:
            self._call(self._coordinator(g).delete_group.remote(g))

    def close(self) -> None:
        """Nothing to release: the admin client holds only handles."""
