"""AdminClient: topics, partitions and offsets (kafka-python's KafkaAdminClient names)."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

import ray

from raylog import ray_calls, topic_configs
from raylog.config import AdminConfig, TopicConfig, client_config, split_topic_configs
from raylog.errors import (
    GroupIdNotFoundError, InvalidConfigError, InvalidGroupIdError, InvalidOffsetError, RaylogError,
    InvalidPartitionError, KafkaTimeoutError, ReplicaNotAvailableError,
    UnknownTopicOrPartitionError,
)
from raylog.naming import is_count, validate_topic_name, validate_topic_shape
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicDescription
from raylog.records import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from raylog.topic_configs import (  # noqa: F401 - ConfigResource and friends re-exported, as kafka.admin does
    AlterConfigOp, ConfigEntry, ConfigResource, ConfigResourceType,
)


_NO_CONFIGS: Mapping[str, Any] = MappingProxyType({})

PROGRESS_INTERVAL_S = 0.5
"""How often a waiting create_topics asks the controller how many replicas have started."""
CONTROLLER_SILENCE_TIMEOUTS = 4
"""How many request timeouts a waiting create_topics lets one progress question go unanswered
before it gives up with KafkaTimeoutError: while 256 replica processes start on two cores the
controller has taken over 30 s (one default timeout) to answer."""
CONTROLLER_SILENCE_S = 30.0
"""The least a waiting create_topics lets one progress question go unanswered, whatever
request_timeout_ms says."""


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = 1
    """-1: the cluster's num_partitions (kafka-python's 'broker default')."""
    replication_factor: int = 1
    """-1: the cluster's default_replication_factor."""
    topic_configs: Mapping = field(default_factory=dict)
    """Kafka topic configs, e.g. {'retention.ms': '60000'} or {'retention_ms': 60000}."""
    replica_assignments: Mapping | None = None
    """kafka-python's; raylog places replicas itself (alter_partition_reassignments moves them),
    so only an empty assignment is accepted."""


@dataclass(frozen=True)
class NewPartitions:
    """kafka-python's create_partitions value: the topic's new total partition count."""

    total_count: int
    new_assignments: list | None = None
    """kafka-python's; only None is accepted (raylog places new partitions itself)."""


class OffsetSpec(IntEnum):
    """kafka-python's offset specs for list_partition_offsets and reset_group_offsets."""

    LATEST = LATEST_TIMESTAMP
    EARLIEST = EARLIEST_TIMESTAMP


