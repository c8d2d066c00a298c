"""Pure cluster metadata: topics, their configs, and each partition's replicas, leader, epochs and ISR.

A state machine in the shape of Kafka's coordinator shards (and of its KRaft
controller): each handler validates a request against the current state and
returns the records that express the change plus the response; the state
changes only in ``replay``, which is also how a restarted controller rebuilds
it from its metadata log. No Ray and no I/O; liveness (which replicas and
nodes are up) is soft state the actor shell passes in.

Records are plain dicts (msgpack-able):

    {"type": "topic_created", "name", "topic_id", "config", "partitions": [partition, ...]}
    {"type": "partitions_added", "name", "partitions": [partition, ...]}
    {"type": "partition_changed", "name", "partition", "state": partition}
    {"type": "topic_deleted", "name", "topic_id", "pending": [[partition, replica], ...]}
    {"type": "replica_deleted", "topic_id", "partition", "replica_id"}
    {"type": "topic_config_altered", "name", "topic_id", "config", "overrides": [field, ...]}

where a partition is ``{"replicas": [replica, ...], "leader", "leader_epoch",
"partition_epoch", "isr": [replica ids], "adding": [...], "removing": [...]}``
and a replica is ``{"replica_id", "node_id", "directory"}``. A partition's
first replica is its preferred leader. ``partition_changed`` carries the whole
partition (Kafka's PartitionChangeRecord carries only what changed; a whole
state is simpler to replay and a partition is small). ``topic_deleted`` keeps
the replicas whose node was down, so their files are removed when the node is
back (``replica_deleted`` closes each). ``config`` is always the topic's whole TopicConfig (as a
dict of fields) and ``overrides`` the fields that were set (at creation or by an alteration; the
rest are defaults, which DELETE of a config returns to); ``topic_created`` records written before
raylog kept ``overrides`` count every field that differs from its default as set.

Epochs, as Kafka's: ``leader_epoch`` is bumped by every leader change (and by
an unclean election), ``partition_epoch`` by every change of the partition
(ISR, replicas, leader). A leader's ISR proposal names the epochs it holds and
is refused if either is stale: a leader that was replaced (a zombie on a lost
node) can never change the ISR.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from raylog import topic_configs
from raylog.config import TopicConfig, default_min_insync_replicas, split_topic_configs
from raylog.errors import (
    FencedLeaderEpochError, InvalidConfigError, InvalidPartitionError, InvalidReplicationFactorError,
    TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)
from raylog.naming import partition_path, validate_topic_name, validate_topic_shape

NO_LEADER = -1

Placer = Callable[[int, int, int], list[list[tuple[str, str]]]]
"""place(count, first_partition, replication_factor) -> per new partition, (node_id, node data dir)
per replica, the preferred leader first."""


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: str
    config: dict
    partitions: list[dict] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    """The config fields this topic sets; the others are defaults (topic_configs.describe)."""
    config_version: int = 0
    """How many alterations the config had: replicas keep the newest version they were told."""


def _partition(placement: list[tuple[str, str]], name: str, topic_id: str, index: int) -> dict:
    replicas = [{"replica_id": r, "node_id": node, "directory": partition_path(root, name, topic_id, index)}
                for r, (node, root) in enumerate(placement)]
    ids = [r["replica_id"] for r in replicas]
    return {"replicas": replicas, "leader": ids[0], "leader_epoch": 0, "partition_epoch": 0, "isr": ids,
            "adding": [], "removing": []}


def replica_ids(partition: dict) -> list[int]:
    return [r["replica_id"] for r in partition["replicas"]]


def replica_of(partition: dict, replica_id: int) -> dict:
    for r in partition["replicas"]:
        if r["replica_id"] == replica_id:
            return r
    raise KeyError(replica_id)


class ControllerState:
    def __init__(self) -> None:
        self.topics: dict[str, TopicState] = {}
        self.pending_deletions: dict[tuple[str, int, int], dict] = {}
        """(topic_id, partition, replica_id) -> replica, for replicas of deleted topics whose files
        are still on a node that was down at deletion."""

    # --- topics -----------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, config: dict, topic_id: str,
                     place: Placer) -> tuple[list[dict], str]:
        """``place`` is called only once the request is valid."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        validate_topic_shape(num_partitions, replication_factor)
        cfg = TopicConfig.from_mapping(config)
        overrides, _ = split_topic_configs(config)
        if "min_insync_replicas" not in overrides:
            cfg = dataclasses.replace(cfg, min_insync_replicas=default_min_insync_replicas(replication_factor))
        if cfg.min_insync_replicas > replication_factor:
            raise InvalidConfigError(f"min_insync_replicas {cfg.min_insync_replicas} is above the replication "
                                     f"factor {replication_factor}: acks='all' could never succeed")
        placement = place(num_partitions, 0, replication_factor)
        if len(placement) != num_partitions or any(len(p) != replication_factor for p in placement):
            raise InvalidConfigError("placement must name a node per replica of every partition")
        record = {"type": "topic_created", "name": name, "topic_id": topic_id, "config": cfg.to_dict(),
                  "overrides": sorted(overrides),
                  "partitions": [_partition(p, name, topic_id, i) for i, p in enumerate(placement)]}
        return [record], name

    def alter_topic_config(self, name: str, set_values: dict, delete: list, replace: bool = False
                           ) -> tuple[list[dict], topic_configs.Alteration]:
        """SET ``set_values`` and DELETE (back to the default) ``delete`` in a topic's config; with
        ``replace``, every set config not given returns to its default (Kafka's legacy AlterConfigs).
        The whole new config is validated first: InvalidConfigError, and no record. No record either
        when nothing changes."""
        topic = self.topic(name)
        rf = topic_configs.replication_factor_of(topic.partitions)
        altered = topic_configs.alter(topic.config, topic.overrides, rf, set_values, delete, replace)
        config = altered.config.to_dict()
        if config == topic.config and list(altered.overrides) == sorted(topic.overrides):
            return [], altered
        record = {"type": "topic_config_altered", "name": name, "topic_id": topic.topic_id, "config": config,
                  "overrides": list(altered.overrides)}
        return [record], altered

    def create_partitions(self, name: str, total: int, place: Placer) -> tuple[list[dict], int]:
        topic = self.topic(name)
        current = len(topic.partitions)
        if not isinstance(total, int) or isinstance(total, bool) or total <= current:
            raise InvalidPartitionError(f"topic {name!r} has {current} partitions; {total!r} does not add any")
        rf = len(topic.partitions[0]["replicas"])
        placement = place(total - current, current, rf)
        record = {"type": "partitions_added", "name": name,
                  "partitions": [_partition(p, name, topic.topic_id, current + i) for i, p in enumerate(placement)]}
        return [record], total

    def delete_topic(self, name: str, unreachable: Callable[[dict], bool]) -> tuple[list[dict], TopicState]:
        """``unreachable(replica)`` says which replicas cannot delete their files now."""
        topic = self.topic(name)
        pending = [[p, r] for p, part in enumerate(topic.partitions) for r in part["replicas"] if unreachable(r)]
        return [{"type": "topic_deleted", "name": name, "topic_id": topic.topic_id, "pending": pending}], topic

    def replica_deleted(self, topic_id: str, partition: int, replica_id: int) -> list[dict]:
        if (topic_id, partition, replica_id) not in self.pending_deletions:
            return []
        return [{"type": "replica_deleted", "topic_id": topic_id, "partition": partition, "replica_id": replica_id}]

    # --- partitions -------------------------------------------------------------------------

    def partition(self, name: str, partition: int) -> dict:
        topic = self.topic(name)
        if not isinstance(partition, int) or not 0 <= partition < len(topic.partitions):
            raise InvalidPartitionError(
                f"topic {name!r} has partitions 0..{len(topic.partitions) - 1}, not {partition!r}")
        return topic.partitions[partition]

    def _changed(self, name: str, partition: int, state: dict) -> dict:
        return {"type": "partition_changed", "name": name, "partition": partition, "state": state}

    def alter_isr(self, name: str, partition: int, leader_id: int, leader_epoch: int, partition_epoch: int,
                  new_isr: Iterable[int], alive: Callable[[int], bool]) -> tuple[list[dict], dict]:
        """A leader's ISR proposal (Kafka's AlterPartition). Refused with FencedLeaderEpochError
        when the proposer is not the current leader at the current epochs. Completes a
        reassignment whose new replicas are all in the new ISR."""
        part = self.partition(name, partition)
        if (part["leader"], part["leader_epoch"], part["partition_epoch"]) != (leader_id, leader_epoch, partition_epoch):
            raise FencedLeaderEpochError(
                f"{name}-{partition}: ISR change from replica {leader_id} at leader epoch {leader_epoch}, partition "
                f"epoch {partition_epoch} is stale (leader {part['leader']}, epochs {part['leader_epoch']}/"
                f"{part['partition_epoch']})")
        ids = set(replica_ids(part))
        isr = sorted(set(new_isr) & ids | {leader_id})
        state = copy.deepcopy(part)
        state["isr"] = isr
        state["partition_epoch"] += 1
        if state["adding"] and set(state["adding"]) <= set(isr):
            state = self._complete_reassignment(state, alive)
        return [self._changed(name, partition, state)], state

    def _complete_reassignment(self, state: dict, alive: Callable[[int], bool]) -> dict:
        removing = set(state["removing"])
        state["replicas"] = [r for r in state["replicas"] if r["replica_id"] not in removing]
        state["isr"] = [r for r in state["isr"] if r not in removing]
        state["adding"], state["removing"] = [], []
        if state["leader"] in removing:
            leader = next((r for r in replica_ids(state) if r in state["isr"] and alive(r)), NO_LEADER)
            state["leader"] = leader
            state["leader_epoch"] += 1
        return state

    def elect_leader(self, name: str, partition: int, alive: Callable[[int], bool], unclean: bool,
                     preferred: bool = False) -> tuple[list[dict], dict | None]:
        """Elect the first live ISR member in replica order (the preferred replica only, with
        ``preferred``). With no live ISR member: the first live replica if ``unclean``, else the
        partition goes offline (leader -1). Returns no records when nothing changes."""
        part = self.partition(name, partition)
        order = replica_ids(part)
        if preferred:
            candidates = [order[0]] if order[0] in part["isr"] and alive(order[0]) else []
        else:
            candidates = [r for r in order if r in part["isr"] and alive(r)]
        state = copy.deepcopy(part)
        if candidates:
            leader = candidates[0]
        elif preferred:
            return [], None
        elif unclean:
            live = [r for r in order if alive(r)]
            if not live:
                leader = NO_LEADER
            else:
                leader = live[0]
                state["isr"] = [leader]  # its log is the truth now; the others truncate to it
        else:
            leader = NO_LEADER
        if leader == part["leader"] and (leader == NO_LEADER or alive(leader)):
            return [], None
        state["leader"] = leader
        state["leader_epoch"] += 1
        state["partition_epoch"] += 1
        return [self._changed(name, partition, state)], state

    def replicas_lost(self, name: str, partition: int, lost: set[int], alive: Callable[[int], bool],
                      unclean: bool) -> tuple[list[dict], dict | None]:
        """Replicas died (their actor or node): they leave the ISR at once (so acks='all' does
        not wait replica_lag_time_max_ms for them), and a new leader is elected if the leader
        was among them. The ISR keeps at least its last member, as Kafka's ELR does, so a
        partition whose every replica died elects that member cleanly when it returns."""
        part = self.partition(name, partition)
        isr = [r for r in part["isr"] if r not in lost] or part["isr"][:1]
        state = copy.deepcopy(part)
        changed = isr != part["isr"]
        state["isr"] = isr
        if part["leader"] in lost or part["leader"] == NO_LEADER:
            order = replica_ids(part)
            candidates = [r for r in order if r in isr and alive(r)]
            if candidates:
                leader = candidates[0]
            elif unclean and any(alive(r) for r in order):
                leader = next(r for r in order if alive(r))
                state["isr"] = [leader]
            else:
                leader = NO_LEADER
            if leader != part["leader"]:
                state["leader"] = leader
                state["leader_epoch"] += 1
                changed = True
        if not changed:
            return [], None
        state["partition_epoch"] += 1
        return [self._changed(name, partition, state)], state

    def reassign(self, name: str, partition: int, target: list[tuple[str, str]]) -> tuple[list[dict], dict]:
        """Move the partition to ``target`` nodes (the first preferred): new replicas are added
        and catch up; the old ones go once every new one is in the ISR (Kafka's KIP-455)."""
        part = self.partition(name, partition)
        if part["adding"]:
            raise InvalidConfigError(f"{name}-{partition} is already being reassigned")
        nodes = [node for node, _ in target]
        if len(set(nodes)) != len(nodes) or not nodes:
            raise InvalidReplicationFactorError(f"a reassignment needs distinct nodes, got {nodes}")
        by_node = {r["node_id"]: r for r in part["replicas"]}
        next_id = max(replica_ids(part)) + 1
        state = copy.deepcopy(part)
        new_replicas, adding = [], []
        for node, root in target:
            if node in by_node:
                new_replicas.append(by_node[node])
            else:
                replica = {"replica_id": next_id, "node_id": node,
                           "directory": partition_path(root, name, self.topics[name].topic_id, partition)}
                next_id += 1
                new_replicas.append(replica)
                adding.append(replica["replica_id"])
        kept = {r["replica_id"] for r in new_replicas}
        removing = [r for r in replica_ids(part) if r not in kept]
        # While moving, the replica set is target + old leavers, target order first (KIP-455).
        state["replicas"] = new_replicas + [r for r in part["replicas"] if r["replica_id"] in removing]
        state["adding"], state["removing"] = adding, removing
        state["partition_epoch"] += 1
        if not adding:
            state = self._complete_reassignment(state, lambda r: True)
        return [self._changed(name, partition, state)], state

    # --- state changes ------------------------------------------------------------------------

    def replay(self, record: dict) -> None:
        kind = record["type"]
        if kind == "topic_created":
            partitions = [dict(p) for p in record["partitions"]]
            overrides = record.get("overrides")
            if overrides is None:
                overrides = topic_configs.overrides_of(record["config"], topic_configs.replication_factor_of(partitions))
            self.topics[record["name"]] = TopicState(record["name"], record["topic_id"], record["config"],
                                                     partitions, list(overrides))
        elif kind == "topic_config_altered":
            topic = self.topics[record["name"]]
            topic.config = dict(record["config"])
            topic.overrides = list(record["overrides"])
            topic.config_version += 1
        elif kind == "partitions_added":
            self.topics[record["name"]].partitions.extend(dict(p) for p in record["partitions"])
        elif kind == "partition_changed":
            self.topics[record["name"]].partitions[record["partition"]] = dict(record["state"])
        elif kind == "topic_deleted":
            self.topics.pop(record["name"], None)
            for p, replica in record["pending"]:
                self.pending_deletions[(record["topic_id"], p, replica["replica_id"])] = {**replica,
                                                                                        "topic": record["name"]}
        elif kind == "replica_deleted":
            self.pending_deletions.pop((record["topic_id"], record["partition"], record["replica_id"]), None)
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")

    # --- queries --------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicState:
        validate_topic_name(name)
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None

    def replica_load(self) -> tuple[Counter, Counter]:
        """(replicas per node, leaders per node), for placement's spreading."""
        replicas, leaders = Counter(), Counter()
        for t in self.topics.values():
            for part in t.partitions:
                for r in part["replicas"]:
                    replicas[r["node_id"]] += 1
                leaders[part["replicas"][0]["node_id"]] += 1
        return replicas, leaders
