"""Controller: the one detached, named actor that owns raylog's cluster metadata.

It keeps ControllerState (topics, configs, each partition's replicas) in a
metadata log on its node's disk: a raylog PartitionLog of msgpack records,
flushed on every record. A change is written to that log before it takes
effect (replay, then replica actors are created), so a controller that dies at
any point comes back, replays the log and finishes the job: it finds each
replica actor by name and recreates any that is missing.

Ray restarts the controller itself (max_restarts=-1) on the node it is pinned
to; raylog.connect() starts a new one if none is running.
"""

from __future__ import annotations

import os
import time

import msgpack
import ray

from actors.controller_state import ControllerState, TopicState
from actors.replica import PartitionReplica
from placement import nodes as placement_nodes
from placement.policy import assign_replicas
from raylog.config import ClusterConfig, TopicConfig
from raylog.errors import InvalidReplicationFactorError, KafkaTimeoutError
from raylog.naming import replica_actor_name
from raylog.protocol import PartitionInfo, ReplicaAssignment, TopicDescription
from raylog.storage import batch as record_batch
from raylog.storage.log import PartitionLog

METADATA_LOG_CONFIG = TopicConfig(flush_messages=1, retention_ms=-1, segment_bytes=64 * 1024 * 1024,
                                  segment_index_bytes=1024 * 1024)
"""The metadata log keeps everything (no retention) and fsyncs each record: changes are rare and
must survive a power loss of the controller's node."""


class Controller:
    def __init__(self, cluster_config: dict):
        self.config = ClusterConfig(**cluster_config)
        self.namespace = self.config.namespace
        root = os.path.expanduser(self.config.data_root)
        self.metadata_log = PartitionLog(os.path.join(root, "controller", "__cluster_metadata-0"),
                                         METADATA_LOG_CONFIG)
        self.state = ControllerState()
        for record in self._read_metadata_log():
            self.state.replay(record)
        self.handles: dict[str, ray.actor.ActorHandle] = {}
        for topic in self.state.topics.values():
            self._ensure_replicas(topic, range(len(topic.partitions)))

    # --- metadata log --------------------------------------------------------------------

    def _read_metadata_log(self):
        offset = self.metadata_log.log_start_offset
        while offset < self.metadata_log.log_end_offset:
            data = self.metadata_log.read(offset, 1 << 20)
            for batch in record_batch.iter_batches(data):
                cols = batch.columns()
                for off, value in zip(batch.offsets(cols).tolist(), cols.values.to_pylist()):
                    if off >= offset:
                        yield msgpack.unpackb(value, raw=False)
                offset = batch.next_offset

    def _commit(self, records: list[dict]) -> None:
        """Persist, then apply: the log is the truth a restarted controller replays."""
        values = [msgpack.packb(r, use_bin_type=True) for r in records]
        self.metadata_log.append(record_batch.build(values, timestamps_ms=int(time.time() * 1000),
                                                    compression="none"))
        for r in records:
            self.state.replay(r)

    # --- replicas ---------------------------------------------------------------------------

    def _ensure_replicas(self, topic: TopicState, partitions) -> list:
        """Find each partition's leader actor by name, creating it if it is gone."""
        created = []
        for p in partitions:
            leader = topic.partitions[p][0]
            name = replica_actor_name(topic.name, p, leader["replica_id"])
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                options = placement_nodes.replica_actor_options(
                    leader["node_id"], name, self.namespace, self.config.replica_max_restarts)
                handle = ray.remote(PartitionReplica).options(**options).remote(
                    topic.name, p, leader["replica_id"], leader["directory"], topic.config,
                    topic.leader_epochs[p])
                created.append(handle)
            self.handles[name] = handle
        return created

    def _wait_ready(self, handles: list) -> None:
        try:
            ray.get([h.ping.remote() for h in handles], timeout=self.config.request_timeout_ms / 1000)
        except ray.exceptions.GetTimeoutError:
            raise KafkaTimeoutError(
                f"{len(handles)} replica actors did not start within {self.config.request_timeout_ms} ms") from None

    def _placement(self, num_partitions: int, replication_factor: int, first: int) -> list[list[tuple[str, str]]]:
        if replication_factor != 1:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor}: this raylog release stores one replica per partition")
        node_ids = [n.node_id for n in placement_nodes.alive_nodes()]
        plan = assign_replicas(num_partitions, replication_factor, node_ids, self.state.replica_load(), first)
        return [[(n, placement_nodes.node_data_dir(self.config.data_root, n)) for n in replicas]
                for replicas in plan]

    # --- requests -----------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None) -> TopicDescription:
        records, _ = self.state.create_topic(
            name, num_partitions, config or {},
            lambda count, first: self._placement(count, replication_factor, first))
        self._commit(records)
        topic = self.state.topic(name)
        self._wait_ready(self._ensure_replicas(topic, range(num_partitions)))
        return self._describe(topic)

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        topic = self.state.topic(name)
        current = len(topic.partitions)
        records, _ = self.state.create_partitions(
            name, total, lambda count, first: self._placement(count, 1, first))
        self._commit(records)
        self._wait_ready(self._ensure_replicas(topic, range(current, total)))
        return self._describe(topic)

    def delete_topic(self, name: str) -> None:
        records, topic = self.state.delete_topic(name)
        self._commit(records)
        for p, replicas in enumerate(topic.partitions):
            for r in replicas:
                actor_name = replica_actor_name(name, p, r["replica_id"])
                handle = self.handles.pop(actor_name, None)
                if handle is None:
                    continue
                try:
                    ray.get(handle.delete_data.remote(), timeout=self.config.request_timeout_ms / 1000)
                except Exception:  # noqa: BLE001 - a dead replica's files are left for an operator
                    pass
                ray.kill(handle, no_restart=True)

    def list_topics(self) -> list[str]:
        return sorted(self.state.topics)

    def describe_topic(self, name: str) -> TopicDescription:
        return self._describe(self.state.topic(name))

    def topic_metadata(self, name: str) -> tuple[TopicDescription, list]:
        """The topic's description and each partition's leader handle, in partition order."""
        topic = self.state.topic(name)
        self._ensure_replicas(topic, range(len(topic.partitions)))
        handles = [self.handles[replica_actor_name(name, p, reps[0]["replica_id"])]
                   for p, reps in enumerate(topic.partitions)]
        return self._describe(topic), handles

    def cluster_config(self) -> dict:
        return {"namespace": self.config.namespace, "data_root": self.config.data_root,
                "replica_max_restarts": self.config.replica_max_restarts,
                "request_timeout_ms": self.config.request_timeout_ms}

    def ping(self) -> int:
        return os.getpid()

    def _describe(self, topic: TopicState) -> TopicDescription:
        parts = []
        for p, replicas in enumerate(topic.partitions):
            assigned = tuple(ReplicaAssignment(r["node_id"], r["directory"], r["replica_id"]) for r in replicas)
            parts.append(PartitionInfo(topic.name, p, assigned[0], assigned, topic.leader_epochs[p],
                                       replica_actor_name(topic.name, p, replicas[0]["replica_id"])))
        return TopicDescription(topic.name, tuple(parts), dict(topic.config))