class OffsetTimestamp(int):
    """A time in ms as an offset spec: the first offset whose timestamp is at or after it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"OffsetTimestamp({int(self)})"


class AdminClient:
    """Topics, partitions, configs, offsets and consumer groups (kafka-python's KafkaAdminClient;
    every KafkaAdminClient config key is accepted, see AdminConfig and IGNORED_CLIENT_KEYS)."""

    def __init__(self, cluster=None, **configs):
        from raylog.cluster import default_cluster

        self.config: AdminConfig = client_config(AdminConfig, configs)
        self._cluster = cluster or default_cluster()
        self._timeout_s = (self.config.request_timeout_ms or self._cluster.config.request_timeout_ms) / 1000

    @property
    def _controller(self):
        # Checked first: once the Ray session has ended, a call on the handle would start a new Ray.
        self._cluster.session.check()
        return self._cluster.controller

    def _call(self, ref):
        return ray_calls.get(ref, self._timeout_s)

    def create_topics(self, new_topics, timeout_ms: int | None = None, validate_only: bool = False,
                      raise_errors: bool = True, wait_for_metadata: bool = False,
                      progress: Callable[[str, int, int], None] | None = None) -> list[TopicDescription]:
        """Create each topic, waiting until every replica runs (a replica process takes
        about a second of CPU, so hundreds take minutes on a small machine); ``progress(name,
        started, total)`` is called as they do. ``new_topics`` is what kafka-python 3.x takes: a
        list of names, a dict {name: {num_partitions, replication_factor, configs}} (-1 or absent:
        the cluster's defaults), or NewTopic objects. ``validate_only`` checks without creating;
        with ``raise_errors=False`` a topic that fails is skipped and the rest are created.
        ``timeout_ms`` and ``wait_for_metadata`` are kafka-python's: creation always returns once
        every replica runs. Returns the created topics' descriptions.

        Raises TopicAlreadyExistsError, InvalidTopicError, InvalidConfigError,
        InvalidPartitionError, InvalidReplicationFactorError, and TopicCreationIncompleteError
        when Ray fails a replica or its node leaves (creating it again finishes it)."""
        topics = [self._new_topic(t) for t in _topic_specs(new_topics)]
        if validate_only:
            return []
        created = []
        for t in topics:
            try:
                # The topic id is picked here so that Ray's rerun of this call on a restarted
                # controller finishes this creation instead of refusing it as a duplicate.
                ref = self._controller.create_topic.remote(t.name, t.num_partitions, t.replication_factor,
                                                           dict(t.topic_configs), topic_id=uuid.uuid4().hex)
                created.append(self._await_creation(ref, t.name, progress))
            except RaylogError:
                if raise_errors:
                    raise
            self._cluster.metadata.invalidate(t.name)
        return created

    def _new_topic(self, t: NewTopic) -> NewTopic:
        """``t`` with the cluster's defaults for -1, validated (nothing reaches the controller otherwise)."""
        cluster = self._cluster.config
        if t.replica_assignments:
            raise InvalidConfigError(f"topic {t.name!r}: replica_assignments are not supported; raylog places "
                                     "replicas (alter_partition_reassignments moves them once created)")
        t = NewTopic(t.name, cluster.num_partitions if t.num_partitions == -1 else t.num_partitions,
                     cluster.default_replication_factor if t.replication_factor == -1 else t.replication_factor,
                     dict(t.topic_configs or {}))
        validate_topic_name(t.name)
        validate_topic_shape(t.num_partitions, t.replication_factor)
        TopicConfig.from_mapping(t.topic_configs)
        return t

    def create_topic(self, name: str, num_partitions: int = 1, replication_factor: int = 1,
                     progress: Callable[[str, int, int], None] | None = None, **topic_configs) -> TopicDescription:
        """Shorthand for one topic: create_topic('events', 3, retention_ms=60000)."""
        return self.create_topics([NewTopic(name, num_partitions, replication_factor, topic_configs)], progress=progress)[0]

    def _await_creation(self, ref, name: str, progress: Callable[[str, int, int], None] | None):
        """The controller's answer to a creation, however long its replicas take to start: the
        controller ends it, on events (every replica answered, or Ray failed one or its node left:
        TopicCreationIncompleteError). A replica start costs 1-2 s of CPU and far more on a loaded
        2-core machine, where a time limit on starts failed creations that were on their way (issue
        33). Progress is reported meanwhile; a controller too busy to answer at once (hundreds of
        replica processes starting on two cores) is asked again, and given CONTROLLER_SILENCE_TIMEOUTS
        timeouts before KafkaTimeoutError."""
        asked, asked_at = None, 0.0
        while True:
            ready, _ = ray.wait([ref], timeout=PROGRESS_INTERVAL_S)
            if ready:
                return self._call(ref)
            now = time.monotonic()
            if asked is None:
                asked, asked_at = self._controller.creation_progress.remote(name), now
            if not ray.wait([asked], timeout=0)[0]:
                if now - asked_at > max(CONTROLLER_SILENCE_TIMEOUTS * self._timeout_s, CONTROLLER_SILENCE_S):
                    raise KafkaTimeoutError(
                        f"topic {name!r}: the controller did not answer for {now - asked_at:.0f} s while its "
                        "replicas started; it goes on creating it, and creating the topic again waits for the rest")
                continue
            try:
                report = self._call(asked)
            except UnknownTopicOrPartitionError:
                report = None  # not recorded yet: validation and placement are still running
            asked = None
            if report is not None and report["total"] and progress is not None:
                progress(name, report["started"], report["total"])

    def delete_topics(self, names: Iterable[str]) -> None:
        for name in names:
            validate_topic_name(name)
            self._call(self._controller.delete_topic.remote(name))
            self._cluster.metadata.invalidate(name)

    def describe_cluster(self) -> dict:
        """The cluster id, where the controller runs (Ray's head node), and every registered node:
        ``node_id`` (raylog's, stable across restarts), ``state`` (``alive``; ``registered``: running,
        replicas still starting; ``missing``: not running, for ``missing_ms``, ``lost`` past
        node_lost_timeout_ms), ``ray_node_id`` this session, ``host``, ``data_dir``, ``draining``, and
        its ``replicas``, ``leaders`` and ``preferred_leaders``; and ``bootstrap_servers``, where Kafka
        clients reach the cluster ("" with the listener off)."""
        return {**self._call(self._controller.describe_cluster.remote()),
                "bootstrap_servers": self._cluster.bootstrap_servers}

    def drain_node(self, node_id: int, cancel: bool = False, timeout_ms: int = 30_000) -> dict:
        """Kafka's controlled shutdown, before stopping a node: leadership moves off it and its
        replicas leave the ISRs (it takes none and joins none until it restarts). A partition whose
        only in-sync replica is there, or whose ISR it cannot leave yet, waits up to ``timeout_ms``
        for another running replica to catch up or come back. Returns ``can_stop`` (it leads
        nothing), ``leaders`` and ``blocked`` (partitions still led there: offline while it is down)
        and ``in_isr``. ``cancel`` ends a drain."""
        if not isinstance(node_id, int) or isinstance(node_id, bool):
            raise InvalidConfigError(f"node_id must be an int (describe_cluster lists them), got {node_id!r}")
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 0:
            raise InvalidConfigError(f"timeout_ms must be an int >= 0, got {timeout_ms!r}")
        return ray_calls.get(self._controller.drain_node.remote(node_id, bool(cancel), timeout_ms),
                             self._timeout_s + timeout_ms / 1000)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, without raylog's internal ones (__consumer_offsets) unless asked, as Kafka's
        Admin.listTopics does."""
        return self._call(self._controller.list_topics.remote(include_internal))

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        names = self.list_topics() if names is None else [validate_topic_name(n) for n in names]
        return [self._call(self._controller.describe_topic.remote(n)) for n in names]

    # --- topic configs (Kafka's DescribeConfigs and (Incremental)AlterConfigs) ----------------------

    def describe_topic_config(self, topic: str) -> list[ConfigEntry]:
        """Every config of ``topic``: its value in Kafka's string form and where it comes from
        (DYNAMIC_TOPIC_CONFIG when set at creation or altered, else DEFAULT_CONFIG). Kafka configs
        raylog does not implement are listed read-only at Kafka's default."""
        answer = self._call(self._controller.topic_config.remote(validate_topic_name(topic)))
        return topic_configs.describe(answer["config"], answer["overrides"])

    def alter_topic_config(self, topic: str, set: Mapping[str, Any] = _NO_CONFIGS, delete: Iterable[str] = (),
                           validate_only: bool = False) -> list[ConfigEntry]:
        """SET the configs in ``set`` and DELETE (return to the default) those named in ``delete``,
        keeping the others (Kafka's IncrementalAlterConfigs). The whole resulting config is validated
        first (InvalidConfigError, nothing applied); with ``validate_only`` nothing is applied either.
        The controller persists the change and the topic's live replicas apply it before this
        returns (replicas that are down get it when they are back). Returns the new entries."""
        return self._alter_config(topic, dict(set), list(delete), validate_only, replace=False)

    def _alter_config(self, topic: str, set_values: dict, delete: list, validate_only: bool, replace: bool
                      ) -> list[ConfigEntry]:
        validate_topic_name(topic)
        _, ignored = split_topic_configs(set_values)  # bad keys and values fail here, before any call
        topic_configs.check_names(delete)
        if ignored:
            logging.getLogger("raylog.config").warning(
                "topic configs %s are Kafka's but raylog does not implement them: accepted and ignored",
                ", ".join(ignored))
        answer = self._call(self._controller.alter_topic_config.remote(topic, set_values, delete, validate_only,
                                                                       replace))
        self._cluster.metadata.invalidate(topic)
        return topic_configs.describe(answer["config"], answer["overrides"])

    def describe_configs(self, config_resources: Iterable[ConfigResource], include_synonyms: bool = False,
                         config_filter: str = "modified") -> dict:
        """kafka-python's describe_configs: {'topic': {name: {key: {'value', 'read_only',
        'config_source', 'is_sensitive', 'synonyms', 'config_type', 'documentation'}}}}. A resource's
        ``configs`` (keys) selects which; None selects all. ``config_filter``: 'modified' (the set
        ones, kafka-python's default), 'dynamic' (the alterable ones), 'default', 'static' (none:
        a topic has no static configs) or 'all'. ``include_synonyms``: topics have none."""
        wanted = str(getattr(config_filter, "name", config_filter)).lower()
        if wanted not in ("all", "dynamic", "modified", "default", "static"):
            raise InvalidConfigError(f"config_filter must be all, dynamic, modified, default or static, "
                                     f"got {config_filter!r}")
        out: dict = {}
        for resource in config_resources:
            name = resource.topic()
            keys = None if resource.configs is None else set(resource.configs)
            described = {}
            for entry in self.describe_topic_config(name):
                modified = entry.source == topic_configs.DYNAMIC_TOPIC_CONFIG
                if (keys is not None and entry.name not in keys) or wanted == "static" \
                        or (wanted == "modified" and not modified) or (wanted == "default" and modified) \
                        or (wanted == "dynamic" and entry.read_only):
                    continue
                described[entry.name] = {
                    "value": entry.value, "read_only": entry.read_only, "config_source": entry.source,
                    "is_sensitive": False, "synonyms": [], "config_type": topic_configs.kafka_type(entry.name),
                    "documentation": entry.documentation}
            out.setdefault("topic", {})[name] = described
        return out

    def alter_configs(self, config_resources: Iterable[ConfigResource], validate_only: bool = False,
                      raise_on_unknown: bool = True, incremental: bool | None = None) -> dict:
        """kafka-python's alter_configs: each resource's ``configs`` is {key: value} or {key: (op,
        value)} with an AlterConfigOp (or its name). Incremental (None or True; kafka-python's choice
        against a Kafka that has IncrementalAlterConfigs): SET/DELETE/APPEND/SUBTRACT those keys and
        keep the rest. ``incremental=False`` is Kafka's legacy AlterConfigs: the given configs
        replace every set one (the others return to their defaults). Returns {'topic': {name: 'OK'
        or the error}}; with ``raise_on_unknown`` an unknown key raises InvalidConfigError first."""
        out: dict = {}
        for resource in config_resources:
            name = resource.topic()
            configs = dict(resource.configs or {})
            if raise_on_unknown:
                topic_configs.check_names(configs)
            try:
                if incremental is False:
                    self._alter_config(name, topic_configs.legacy_values(configs), [], validate_only, replace=True)
                else:
                    current = self._call(self._controller.topic_config.remote(validate_topic_name(name)))["config"]
                    set_values, delete = topic_configs.incremental_ops(configs, current)
                    self._alter_config(name, set_values, delete, validate_only, replace=False)
                result = "OK"
            except RaylogError as exc:
                if exc.retriable:
                    raise
                result = f"{type(exc).__name__}: {exc}"
            out.setdefault("topic", {})[name] = result
        return out

    def incremental_alter_configs(self, config_resources: Iterable[ConfigResource],
                                  validate_only: bool = False) -> dict:
        """Kafka's IncrementalAlterConfigs: alter_configs with ``incremental=True``."""
        return self.alter_configs(config_resources, validate_only, raise_on_unknown=True, incremental=True)

    def reset_configs(self, config_resources: Iterable[ConfigResource], validate_only: bool = False,
                      raise_on_unknown: bool = True, incremental: bool | None = None) -> dict:
        """kafka-python's reset_configs: return the keys in each resource's ``configs`` (a list, or a
        dict whose values are ignored; every set one when empty) to their defaults."""
        resets = []
        for resource in config_resources:
            keys = list(resource.configs or [])
            if not keys:
                keys = [e.name for e in self.describe_topic_config(resource.topic())
                        if e.source == topic_configs.DYNAMIC_TOPIC_CONFIG]
            resets.append(ConfigResource(resource.resource_type, resource.name,
                                         {k: (AlterConfigOp.DELETE, None) for k in keys}))
        return self.alter_configs(resets, validate_only, raise_on_unknown, incremental=True)

    def create_partitions(self, new_totals: Mapping[str, int | NewPartitions], timeout_ms: int | None = None,
                          validate_only: bool = False, raise_errors: bool = True,
                          progress: Callable[[str, int, int], None] | None = None) -> None:
        """Grow each topic to the given partition count, an int or kafka-python's NewPartitions
        (partitions are never removed), waiting as create_topics does."""
        totals = {}
        for name, total in new_totals.items():
            if isinstance(total, NewPartitions):
                if total.new_assignments:
                    raise InvalidConfigError("new_assignments are not supported; raylog places new partitions")
                total = total.total_count
            totals[name] = total
        for name, total in totals.items():
            if not is_count(total):
                raise InvalidPartitionError(f"topic {name!r} cannot grow to {total!r} partitions")
        if validate_only:
            return
        for name, total in totals.items():
            if not is_count(total):
                raise InvalidPartitionError(f"topic {name!r} cannot grow to {total!r} partitions")
            ref = self._controller.create_partitions.remote(validate_topic_name(name), total)
            self._await_creation(ref, name, progress)
            self._cluster.metadata.invalidate(name)

    def describe_partitions(self, topic: str) -> list[dict]:
        """Per partition: leader, replicas (node, alive), ISR, epochs, ``offline`` and
        ``under_replicated``, and the leader replica's own view (ray_node_id, pid, directory, offsets,
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

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, list[int]]) -> dict:
        """Move partitions to the given node ids (describe_cluster's; the first becomes the preferred
        leader). New replicas copy the log and join the ISR before the old ones are dropped."""
        request = {}
        for tp, nodes in reassignments.items():
            if not all(isinstance(n, int) and not isinstance(n, bool) for n in nodes):
                raise InvalidConfigError(f"reassignment of {tp}: node ids are ints (describe_cluster), got {nodes!r}")
            request[(validate_topic_name(tp[0]), int(tp[1]))] = list(nodes)
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
        return {tp: (None if off < 0 else OffsetAndTimestamp(off, ts, epoch)) for tp, (off, ts, epoch) in zip(tps, results)}

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

    # --- Kafka listener users ------------------------------------------------------------------

    def create_user(self, name: str, password: str) -> None:
        """Add a user of the Kafka listener's SASL (PLAIN, SCRAM-SHA-256/512), or change its
        password. Only its SCRAM credentials, computed here, reach the controller."""
        from raylog.kafka.sasl import credentials

        if not isinstance(password, str) or not password:
            raise InvalidConfigError("a user's password is a non-empty string")
        self._call(self._controller.set_user.remote(name, credentials(password)))

    def delete_user(self, name: str) -> None:
        """Remove a user (UnknownUserError if there is none); its connections already open stay."""
        self._call(self._controller.delete_user.remote(name))

    def list_users(self) -> list[dict]:
        """Every user: {"name", "mechanisms", "iterations"}."""
        return self._call(self._controller.list_users.remote())

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

    def reset_consumer_group_offsets(self, group_id: str, topics: Iterable[str | TopicPartition], *,
                                     to: str | None = None, timestamp_ms: int | None = None,
                                     shift_by: int | None = None, offsets: Mapping[TopicPartition, int] | None = None,
                                     dry_run: bool = False) -> dict[TopicPartition, int]:
        """Move a group's committed offsets, as kafka-consumer-groups --reset-offsets: ``to`` "earliest"
        or "latest", a ``timestamp_ms`` (the first offset at or after it, else the end), a
        ``shift_by`` N from the committed offset (clamped to the log), or explicit ``offsets``.
        ``topics`` holds names (every partition) and TopicPartitions (that one). Only while the
        group has no members (NonEmptyGroupError). Returns the new offsets; with ``dry_run`` they
        are computed and nothing is changed."""
        chosen = [x is not None for x in (to, timestamp_ms, shift_by, offsets)]
        if sum(chosen) != 1:
            raise InvalidConfigError("reset_consumer_group_offsets takes exactly one of to, timestamp_ms, shift_by, offsets")
        if to is not None and to not in ("earliest", "latest"):
            raise InvalidConfigError(f"to must be 'earliest' or 'latest', got {to!r}")
        tps = []
        for topic in topics:
            name = topic if isinstance(topic, str) else topic[0]
            n = len(self.describe_topics([validate_topic_name(name)])[0].partitions)
            if isinstance(topic, str):
                tps += [TopicPartition(topic, p) for p in range(n)]
            elif not (isinstance(topic[1], int) and 0 <= topic[1] < n):
                raise UnknownTopicOrPartitionError(f"topic {name!r} has no partition {topic[1]!r} ({n} partitions)")
            else:
                tps.append(TopicPartition(name, topic[1]))
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
        if not dry_run:
            payload = [[tp.topic, tp.partition, o] for tp, o in target.items()]
            self._call(self._coordinator(group_id).reset_offsets.remote(group_id, payload))
        return target

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups and their committed offsets; only groups with no members (NonEmptyGroupError)."""
        for g in group_ids:
            self._call(self._coordinator(g).delete_group.remote(g))

    # --- kafka-python 3.x names ---------------------------------------------------------------

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, None]:
        """kafka-python 3.x's delete_consumer_groups: {group_id: None} once deleted."""
        group_ids = list(group_ids)
        self.delete_consumer_groups(group_ids)
        return {g: None for g in group_ids}

    def list_groups(self, broker_ids=None, states_filter: Iterable[str] | None = None,
                    types_filter=None) -> list[dict]:
        """kafka-python 3.x: every group as {group_id, group_state, group_type ('consumer'),
        protocol_type ('consumer'), member_count}; ``states_filter`` keeps the given states
        (case-insensitive)."""
        def folded(state) -> str:
            return str(state).lower().replace("_", "").replace("-", "")

        wanted = None if states_filter is None else {folded(s) for s in states_filter}
        out = []
        for g in self.list_consumer_groups():
            state = str(g.get("state", ""))
            if wanted is not None and folded(state) not in wanted:
                continue
            out.append({**g, "group_state": state, "group_type": "consumer", "protocol_type": "consumer"})
        return out

    def describe_groups(self, group_ids: Iterable[str], group_coordinator_id=None,
                        include_authorized_operations: bool = False) -> dict[str, dict]:
        """kafka-python 3.x: {group_id: description} (describe_consumer_groups' dicts)."""
        group_ids = list(group_ids)
        return dict(zip(group_ids, self.describe_consumer_groups(group_ids)))

    def list_group_offsets(self, group_specs) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """kafka-python 3.x: committed offsets of several groups; ``group_specs`` is a group id, a
        list of them, or {group_id: [TopicPartition, ...] or None (all)}."""
        if isinstance(group_specs, str):
            group_specs = {group_specs: None}
        elif not isinstance(group_specs, Mapping):
            group_specs = {g: None for g in group_specs}
        return {g: self.list_consumer_group_offsets(g, parts) for g, parts in group_specs.items()}

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                            group_coordinator_id=None) -> dict[TopicPartition, None]:
        """kafka-python 3.x: set a group's committed offsets (only while it has no members:
        NonEmptyGroupError). Returns {TopicPartition: None} (kafka-python's NoError)."""
        target = {}
        for tp, value in offsets.items():
            offset = value.offset if isinstance(value, OffsetAndMetadata) else value
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise InvalidOffsetError(f"offset for {tp} must be an int >= 0, got {value!r}")
            target[TopicPartition(*tp)] = offset
        self._call(self._coordinator(group_id).reset_offsets.remote(
            group_id, [[tp.topic, tp.partition, o] for tp, o in target.items()]))
        return {tp: None for tp in target}

    def reset_group_offsets(self, group_id: str, offset_specs: Mapping[TopicPartition, int],
                            group_coordinator_id=None) -> dict[TopicPartition, dict]:
        """kafka-python 3.x: per partition an OffsetSpec (EARLIEST, LATEST), an OffsetTimestamp (the
        first offset at or after it, else the end) or an int offset, clamped to the log; only while
        the group has no members. Returns {TopicPartition: {'error': None, 'offset': committed}}."""
        specs = {TopicPartition(*tp): spec for tp, spec in offset_specs.items()}
        resolved = self.list_partition_offsets(
            {tp: spec for tp, spec in specs.items() if isinstance(spec, (OffsetSpec, OffsetTimestamp))})
        starts, ends = self.beginning_offsets(specs), self.end_offsets(specs)
        target = {}
        for tp, spec in specs.items():
            if isinstance(spec, (OffsetSpec, OffsetTimestamp)):
                found = resolved.get(tp)
                offset = ends[tp] if found is None else found.offset
            elif isinstance(spec, int) and not isinstance(spec, bool):
                offset = spec
            else:
                raise InvalidOffsetError(f"offset spec for {tp} must be an OffsetSpec, OffsetTimestamp or int, got {spec!r}")
            target[tp] = min(max(offset, starts[tp]), ends[tp])
        self.alter_group_offsets(group_id, target)
        return {tp: {"error": None, "offset": o} for tp, o in target.items()}

    def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition],
                             group_coordinator_id=None) -> dict[TopicPartition, None]:
        """kafka-python 3.x: delete a group's committed offsets of these partitions (only while it
        has no members). Returns {TopicPartition: None}."""
        tps = [TopicPartition(*tp) for tp in partitions]
        self._call(self._coordinator(group_id).reset_offsets.remote(
            group_id, [[tp.topic, tp.partition, None] for tp in tps]))
        return {tp: None for tp in tps}

    def list_partition_offsets(self, topic_partition_specs: Mapping[TopicPartition, int],
                               isolation_level: str = "read_uncommitted",
                               timeout_ms: int | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """kafka-python 3.x's list_offsets: per partition an OffsetSpec (EARLIEST, LATEST) or a time
        in ms (OffsetTimestamp or int). None where no record is that recent."""
        if str(getattr(isolation_level, "name", isolation_level)).lower() not in ("read_uncommitted", "0"):
            raise InvalidConfigError("isolation_level must be read_uncommitted (raylog has no transactions yet)")
        return self.list_offsets({TopicPartition(*tp): int(spec) for tp, spec in topic_partition_specs.items()})

    def close(self) -> None:
        """Nothing to release: the admin client holds only handles."""


def _topic_specs(new_topics) -> list[NewTopic]:
    """kafka-python 3.x's create_topics argument as NewTopics."""
    if isinstance(new_topics, (str, NewTopic)):
        new_topics = [new_topics]
    if isinstance(new_topics, Mapping):
        out = []
        for name, options in new_topics.items():
            options = dict(options or {})
            unknown = set(options) - {"num_partitions", "replication_factor", "assignments", "configs"}
            if unknown:
                raise InvalidConfigError(f"topic {name!r}: unknown create_topics options {sorted(unknown)}")
            out.append(NewTopic(name, options.get("num_partitions", -1), options.get("replication_factor", -1),
                                options.get("configs") or {}, options.get("assignments")))
        return out
    return [NewTopic(t, -1, -1) if isinstance(t, str) else t for t in new_topics]
