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
    {"type": "cluster_created", "cluster_id", "head_node_id"}
    {"type": "node_registered", "node_id", "host", "data_dir"}
    {"type": "node_draining", "node_id", "draining", "session"}
    {"type": "replica_removal_pending", "topic", "topic_id", "partition", "replica"}
    {"type": "legacy_node_adopted", "legacy_node_id", "node_id", "directories": {old: new}}
    {"type": "user_set", "name", "credentials": {mechanism: {salt, stored_key, server_key, iterations}}}
    {"type": "user_deleted", "name"}

where a partition is ``{"replicas": [replica, ...], "leader", "leader_epoch",
"partition_epoch", "isr": [replica ids], "elr": [replica ids], "adding": [...], "removing": [...]}``
(``elr``, KIP-966's eligible leader replicas, is missing from records written before it: empty)
and a replica is ``{"replica_id", "node_id", "directory"}``: ``node_id`` is the raylog node id
(an int that names the node's data directory for good, node_meta.py), ``directory`` the
partition's directory relative to that node's data directory. A partition's
first replica is its preferred leader.

Nodes: ``cluster_created`` is the log's first record (the cluster id every node's
meta.properties must carry, and the node whose data directory holds this log);
``node_registered`` is written when a data directory first joins and whenever its host or
path changed; ``node_draining`` marks a node being drained (Kafka's controlled shutdown)
until it restarts, that is registers from another Ray node id than ``session``. ``replica_removal_pending`` keeps a replica that a reassignment dropped
while its node was missing, so its files are removed when the node is back.
``legacy_node_adopted`` moves the replicas a data root written before node identity named by
a Ray node id (and an absolute directory) to the node whose data directory holds them. ``partition_changed`` carries the whole
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
    TopicAlreadyExistsError, UnknownTopicOrPartitionError, UnknownUserError,
)
from raylog.naming import partition_path, validate_topic_name, validate_topic_shape

NO_LEADER = -1

Placer = Callable[[int, int, int], list[list[int]]]
"""place(count, first_partition, replication_factor) -> per new partition, a node id per replica,
the preferred leader first."""


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
    ever_compacted: bool = False
    """Whether its cleanup policy ever included compact: its logs may have offset gaps even after
    the policy went back to delete (COUNT(*) from offsets would count records that are gone)."""


def _partition(placement: list[int], name: str, topic_id: str, index: int) -> dict:
    replicas = [{"replica_id": r, "node_id": node, "directory": partition_path(name, topic_id, index)}
                for r, node in enumerate(placement)]
    ids = [r["replica_id"] for r in replicas]
    return {"replicas": replicas, "leader": ids[0], "leader_epoch": 0, "partition_epoch": 0, "isr": ids,
            "elr": [], "adding": [], "removing": []}


def _compacts(config: dict) -> bool:
    return config.get("cleanup_policy") == "compact"


def replica_ids(partition: dict) -> list[int]:
    return [r["replica_id"] for r in partition["replicas"]]


def replica_of(partition: dict, replica_id: int) -> dict:
    for r in partition["replicas"]:
        if r["replica_id"] == replica_id:
            return r
    raise KeyError(replica_id)


@dataclass(slots=True)
class NodeState:
    """A registered node, as the metadata log knows it (liveness is the actor shell's soft state)."""

    node_id: int
    host: str = ""
    """The address it last registered from."""
    data_dir: str = ""
    """Where its data directory was mounted when it last registered."""
    draining: bool = False
    """Being drained (``drain_node``): no leadership, no new replicas, not added to ISRs, until the
    node restarts (registers from a new Ray session)."""
    drained_session: str = ""
    """The Ray node id the node ran on when it was drained: a registration from another one is its restart."""


def _legacy_relative(directory: str) -> str | None:
    """``node-<id>/<topic id>/<topic>-<p>`` of a directory written before node identity, or None."""
    parts = directory.replace("\\", "/").rstrip("/").split("/")
    if len(parts) < 3 or not parts[-3].startswith("node-"):
        return None
    return "/".join(parts[-3:])


class ControllerState:
    def __init__(self) -> None:
        self.topics: dict[str, TopicState] = {}
        self.pending_deletions: dict[tuple[str, int, int], dict] = {}
        """(topic_id, partition, replica_id) -> replica, for replicas whose files are still on a node
        that was down when they were dropped (their topic deleted, or reassigned away)."""
        self.cluster_id: str | None = None
        self.head_node_id: int | None = None
        """The node whose data directory holds the metadata log."""
        self.nodes: dict[int, NodeState] = {}
        self.users: dict[str, dict] = {}
        """Kafka listener users: name -> SCRAM credentials (raylog/kafka/sasl.py); no passwords."""

    # --- users ------------------------------------------------------------------------------

    def set_user(self, name: str, credentials: dict) -> list[dict]:
        """Add a user or replace its credentials."""
        return [{"type": "user_set", "name": name, "credentials": credentials}]

    def delete_user(self, name: str) -> list[dict]:
        if name not in self.users:
            raise UnknownUserError(f"no user {name!r} (users: {sorted(self.users)})")
        return [{"type": "user_deleted", "name": name}]

    # --- nodes ------------------------------------------------------------------------------

    def create_cluster(self, cluster_id: str, head_node_id: int, host: str, data_dir: str) -> list[dict]:
        """The first records of a new cluster's metadata log."""
        if self.cluster_id is not None:
            raise InvalidConfigError(f"the metadata log already belongs to cluster {self.cluster_id}")
        return [{"type": "cluster_created", "cluster_id": cluster_id, "head_node_id": head_node_id},
                *self.register_node(head_node_id, host, data_dir)]

    def next_node_id(self) -> int:
        """The id a new data directory gets: one above every node id ever registered (ids are never reused)."""
        return max(self.nodes, default=-1) + 1

    def register_node(self, node_id: int, host: str, data_dir: str) -> list[dict]:
        """A node registered: a record for a new node, or for a known one whose host or directory
        moved (none when nothing changed)."""
        known = self.nodes.get(node_id)
        if known is not None and (known.host, known.data_dir) == (host, data_dir):
            return []
        return [{"type": "node_registered", "node_id": node_id, "host": host, "data_dir": data_dir}]

    def set_draining(self, node_id: int, draining: bool, session: str = "") -> list[dict]:
        """Start (``session``: the Ray node id it runs on now) or end a node's drain."""
        node = self.nodes.get(node_id)
        if node is None:
            raise InvalidConfigError(f"node {node_id} is not registered (nodes: {sorted(self.nodes)})")
        if node.draining == draining and (not draining or node.drained_session == session):
            return []
        return [{"type": "node_draining", "node_id": node_id, "draining": draining, "session": session}]

    def restarted(self, node_id: int, session: str) -> list[dict]:
        """A node registered from the Ray node ``session``: a drain from an earlier session is over."""
        node = self.nodes.get(node_id)
        if node is None or not node.draining or node.drained_session == session:
            return []
        return self.set_draining(node_id, False)

    def draining_nodes(self) -> set[int]:
        return {n for n, node in self.nodes.items() if node.draining}

    def _eligible(self, part: dict) -> Callable[[int], bool]:
        """Whether a replica may lead or join the ISR: not on a draining node (KIP-841)."""
        draining = self.draining_nodes()
        nodes = {r["replica_id"]: r["node_id"] for r in part["replicas"]}
        return lambda rid: nodes.get(rid) not in draining

    def ineligible(self, part: dict) -> list[int]:
        """The replicas of ``part`` that ``_eligible`` refuses now: leaders are told, so they do not
        propose them into the ISR."""
        eligible = self._eligible(part)
        return [r for r in replica_ids(part) if not eligible(r)]

    def adopt_legacy_nodes(self, head_node_id: int, exists: Callable[[str], bool]) -> list[dict]:
        """Records moving the replicas of a data root written before node identity (named by Ray node
        ids, with absolute directories ``.../node-<id>/<topic id>/<topic>-<p>``) to the head node,
        for each such node whose every partition directory ``exists`` under the head's data
        directory (given relative to it) and where no partition would get two replicas on the head.
        What is not adopted stays named by its Ray node id: offline until an operator moves it."""
        legacy: dict[str, list[dict]] = {}
        for topic in self.topics.values():
            for part in topic.partitions:
                for r in part["replicas"]:
                    if isinstance(r["node_id"], str):
                        legacy.setdefault(r["node_id"], []).append(r)
        for replica in self.pending_deletions.values():
            if isinstance(replica["node_id"], str):
                legacy.setdefault(replica["node_id"], [])
        records = []
        on_head = {(t.topic_id, p) for t in self.topics.values() for p, part in enumerate(t.partitions)
                   if any(r["node_id"] == head_node_id for r in part["replicas"])}
        for old in sorted(legacy):
            moves = {r["directory"]: _legacy_relative(r["directory"]) for r in legacy[old]}
            for replica in self.pending_deletions.values():
                if replica["node_id"] == old:
                    moves[replica["directory"]] = _legacy_relative(replica["directory"])
            parts = {(t.topic_id, p) for t in self.topics.values() for p, part in enumerate(t.partitions)
                     if any(r["node_id"] == old for r in part["replicas"])}
            if parts & on_head or any(moves[r["directory"]] is None or not exists(moves[r["directory"]])
                                      for r in legacy[old]):
                continue
            on_head |= parts
            records.append({"type": "legacy_node_adopted", "legacy_node_id": old, "node_id": head_node_id,
                            "directories": {k: v for k, v in moves.items() if v is not None}})
        return records

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

    def replica_removal_pending(self, name: str, partition: int, replica: dict) -> list[dict]:
        """A replica dropped from its partition while its node was missing: its files go when the
        node is back."""
        return [{"type": "replica_removal_pending", "topic": name, "topic_id": self.topic(name).topic_id,
                 "partition": partition, "replica": dict(replica)}]

    def replica_deleted(self, topic_id: str, partition: int, replica_id: int) -> list[dict]:
        if (topic_id, partition, replica_id) not in self.pending_deletions:
            return []
        return [{"type": "replica_deleted", "topic_id": topic_id, "partition": partition, "replica_id": replica_id}]

    def directory_taken(self, topic_id: str, partition: int, replica: dict) -> bool:
        """Whether a current replica of the partition uses the directory a removed ``replica`` had on
        its node (a reassignment moved the partition back there before the removed one's files were
        deleted): the files are that replica's now, never the removed one's to delete."""
        topic = next((t for t in self.topics.values() if t.topic_id == topic_id), None)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return False
        return any(r["node_id"] == replica["node_id"] and r["directory"] == replica["directory"]
                   for r in topic.partitions[partition]["replicas"])

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
        eligible = self._eligible(part)
        # A replica on a draining node may stay in the ISR but not join it (KIP-841's fenced brokers).
        isr = sorted({r for r in set(new_isr) & ids if r in part["isr"] or eligible(r)} | {leader_id})
        state = copy.deepcopy(part)
        self._set_isr(name, state, isr)
        state["partition_epoch"] += 1
        if state["adding"] and set(state["adding"]) <= set(isr):
            state = self._complete_reassignment(state, alive)
        return [self._changed(name, partition, state)], state

    def _complete_reassignment(self, state: dict, alive: Callable[[int], bool]) -> dict:
        removing = set(state["removing"])
        state["replicas"] = [r for r in state["replicas"] if r["replica_id"] not in removing]
        state["isr"] = [r for r in state["isr"] if r not in removing]
        state["elr"] = [r for r in state.get("elr", []) if r not in removing]
        state["adding"], state["removing"] = [], []
        if state["leader"] in removing:
            leader = next((r for r in replica_ids(state) if r in state["isr"] and alive(r)), NO_LEADER)
            state["leader"] = leader
            state["leader_epoch"] += 1
        return state

    def _min_isr(self, name: str) -> int:
        return int(self.topics[name].config.get("min_insync_replicas", 1))

    def _set_isr(self, name: str, state: dict, isr: list[int]) -> None:
        """Install a new ISR and keep the ELR (KIP-966's eligible leader replicas) with it. A member
        that leaves while the ISR is below min_insync_replicas joins the ELR: from then on the high
        watermark cannot move (a leader advances it only with min_insync_replicas in sync,
        actors/replica_state.py), so it holds every committed record and may be elected cleanly.
        Once the ISR is back at the minimum the ELR is emptied (new records commit without them)."""
        isr = list(isr)
        elr = [r for r in state.get("elr", []) if r not in isr]
        if len(isr) < self._min_isr(name):
            elr += [r for r in state["isr"] if r not in isr and r not in elr]
        else:
            elr = []
        state["isr"], state["elr"] = isr, elr

    def _candidates(self, state: dict, alive: Callable[[int], bool]) -> list[int]:
        """Who may lead cleanly, best first: live ISR members in replica order, else live ELR
        members; a draining node's only when no other can."""
        order = replica_ids(state)
        eligible = self._eligible(state)
        for pool in (state["isr"], state.get("elr", [])):
            live = [r for r in order if r in pool and alive(r)]
            if live:
                return [r for r in live if eligible(r)] or live
        return []

    def _elect(self, name: str, state: dict, alive: Callable[[int], bool], unclean: bool) -> int:
        """The partition's next leader in ``state`` (NO_LEADER when nobody may lead): a clean
        candidate, else with ``unclean`` the first live replica, whose log becomes the truth. The new
        leader's ISR keeps the members running now; the others leave it (into the ELR when that
        leaves it below the minimum). While nobody leads, ISR and ELR stay as they are."""
        candidates = self._candidates(state, alive)
        if candidates:
            leader = candidates[0]
            self._set_isr(name, state, sorted({r for r in state["isr"] if alive(r)} | {leader}))
            return leader
        live = [r for r in replica_ids(state) if alive(r)]
        if unclean and live:
            state["isr"], state["elr"] = [live[0]], []  # the others truncate to it
            return live[0]
        return NO_LEADER

    def elect_leader(self, name: str, partition: int, alive: Callable[[int], bool], unclean: bool,
                     preferred: bool = False) -> tuple[list[dict], dict | None]:
        """Elect the first live ISR member in replica order, else an ELR member (the preferred
        replica only, with ``preferred``: alive, in sync and eligible). With no clean candidate: the
        first live replica if ``unclean``, else the partition goes offline (leader -1) keeping its ISR
        and ELR, so their members are elected as they return. No records when nothing changes."""
        part = self.partition(name, partition)
        state = copy.deepcopy(part)
        if preferred:
            first = replica_ids(part)[0]
            if not (first in part["isr"] and alive(first) and self._eligible(part)(first)):
                return [], None
            leader = first
            self._set_isr(name, state, [r for r in part["isr"] if alive(r)])
        elif part["leader"] != NO_LEADER and alive(part["leader"]):
            return [], None
        else:
            leader = self._elect(name, state, alive, unclean)
        if leader == part["leader"] and (leader == NO_LEADER or alive(leader)):
            return [], None
        state["leader"] = leader
        state["leader_epoch"] += 1
        state["partition_epoch"] += 1
        return [self._changed(name, partition, state)], state

    def move_leaders_off(self, name: str, partition: int, node_id: int, alive: Callable[[int], bool]
                         ) -> tuple[list[dict], dict | None]:
        """Controlled shutdown of ``node_id`` for one partition: leadership moves to another live,
        eligible in-sync replica, and the node's replica leaves the ISR while at least one other
        member stays (so acks='all' never waits for a node about to stop). No records when the
        partition has no replica there, or nothing can move (its only in-sync replica is there)."""
        part = self.partition(name, partition)
        there = [r["replica_id"] for r in part["replicas"] if r["node_id"] == node_id]
        if not there:
            return [], None
        rid = there[0]
        eligible = self._eligible(part)
        others = [r for r in replica_ids(part) if r != rid and r in part["isr"] and alive(r) and eligible(r)]
        state = copy.deepcopy(part)
        if part["leader"] == rid:
            if not others:
                return [], None
            state["leader"] = others[0]
            state["leader_epoch"] += 1
        if rid in state["isr"] and others:
            self._set_isr(name, state, [r for r in state["isr"] if r != rid])
        if state == part:
            return [], None
        state["partition_epoch"] += 1
        return [self._changed(name, partition, state)], state

    def replica_corrupt(self, name: str, partition: int, replica_id: int, leader_epoch: int, partition_epoch: int,
                        alive: Callable[[int], bool]) -> tuple[list[dict], dict | None]:
        """The leader found a batch of its log corrupt on disk: another live in-sync replica (never an
        ELR member nor an out-of-sync one) takes over, and the reporter leaves the ISR and the ELR
        (it refetches what it lost as a follower). No change when the report is stale or no other
        in-sync replica lives: the partition then serves nothing past the corrupt batch."""
        part = self.partition(name, partition)
        if (part["leader"], part["leader_epoch"], part["partition_epoch"]) != (replica_id, leader_epoch,
                                                                                partition_epoch):
            return [], None
        eligible = self._eligible(part)
        others = [r for r in replica_ids(part) if r != replica_id and r in part["isr"] and alive(r)]
        if not others:
            return [], None
        state = copy.deepcopy(part)
        state["leader"] = ([r for r in others if eligible(r)] or others)[0]
        state["leader_epoch"] += 1
        state["partition_epoch"] += 1
        state["isr"] = [r for r in state["isr"] if r != replica_id]
        state["elr"] = [r for r in state.get("elr", []) if r != replica_id]
        return [self._changed(name, partition, state)], state

    def replica_lost_committed(self, name: str, partition: int, replica_id: int) -> tuple[list[dict], dict | None]:
        """A replica's log, as it reopened, ends below the high watermark it had checkpointed: its disk
        lost records that were committed. It leaves the ISR and the ELR (it copies them again as a
        follower, and its leader adds it back) when another member of either may still hold them;
        the only one left stays, since no other copy can exist (RF=1, or every other copy gone)."""
        part = self.partition(name, partition)
        pools = set(part["isr"]) | set(part.get("elr", []))
        if replica_id not in pools or not pools - {replica_id}:
            return [], None
        state = copy.deepcopy(part)
        state["isr"] = [r for r in state["isr"] if r != replica_id]
        state["elr"] = [r for r in state.get("elr", []) if r != replica_id]
        if state["leader"] == replica_id:
            state["leader"] = NO_LEADER
            state["leader_epoch"] += 1
        state["partition_epoch"] += 1
        return [self._changed(name, partition, state)], state

    def replicas_lost(self, name: str, partition: int, lost: set[int], alive: Callable[[int], bool],
                      unclean: bool) -> tuple[list[dict], dict | None]:
        """Replicas died (their actor or node): they leave the ISR at once (so acks='all' does
        not wait replica_lag_time_max_ms for them; into the ELR if that leaves the ISR below
        min_insync_replicas), and a new leader is elected if the leader was among them. The ISR
        keeps at least its last member, so a partition whose every replica died elects that
        member, or an ELR member, cleanly when it returns."""
        part = self.partition(name, partition)
        state = copy.deepcopy(part)
        self._set_isr(name, state, [r for r in part["isr"] if r not in lost] or part["isr"][:1])
        if part["leader"] in lost or part["leader"] == NO_LEADER:
            leader = self._elect(name, state, lambda r: r not in lost and alive(r), unclean)
            if leader != part["leader"]:
                state["leader"] = leader
                state["leader_epoch"] += 1
        if state == part:
            return [], None
        state["partition_epoch"] += 1
        return [self._changed(name, partition, state)], state

    def reassign(self, name: str, partition: int, nodes: list[int]) -> tuple[list[dict], dict]:
        """Move the partition to ``nodes`` (the first preferred): new replicas are added and catch
        up; the old ones go once every new one is in the ISR (Kafka's KIP-455)."""
        part = self.partition(name, partition)
        if part["adding"]:
            raise InvalidConfigError(f"{name}-{partition} is already being reassigned")
        if len(set(nodes)) != len(nodes) or not nodes:
            raise InvalidReplicationFactorError(f"a reassignment needs distinct nodes, got {nodes}")
        by_node = {r["node_id"]: r for r in part["replicas"]}
        next_id = max(replica_ids(part)) + 1
        state = copy.deepcopy(part)
        new_replicas, adding = [], []
        for node in nodes:
            if node in by_node:
                new_replicas.append(by_node[node])
            else:
                replica = {"replica_id": next_id, "node_id": node,
                           "directory": partition_path(name, self.topics[name].topic_id, partition)}
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
                                                     partitions, list(overrides),
                                                     ever_compacted=_compacts(record["config"]))
        elif kind == "topic_config_altered":
            topic = self.topics[record["name"]]
            topic.config = dict(record["config"])
            topic.overrides = list(record["overrides"])
            topic.config_version += 1
            topic.ever_compacted = topic.ever_compacted or _compacts(topic.config)
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
        elif kind == "replica_removal_pending":
            replica = record["replica"]
            self.pending_deletions[(record["topic_id"], record["partition"], replica["replica_id"])] = {
                **replica, "topic": record["topic"]}
        elif kind == "cluster_created":
            self.cluster_id = record["cluster_id"]
            self.head_node_id = record["head_node_id"]
        elif kind == "node_registered":
            node = self.nodes.setdefault(record["node_id"], NodeState(record["node_id"]))
            node.host, node.data_dir = record["host"], record["data_dir"]
        elif kind == "node_draining":
            node = self.nodes[record["node_id"]]
            node.draining, node.drained_session = record["draining"], record.get("session", "")
        elif kind == "legacy_node_adopted":
            old, new, moves = record["legacy_node_id"], record["node_id"], record["directories"]
            replicas = [r for t in self.topics.values() for part in t.partitions for r in part["replicas"]]
            for r in [*replicas, *self.pending_deletions.values()]:
                if r["node_id"] == old:
                    r["node_id"], r["directory"] = new, moves.get(r["directory"], r["directory"])
        elif kind == "user_set":
            self.users[record["name"]] = copy.deepcopy(record["credentials"])
        elif kind == "user_deleted":
            self.users.pop(record["name"], None)
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
