"""Controller: the one detached, named actor that owns raylog's cluster metadata and elections.

It keeps ControllerState (topics, configs, each partition's replicas, leader,
epochs and ISR) in a metadata log on the head node's disk: a raylog
PartitionLog of msgpack records, fsynced per record. A change is written to
that log before anyone acts on it (replay, then replicas are told), so a
controller killed at any point comes back, replays the log, finds each
replica by name (recreating any that is missing) and tells every replica the
current state again; replicas ignore states older than the one they hold.

What it watches, without pinging replicas in a loop:

- **Replica deaths**: one ``watch()`` call stays in flight per replica and
  never returns; Ray fails it when the replica's process dies. The replica
  leaves the ISR at once, a new leader is elected from the live ISR if it was
  the leader, and an ``attach()`` call (which Ray holds until the actor is
  restarted) tells the controller when it is back.
- **Node deaths**: ``ray.nodes()`` every node_check_interval_ms (one call to
  Ray's GCS). Every replica on a dead node is lost. A Ray node never comes
  back under its id, so after replica_reassign_after_ms each such replica is
  moved to a live node without a replica of its partition (the new replica
  catches up and joins the ISR, then the lost one is dropped, as Kafka's
  reassignment does).
- **Preferred leaders**: every leader_imbalance_check_interval_ms, leadership
  moves back to each partition's first replica when it is alive and in sync.
- **Paused replicas** (SIGSTOP, a GC pause, a hung disk: alive to Ray, silent
  to everyone): every replica heartbeats (``replica_heartbeat``) and one that
  sends none for replica_session_timeout_ms is fenced like a dead one (it
  leaves the ISR, its partitions elect other leaders); its own lease lapses
  before that, so it acknowledges nothing meanwhile. When it heartbeats again
  it is alive again and told the current state. A restarted controller gives
  every replica a fresh session, and so does one that finds it was paused
  itself (its own loop late by half a session), before fencing anyone.
- **Paused coordinators**: the controller pings every group coordinator each
  replica_heartbeat_interval_ms; one that has not answered for the session
  timeout is killed, and Ray restarts it (it replays its offsets partition).

An async actor: a slow operation (starting hundreds of replicas) awaits
without blocking metadata calls; every state change runs from validation to
the metadata log's fsync without an ``await`` in between.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import uuid

import msgpack
import ray

from actors import arguments as args
from actors import events, process_state
from actors.metrics import ControllerMetrics
from actors.controller_state import NO_LEADER, ControllerState, TopicState, replica_ids, replica_of
from actors.replica import PartitionReplica
from placement import nodes as placement_nodes
from placement.policy import assign_replicas, check_replication_factor, replacement_node
from raylog import topic_configs
from raylog.config import ClusterConfig, TopicConfig
from raylog.errors import (
    InvalidReplicationFactorError, InvalidRequestError, InvalidTopicError, TopicCreationIncompleteError,
    UnknownTopicOrPartitionError,
)
from raylog.logs import configure_actor_logging, get_logger, log_event
from raylog.naming import (
    INTERNAL_TOPICS, OFFSETS_TOPIC, coordinator_actor_name, replica_actor_name, validate_topic_name,
    validate_topic_shape,
)
from raylog.protocol import PartitionInfo, ReplicaAssignment, TopicDescription
from raylog.storage import batch as record_batch
from raylog.storage.log import PartitionLog

METADATA_LOG_CONFIG = TopicConfig(flush_messages=1, retention_ms=-1, segment_bytes=64 * 1024 * 1024,
                                  segment_index_bytes=1024 * 1024)
"""The metadata log keeps everything (no retention) and fsyncs each record: changes are rare and
must survive a power loss of the controller's node."""
OFFSETS_TOPIC_CONFIG = {"cleanup_policy": "compact", "segment_bytes": 100 * 1024 * 1024}
"""Kafka's offsets topic settings: compacted (the last record per key is the state), 100 MiB
segments (offsets.topic.segment.bytes); commits are written with acks='all', and
min_insync_replicas follows the replication factor as for any topic (2 with 3 replicas)."""
ATTACH_RETRY_S = 1.0
"""How long the controller waits before asking a replica it could not reach whether it is back."""
_TOPIC_ID = re.compile(r"[0-9a-f]{32}")
"""What a caller-picked topic id may be: it names the partition directories, so nothing else."""

logger = get_logger(__name__)


class Controller:
    def __init__(self, cluster_config: dict):
        configure_actor_logging()
        self.config = ClusterConfig(**cluster_config)
        self.namespace = self.config.namespace
        root = os.path.expanduser(self.config.data_root)
        self.metadata_log = PartitionLog(os.path.join(root, "controller", "__cluster_metadata-0"),
                                         METADATA_LOG_CONFIG)
        identity = process_state.own_identity()
        self._identity = identity.to_list() if identity is not None else None
        """Sent with every heartbeat answer: a replica on this host tells a busy controller from a stopped one."""
        self.state = ControllerState()
        for record in self._read_metadata_log():
            self.state.replay(record)
        self.handles: dict[tuple, object] = {}
        """(topic_id, partition, replica_id) -> the replica's actor handle."""
        self.alive: set[tuple] = set()
        """Replicas whose actor answered attach() and whose watch() has not failed since."""
        self.nodes_alive: set[str] = set()
        self.head_node = ""
        self.node_lost_at: dict[str, float] = {}
        self._watchers: dict[tuple, asyncio.Task] = {}
        self._started: asyncio.Task | None = None
        self._background: list[asyncio.Task] = []
        self._offsets_creation: asyncio.Lock | None = None
        self._creating: dict[str, dict] = {}
        """Topics whose replicas are still starting: replicas started, asked for, and missing."""
        self._seen: dict[tuple, float] = {}
        """Replica -> time.monotonic() of its last heartbeat (soft state: never logged; a restarted
        controller gives every replica a fresh session)."""
        self._fenced: set[tuple] = set()
        """Replicas fenced for their silence; the next heartbeat of one brings it back."""
        self._coordinator_pings: dict[int, tuple[asyncio.Future, float]] = {}
        """Offsets partition -> (the ping in flight to its coordinator, when it was sent)."""
        self._coordinator_answered: dict[int, float] = {}
        self._coordinators: dict[int, object] = {}
        """Offsets partition -> its coordinator's handle (the same actor across its restarts)."""
        self._high_watermarks: dict[tuple[str, int], int] = {}
        """(topic, partition) -> the high watermark its leader's last heartbeat carried (for group lag)."""
        self.metrics = ControllerMetrics()

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

    def _commit(self, records: list[dict], reason: str = "") -> None:
        """Persist, then apply: the log is the truth a restarted controller replays. ``reason`` names
        what caused the change in the events logged for it."""
        if not records:
            return
        values = [msgpack.packb(r, use_bin_type=True) for r in records]
        self.metadata_log.append(record_batch.build(values, timestamps_ms=int(time.time() * 1000),
                                                    compression="none"))
        for r in records:
            self._record_events(r, reason)
            self.state.replay(r)

    def _record_events(self, record: dict, reason: str) -> None:
        """Log and count the operational events of one committed record (before it is replayed)."""
        kind = record["type"]
        if kind == "partition_changed":
            topic, p = record["name"], record["partition"]
            before = self.state.topics[topic].partitions[p]
            for event, fields in events.partition_events(before, record["state"]):
                self.metrics.event(event)
                if event in (events.ELECTION, events.OFFLINE):
                    self.metrics.election(topic, p)
                log_event(logger, event, logging.WARNING if event == events.OFFLINE else logging.INFO,
                          topic=topic, partition=p, **fields, partition_epoch=record["state"]["partition_epoch"],
                          reason=reason or "unknown")
        elif kind in ("topic_created", "partitions_added", "topic_deleted"):
            self.metrics.event(kind)
            fields = {"partitions": len(record["partitions"])} if kind != "topic_deleted" else {}
            log_event(logger, kind, topic=record["name"], **fields)
            if kind == "topic_deleted":
                for p in range(len(self.state.topics[record["name"]].partitions)):
                    self.metrics.forget(record["name"], p)
                    self._high_watermarks.pop((record["name"], p), None)

    def _report_partitions(self) -> None:
        """Set every partition's ISR size, under-replicated and offline gauges (those that changed)."""
        for topic in self.state.topics.values():
            for p, part in enumerate(topic.partitions):
                self.metrics.partition(topic.name, p, len(part["isr"]),
                                       len(part["isr"]) < len(part["replicas"]) - len(part["adding"]),
                                       part["leader"] == NO_LEADER)

    # --- start-up and background loops ---------------------------------------------------------

    async def _ensure_started(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        await self._refresh_nodes()
        await self._ensure_replicas([(topic, p, r, None) for topic in list(self.state.topics.values())
                                     for p, part in enumerate(topic.partitions) for r in part["replicas"]])
        keys = list(self.handles)
        statuses = await asyncio.gather(*(self._attach(k, timeout_s=self.config.request_timeout_ms / 1000)
                                          for k in keys), return_exceptions=True)
        loop = asyncio.get_running_loop()
        for key, status in zip(keys, statuses):
            if isinstance(status, dict):
                self._mark_alive(key)
            else:
                # Not answering yet (stopped, or recovering a large log): watched from when it does.
                self._background.append(loop.create_task(self._await_return(key)))
        for topic in list(self.state.topics.values()):
            for p in range(len(topic.partitions)):
                self._elect_if_needed(topic, p)
                self._push(topic, p)
        for (topic_id, p, rid), replica in list(self.state.pending_deletions.items()):
            self._background.append(asyncio.get_running_loop().create_task(
                self._finish_deletion(topic_id, p, rid, replica)))
        if OFFSETS_TOPIC in self.state.topics:
            topic = self.state.topic(OFFSETS_TOPIC)
            for p in range(len(topic.partitions)):
                self._ensure_coordinator(topic, p)
        self._background.append(loop.create_task(self._node_loop()))
        self._background.append(loop.create_task(self._preferred_leader_loop()))

    async def _refresh_nodes(self) -> set[str]:
        """Ask Ray which nodes are alive; returns the ones that died since the last look."""
        infos = await asyncio.get_running_loop().run_in_executor(None, placement_nodes.alive_nodes)
        alive = {n.node_id for n in infos}
        heads = [n.node_id for n in infos if n.is_head]
        if heads:
            self.head_node = heads[0]
        died = self.nodes_alive - alive
        now = time.monotonic()
        for node in died:
            self.node_lost_at.setdefault(node, now)
        for node in alive:
            self.node_lost_at.pop(node, None)
        self.nodes_alive = alive
        return died

    async def _node_loop(self) -> None:
        interval_s = self.config.node_check_interval_ms / 1000
        last = time.monotonic()
        while True:
            await asyncio.sleep(interval_s)
            now = time.monotonic()
            if now - last > interval_s + self.config.replica_session_timeout_ms / 2000:
                # This controller itself was paused: the heartbeats it missed are queued behind this
                # check. Everyone gets a fresh session rather than being fenced for our silence.
                logger.warning("controller loop was %.1f s late (paused?); every replica gets a fresh session",
                               now - last - interval_s)
                for key in self._seen:
                    self._seen[key] = now
                self._coordinator_pings.clear()
            last = now
            self._fence_silent_replicas(now)
            self._check_coordinators(now)
            try:
                died = await self._refresh_nodes()
            except Exception:  # noqa: BLE001 - the GCS hiccuped: look again next round
                continue
            if died:
                self._nodes_died(died)
            self._heal()
            self._report_partitions()

    # --- liveness: heartbeats and fencing --------------------------------------------------------

    async def replica_heartbeat(self, topic_id: str, partition: int, replica_id: int, leader_epoch: int,
                                partition_epoch: int, config_version: int = -1, high_watermark: int = -1) -> dict:
        """A replica's heartbeat (Kafka's BrokerHeartbeat, per replica). Renews its session; answers
        whether it is a replica of a partition the controller knows (only then may it hold a lease)
        and, when its state or topic config is older than the controller's, the current state (which
        carries the config). A fenced replica that heartbeats again is alive again, and is told its
        state (it rejoins as a follower)."""
        key = (args.text("topic_id", topic_id, 64), args.integer("partition", partition, 0, args.INT32_MAX),
               args.integer("replica_id", replica_id, 0, args.INT32_MAX))
        leader_epoch = args.integer("leader_epoch", leader_epoch, -1, args.INT32_MAX)
        partition_epoch = args.integer("partition_epoch", partition_epoch, -1, args.INT32_MAX)
        config_version = args.integer("config_version", config_version, -1, args.INT32_MAX)
        high_watermark = args.integer("high_watermark", high_watermark, -1)
        found = self._locate(key)
        reply = {"controller_pid": os.getpid(), "controller_process": self._identity, "member": found is not None,
                 "state": None}
        if found is None:
            return reply
        self._seen[key] = time.monotonic()
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        topic, p = found
        if key in self._fenced and self._started.done() and key in self.handles:
            self._fenced.discard(key)
            log_event(logger, "replica_unfenced", topic=topic.name, partition=p, replica=replica_id,
                      reason="heartbeat_resumed")
            self._mark_alive(key)
            self._elect_if_needed(topic, p)
            self._push(topic, p)
        part = topic.partitions[p]
        if high_watermark >= 0 and part["leader"] == replica_id and part["leader_epoch"] == leader_epoch:
            self._high_watermarks[(topic.name, p)] = high_watermark
        if (part["leader_epoch"], part["partition_epoch"]) > (leader_epoch, partition_epoch) \
                or 0 <= config_version < topic.config_version:
            reply["state"] = self._view(topic, p)
        return reply

    def _fence_silent_replicas(self, now: float) -> None:
        """Fence every live replica whose heartbeats stopped for replica_session_timeout_ms: it leaves
        the ISR and, if it led, another in-sync replica is elected (its lease has lapsed by then)."""
        limit_s = self.config.replica_session_timeout_ms / 1000
        for key in list(self.alive):
            if now - self._seen.get(key, now) > limit_s:
                found = self._locate(key)
                log_event(logger, "replica_fenced", logging.WARNING, topic=found[0].name if found else key[0],
                          partition=key[1], replica=key[2], silent_s=round(now - self._seen[key], 1),
                          reason="no_heartbeat")
                self._fenced.add(key)
                self._replica_died(key)

    def _check_coordinators(self, now: float) -> None:
        """Ping each group coordinator once per heartbeat interval; kill one that has not answered for
        the session timeout (paused or hung), so Ray restarts it and it replays its partition."""
        if OFFSETS_TOPIC not in self.state.topics or (self._offsets_creation is not None
                                                      and self._offsets_creation.locked()):
            return
        interval_s = self.config.replica_heartbeat_interval_ms / 1000
        limit_s = self.config.replica_session_timeout_ms / 1000
        for p in range(len(self.state.topic(OFFSETS_TOPIC).partitions)):
            ping = self._coordinator_pings.get(p)
            if ping is not None and ping[0].done():
                if ping[0].exception() is None:
                    self._coordinator_answered[p] = now
                del self._coordinator_pings[p]
                ping = None
            if ping is None:
                if now - self._coordinator_answered.get(p, 0.0) >= interval_s:
                    handle = self._coordinators.get(p)
                    if handle is None:
                        try:
                            handle = self._coordinators[p] = ray.get_actor(coordinator_actor_name(p),
                                                                           namespace=self.namespace)
                        except ValueError:
                            continue
                    self._coordinator_pings[p] = (asyncio.wrap_future(handle.ping.remote().future()), now)
                continue
            if now - ping[1] > limit_s:
                del self._coordinator_pings[p]
                log_event(logger, "coordinator_restarted", logging.WARNING, coordinator=p,
                          silent_s=round(now - ping[1], 1), reason="no_ping_answer")
                try:
                    ray.kill(self._coordinators[p], no_restart=False)
                except Exception:  # noqa: BLE001 - gone meanwhile: its next ping will tell
                    self._coordinators.pop(p, None)

    async def _preferred_leader_loop(self) -> None:
        while self.config.auto_leader_rebalance_enable:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_ms / 1000)
            self._elect_preferred(None)

    # --- replicas ------------------------------------------------------------------------------

    def _key(self, topic: TopicState, p: int, replica_id: int) -> tuple:
        return (topic.topic_id, p, replica_id)

    def _is_alive(self, topic: TopicState, p: int):
        return lambda rid: self._key(topic, p, rid) in self.alive

    def _ensure_replica(self, topic: TopicState, p: int, replica: dict, initial_state: dict | None = None):
        """The replica's actor handle: found by name, or created on its node if that node is alive."""
        key = self._key(topic, p, replica["replica_id"])
        handle = self.handles.get(key)
        if handle is None:
            handle = self._find_or_create(topic, p, replica, initial_state)
            if handle is not None:
                self.handles[key] = handle
        return handle

    async def _ensure_replicas(self, wanted: list[tuple[TopicState, int, dict, dict | None]]) -> None:
        """``_ensure_replica`` of each (topic, partition, replica, initial state), asking Ray from a
        worker thread: each lookup and creation is a blocking call to Ray's GCS, and hundreds of
        them while replicas starting take every core kept the loop from answering heartbeats for
        minutes (the replicas then killed the controller as hung)."""
        keyed = [(self._key(t, p, r["replica_id"]), t, p, r, state) for t, p, r, state in wanted]
        missing = [item for item in keyed if item[0] not in self.handles]
        if not missing:
            return
        found = await asyncio.to_thread(lambda: [self._find_or_create(t, p, r, state) for _, t, p, r, state in missing])
        for (key, *_), handle in zip(missing, found):
            if handle is not None:
                self.handles.setdefault(key, handle)

    def _find_or_create(self, topic: TopicState, p: int, replica: dict, initial_state: dict | None):
        """The replica's actor by name, else a new one on its node (None when that node is down).
        Blocking; safe off the loop (it reads only what does not change under it)."""
        name = replica_actor_name(topic.name, topic.topic_id, p, replica["replica_id"])
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            pass
        if replica["node_id"] not in self.nodes_alive:
            return None
        options = placement_nodes.replica_actor_options(
            replica["node_id"], name, self.namespace, self.config.replica_max_restarts)
        try:
            return _replica_class().options(**options).remote(
                topic.name, p, replica["replica_id"], replica["directory"], topic.config, topic.topic_id,
                self.config.to_dict(), initial_state, config_version=topic.config_version)
        except ValueError:  # created meanwhile by another call of the controller
            return ray.get_actor(name, namespace=self.namespace)

    async def _attach(self, key: tuple, timeout_s: float | None = None) -> dict:
        handle = self.handles[key]
        ref = handle.attach.remote()
        return await (asyncio.wait_for(ref, timeout_s) if timeout_s else ref)

    def _mark_alive(self, key: tuple) -> None:
        self.alive.add(key)
        self._seen[key] = max(self._seen.get(key, 0.0), time.monotonic())
        task = self._watchers.get(key)
        if task is None or task.done():
            self._watchers[key] = asyncio.get_running_loop().create_task(self._watch(key))

    async def _watch(self, key: tuple) -> None:
        """One per live replica, for its whole life: each time its process dies, mourn it, then wait
        for Ray to bring it back and watch the new process."""
        while True:
            handle = self.handles.get(key)
            if handle is None:
                return
            try:
                await handle.watch.remote()
            except Exception:  # noqa: BLE001 - any failure of the never-returning call means the process died
                pass
            if self.handles.get(key) is not handle:
                return  # removed (deleted topic, finished reassignment): nothing to mourn
            self._replica_died(key)
            if not await self._await_return(key):
                return

    def _replica_died(self, key: tuple) -> None:
        self.alive.discard(key)
        found = self._locate(key)
        if found is None:
            return
        topic, p = found
        reason = "replica_fenced" if key in self._fenced else "replica_died"
        self.metrics.event(reason)
        if reason == "replica_died":
            log_event(logger, reason, topic=topic.name, partition=p, replica=key[2])
        records, _ = self.state.replicas_lost(topic.name, p, {key[2]}, self._is_alive(topic, p),
                                              self._unclean(topic))
        self._commit(records, reason)
        self._push(topic, p)

    async def _await_return(self, key: tuple) -> bool:
        """Ray holds calls to a restarting actor until it is back; a replica whose node is gone
        never answers, and its partition is healed by reassignment instead. Returns whether the
        replica is back (alive, told its state)."""
        while key in self.handles:
            found = self._locate(key)
            if found is None:
                return False
            topic, p = found
            node = replica_of(topic.partitions[p], key[2])["node_id"]
            if node not in self.nodes_alive and self.nodes_alive:
                return False
            try:
                await self._attach(key, timeout_s=self.config.request_timeout_ms / 1000)
            except Exception:  # noqa: BLE001 - not back yet
                await asyncio.sleep(ATTACH_RETRY_S)
                self._recreate_if_gone(key, topic, p)
                continue
            self._mark_alive(key)
            self._elect_if_needed(topic, p)
            self._push(topic, p)
            return True
        return False

    def _recreate_if_gone(self, key: tuple, topic: TopicState, p: int) -> None:
        """A replica actor killed for good (ray.kill, max_restarts spent) on a live node is started
        again on that node: it reopens its directory and rejoins as a follower."""
        replica = replica_of(topic.partitions[p], key[2])
        try:
            ray.get_actor(replica_actor_name(topic.name, topic.topic_id, p, key[2]), namespace=self.namespace)
        except ValueError:
            if replica["node_id"] in self.nodes_alive:
                self.handles.pop(key, None)
                self._ensure_replica(topic, p, replica, initial_state=None)

    def _locate(self, key: tuple) -> tuple[TopicState, int] | None:
        topic_id, p, rid = key
        for topic in self.state.topics.values():
            if topic.topic_id == topic_id and p < len(topic.partitions) and rid in replica_ids(topic.partitions[p]):
                return topic, p
        return None

    def _unclean(self, topic: TopicState) -> bool:
        return bool(topic.config.get("unclean_leader_election_enable", False))

    def _elect_if_needed(self, topic: TopicState, p: int) -> None:
        part = topic.partitions[p]
        alive = self._is_alive(topic, p)
        if part["leader"] == NO_LEADER or not alive(part["leader"]):
            records, _ = self.state.elect_leader(topic.name, p, alive, self._unclean(topic))
            self._commit(records, "leader_unavailable")

    def _view(self, topic: TopicState, p: int) -> dict:
        part = topic.partitions[p]
        leader_handle = None
        if part["leader"] != NO_LEADER:
            leader_handle = self.handles.get(self._key(topic, p, part["leader"]))
        return {"leader": part["leader"], "leader_epoch": part["leader_epoch"],
                "partition_epoch": part["partition_epoch"], "replicas": replica_ids(part), "isr": part["isr"],
                "leader_handle": leader_handle, "config": dict(topic.config), "config_version": topic.config_version}

    def _push(self, topic: TopicState, p: int) -> None:
        """Tell every live replica of the partition its current state (fire and forget: a replica
        that dies meanwhile is noticed by its watch; replicas ignore states older than theirs)."""
        view = self._view(topic, p)
        for rid in replica_ids(topic.partitions[p]):
            key = self._key(topic, p, rid)
            handle = self.handles.get(key)
            if handle is not None and key in self.alive:
                handle.set_state.remote(view)

    # --- nodes: losses and healing -----------------------------------------------------------------

    def _nodes_died(self, died: set[str]) -> None:
        for node in sorted(died):
            self.metrics.event("node_lost")
            log_event(logger, "node_lost", logging.WARNING, node=node,
                      replicas=sum(r["node_id"] == node for t in self.state.topics.values()
                                   for part in t.partitions for r in part["replicas"]),
                      reassign_after_ms=self.config.replica_reassign_after_ms)
        for topic in list(self.state.topics.values()):
            for p, part in enumerate(topic.partitions):
                lost = {r["replica_id"] for r in part["replicas"] if r["node_id"] in died}
                if not lost:
                    continue
                for rid in lost:
                    self.alive.discard(self._key(topic, p, rid))
                records, _ = self.state.replicas_lost(topic.name, p, lost, self._is_alive(topic, p),
                                                      self._unclean(topic))
                self._commit(records, "node_lost")
                self._push(topic, p)

    def _heal(self) -> None:
        """Move replicas lost with their node to live nodes (one reassignment per partition at a time)."""
        wait_ms = self.config.replica_reassign_after_ms
        if wait_ms < 0:
            return
        now = time.monotonic()
        load, _ = self.state.replica_load()
        secondary = {self.head_node} if self.head_node else set()
        for topic in list(self.state.topics.values()):
            for p, part in enumerate(topic.partitions):
                if part["adding"]:
                    continue
                nodes = [r["node_id"] for r in part["replicas"]]
                gone = [n for n in nodes if n not in self.nodes_alive
                        and (now - self.node_lost_at.get(n, now)) * 1000 >= wait_ms]
                if not gone:
                    continue
                # Survivors keep their order (the first is the preferred leader); replacements go last.
                target = [n for n in nodes if n not in gone]
                unreplaced = []
                for lost in gone:
                    new = replacement_node(nodes + target, sorted(self.nodes_alive), load, secondary)
                    if new is None:
                        unreplaced.append(lost)  # stays a member until a node is free for it
                        continue
                    target.append(new)
                    load[new] += 1
                if len(unreplaced) == len(gone):
                    continue
                # The head stays last in the order, so it leads only when no other replica can.
                target = sorted(target, key=lambda n: n in secondary) + unreplaced
                placement = [(n, placement_nodes.node_data_dir(self.config.data_root, n)) for n in target]
                records, state = self.state.reassign(topic.name, p, placement)
                self._commit(records, "node_lost")
                self._start_added(topic, p)

    def _start_added(self, topic: TopicState, p: int) -> None:
        part = topic.partitions[p]
        view = self._view(topic, p)
        for rid in part["adding"]:
            replica = replica_of(part, rid)
            handle = self._ensure_replica(topic, p, replica, initial_state=view)
            if handle is not None:
                asyncio.get_running_loop().create_task(self._await_return(self._key(topic, p, rid)))
        self._push(topic, p)

    def _drop_removed(self, topic: TopicState, p: int, before: dict) -> None:
        """After a reassignment completed: delete the data of replicas no longer in the partition."""
        kept = set(replica_ids(topic.partitions[p]))
        for r in before["replicas"]:
            if r["replica_id"] in kept:
                continue
            key = self._key(topic, p, r["replica_id"])
            handle = self.handles.pop(key, None)
            self.alive.discard(key)
            task = self._watchers.pop(key, None)
            if task is not None:
                task.cancel()
            if handle is not None and r["node_id"] in self.nodes_alive:
                asyncio.get_running_loop().create_task(self._delete_replica(handle))

    async def _delete_replica(self, handle) -> None:
        try:
            await asyncio.wait_for(handle.delete_data.remote(), self.config.request_timeout_ms / 2000)
        except Exception:  # noqa: BLE001 - it is going away either way
            pass
        ray.kill(handle, no_restart=True)

    # --- elections ---------------------------------------------------------------------------------

    def _elect_preferred(self, partitions) -> list[tuple[str, int]]:
        moved = []
        for topic in list(self.state.topics.values()):
            for p in range(len(topic.partitions)):
                if partitions is not None and (topic.name, p) not in partitions:
                    continue
                records, _ = self.state.elect_leader(topic.name, p, self._is_alive(topic, p), False, preferred=True)
                if records:
                    self._commit(records, "preferred_leader")
                    self._push(topic, p)
                    moved.append((topic.name, p))
        return moved

    async def elect_leaders(self, partitions: list | None = None) -> list[tuple[str, int]]:
        """Preferred leader election now (all partitions, or the (topic, partition) pairs given);
        returns the partitions whose leader moved."""
        await self._ensure_started()
        wanted = None if partitions is None else {
            (args.text("topic", t, 249), args.integer("partition", p, 0, args.INT32_MAX))
            for t, p in args.rows("partitions", partitions, 2)}
        if wanted:
            for t, p in wanted:
                self.state.partition(t, p)
        return self._elect_preferred(wanted)

    async def alter_isr(self, topic_name: str, partition: int, leader_id: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]) -> dict:
        """A leader's ISR proposal; returns the partition's new state or raises FencedLeaderEpochError."""
        for name, value in (("partition", partition), ("leader_id", leader_id), ("leader_epoch", leader_epoch),
                            ("partition_epoch", partition_epoch)):
            args.integer(name, value, 0, args.INT32_MAX)
        new_isr = [args.integer("new_isr", r, 0, args.INT32_MAX) for r in args.sequence("new_isr", new_isr, 1024)]
        await self._ensure_started()
        self.state.partition(topic_name, partition)
        topic = self.state.topic(topic_name)
        before = dict(topic.partitions[partition])
        records, state = self.state.alter_isr(topic_name, partition, leader_id, leader_epoch, partition_epoch,
                                              new_isr, self._is_alive(topic, partition))
        self._commit(records, "leader_request")
        if len(state["replicas"]) != len(before["replicas"]):
            self._drop_removed(topic, partition, before)
        self._push(topic, partition)
        return state

    async def reassign_partitions(self, reassignments: dict) -> dict:
        """{(topic, partition): [node id, ...]} -> the partitions' new replica lists (the new
        replicas catch up before the old ones are dropped)."""
        args.mapping("reassignments", reassignments)
        for key, target_nodes in reassignments.items():
            name, p = args.rows("(topic, partition)", [key], 2)[0]
            self.state.partition(name, p)
            for node in args.sequence("nodes", target_nodes, 1024):
                args.text("node id", node, 128)
        await self._ensure_started()
        out = {}
        for (name, p), target_nodes in reassignments.items():
            topic = self.state.topic(name)
            check_replication_factor(len(target_nodes), len(self.nodes_alive))
            missing = [n for n in target_nodes if n not in self.nodes_alive]
            if missing:
                raise InvalidReplicationFactorError(f"reassignment of {name}-{p} names nodes that are not alive: {missing}")
            placement = [(n, placement_nodes.node_data_dir(self.config.data_root, n)) for n in target_nodes]
            before = dict(topic.partitions[p])
            records, state = self.state.reassign(name, p, placement)
            self._commit(records, "admin_request")
            self._start_added(topic, p)
            if len(state["replicas"]) != len(before["replicas"]):
                self._drop_removed(topic, p, before)
            out[(name, p)] = [r["node_id"] for r in state["replicas"]]
        return out

    # --- topics --------------------------------------------------------------------------------------

    def _placement(self, count: int, first: int, replication_factor: int) -> list[list[tuple[str, str]]]:
        live = sorted(self.nodes_alive)
        replicas, leaders = self.state.replica_load()
        secondary = {self.head_node} if self.head_node else set()
        plan = assign_replicas(count, replication_factor, live, replicas, leaders, first, secondary)
        return [[(n, placement_nodes.node_data_dir(self.config.data_root, n)) for n in nodes] for nodes in plan]

    async def create_topic(self, name: str, num_partitions: int = 1, replication_factor: int = 1,
                           config: dict | None = None, internal: bool = False,
                           topic_id: str | None = None) -> TopicDescription:
        """``topic_id`` (32 hex digits), when the caller picks it, makes the call idempotent: Ray
        runs a call again on a restarted controller, and the topic it finds with that id is this
        creation's own, finished rather than refused."""
        validate_topic_name(name)
        validate_topic_shape(num_partitions, replication_factor)
        config = args.mapping("config", {} if config is None else config)
        if not isinstance(internal, bool):
            raise InvalidRequestError(f"internal must be a bool, got {internal!r}")
        if topic_id is not None and not (isinstance(topic_id, str) and _TOPIC_ID.fullmatch(topic_id)):
            raise InvalidRequestError(f"topic_id must be 32 lowercase hex digits, got {topic_id!r}")
        await self._ensure_started()
        if name in INTERNAL_TOPICS and not internal:
            raise InvalidTopicError(f"topic name {name!r} is reserved for raylog's internal use")
        existing = self.state.topics.get(name)
        retried = existing is not None and (name in self._creating or existing.topic_id == topic_id)
        if retried and len(existing.partitions) == num_partitions \
                and len(existing.partitions[0]["replicas"]) == replication_factor:
            # A retry of a creation that stopped part-way, or of this very call: start what is
            # missing (Kafka would say TopicAlreadyExists, but a topic with partitions that never
            # started is not usable). Replicas whose actor died starting are made again.
            for p, part in enumerate(existing.partitions):
                for r in part["replicas"]:
                    key = self._key(existing, p, r["replica_id"])
                    if key not in self.alive and key in self.handles:
                        self._recreate_if_gone(key, existing, p)
            await self._start_partitions(existing, range(num_partitions))
            return self._describe(existing)
        await self._refresh_nodes()
        records, _ = self.state.create_topic(name, num_partitions, replication_factor, config,
                                             topic_id or uuid.uuid4().hex, self._placement)
        self._commit(records)
        topic = self.state.topic(name)
        await self._start_partitions(topic, range(num_partitions))
        return self._describe(topic)

    async def creation_progress(self, name: str) -> dict:
        """How far the creation (or growth) of a topic has got: replicas started of those asked for,
        and the (partition, replica) pairs still missing; ``done`` once none is."""
        validate_topic_name(name)
        await self._ensure_started()
        progress = self._creating.get(name)
        if progress is None:
            self.state.topic(name)  # UnknownTopicOrPartitionError for a topic that does not exist
            return {"started": 0, "total": 0, "missing": [], "done": True}
        return {"started": progress["started"], "total": progress["total"],
                "missing": sorted(progress["missing"]), "done": False}

    # --- consumer groups' coordinators ------------------------------------------------------------

    async def ensure_offsets_topic(self) -> int:
        """Create __consumer_offsets and its group coordinators if they do not exist yet (the first
        consumer group asks); returns the partition count. One coordinator actor per partition,
        named, restarted by Ray, started near its partition's leader."""
        await self._ensure_started()
        async with self._offsets_lock():
            if OFFSETS_TOPIC not in self.state.topics:
                await self._refresh_nodes()
                spare = len(self.nodes_alive - {self.head_node}) or len(self.nodes_alive)
                await self.create_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, min(3, spare),
                                        OFFSETS_TOPIC_CONFIG, internal=True)
            topic = self.state.topic(OFFSETS_TOPIC)
            handles = [self._ensure_coordinator(topic, p) for p in range(len(topic.partitions))]
            await asyncio.gather(*(h.ping.remote() for h in handles))
            return len(topic.partitions)

    def _offsets_lock(self) -> asyncio.Lock:
        if self._offsets_creation is None:
            self._offsets_creation = asyncio.Lock()
        return self._offsets_creation

    def _ensure_coordinator(self, topic: TopicState, p: int):
        name = coordinator_actor_name(p)
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            pass
        part = topic.partitions[p]
        node = replica_of(part, part["leader"])["node_id"] if part["leader"] != NO_LEADER else self.head_node
        from actors.coordinator import GroupCoordinator

        return ray.remote(GroupCoordinator).options(
            name=name, namespace=self.namespace, lifetime="detached", get_if_exists=True, num_cpus=0,
            max_restarts=-1, max_task_retries=0, max_concurrency=1000,
            # Near its partition's leader, but anywhere if that node is gone: it owns no files.
            scheduling_strategy=placement_nodes.pinned(node, soft=True),
        ).remote(p, self.config.to_dict())

    async def topic_partition_counts(self) -> dict[str, int]:
        """Every user topic and its partition count (coordinators resolve subscriptions with it)."""
        await self._ensure_started()
        return {name: len(t.partitions) for name, t in self.state.topics.items() if name not in INTERNAL_TOPICS}

    async def create_partitions(self, name: str, total: int) -> TopicDescription:
        validate_topic_name(name)
        await self._ensure_started()
        await self._refresh_nodes()
        topic = self.state.topic(name)
        current = len(topic.partitions)
        records, _ = self.state.create_partitions(name, total, self._placement)
        self._commit(records)
        await self._start_partitions(topic, range(current, total))
        return self._describe(topic)

    async def _start_partitions(self, topic: TopicState, partitions) -> None:
        """Start every replica of these partitions with its role, replica_start_concurrency at a
        time, and wait for them: as long as replicas keep coming up, however many there are. After
        request_timeout_ms without one more replica up, TopicCreationIncompleteError names the
        missing ones; the topic stays, ``creation_progress`` reports it, and creating it again with
        the same shape finishes it."""
        partitions = list(partitions)
        keys = {p: [self._key(topic, p, r["replica_id"]) for r in topic.partitions[p]["replicas"]] for p in partitions}
        waiting = [k for p in partitions for k in keys[p] if k not in self.alive]
        progress = {"started": 0, "total": len(waiting), "missing": {(k[1], k[2]) for k in waiting}}
        self._creating[topic.name] = progress
        queue = [p for p in partitions if any(k not in self.alive for k in keys[p])]
        pending: dict[asyncio.Future, tuple] = {}
        failures = []
        window = self.config.request_timeout_ms / 1000
        while queue or pending:
            if queue and len(pending) < self.config.replica_start_concurrency:
                wave = []
                while queue and len(pending) + sum(len(keys[p]) for p in wave) < self.config.replica_start_concurrency:
                    wave.append(queue.pop(0))
                # Leaders first, so their handles are in the state their followers start with.
                await self._ensure_replicas([(topic, p, replica_of(topic.partitions[p], topic.partitions[p]["leader"]),
                                              self._view(topic, p)) for p in wave])
                views = {p: self._view(topic, p) for p in wave}
                await self._ensure_replicas([(topic, p, r, views[p]) for p in wave for r in topic.partitions[p]["replicas"]])
                pending.update({asyncio.ensure_future(self._attach(k)): k for p in wave for k in keys[p]
                                if k not in self.alive and k in self.handles})
                continue
            done, _ = await asyncio.wait(list(pending), timeout=window, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                for fut in pending:
                    fut.cancel()
                missing = sorted(progress["missing"])
                raise TopicCreationIncompleteError(
                    f"topic {topic.name!r} is incomplete: {len(missing)} replicas (partition, replica) did not "
                    f"start within {self.config.request_timeout_ms} ms of the last one that did: {missing[:10]}"
                    f"{' ...' if len(missing) > 10 else ''}; create it again to finish it", missing)
            for fut in done:
                key = pending.pop(fut)
                if fut.exception() is None:
                    self._mark_alive(key)
                    progress["started"] += 1
                    progress["missing"].discard((key[1], key[2]))
                else:
                    failures.append(f"replica {key[2]} of partition {key[1]}: {fut.exception()}")
        if progress["missing"]:
            missing = sorted(progress["missing"])
            raise TopicCreationIncompleteError(
                f"topic {topic.name!r} is incomplete: {len(missing)} replicas (partition, replica) did not start: "
                f"{missing[:10]}{' ...' if len(missing) > 10 else ''} ({'; '.join(failures[:3]) or 'no actor'}); "
                "create it again to finish it", missing)
        self._creating.pop(topic.name, None)
        for p in partitions:
            self._push(topic, p)

    async def delete_topic(self, name: str) -> None:
        """Record the deletion, then remove each replica's files in the background: a replica that
        is down or stops answering is finished later (its node's files are removed once the node
        answers), and a new topic of the same name never reopens them (its topic id differs)."""
        validate_topic_name(name)
        await self._ensure_started()
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"topic {name!r} is raylog's own and cannot be deleted")
        records, topic = self.state.delete_topic(name, lambda r: True)
        self._commit(records)
        for p, part in enumerate(topic.partitions):
            for r in part["replicas"]:
                key = self._key(topic, p, r["replica_id"])
                self.handles.pop(key, None)
                self.alive.discard(key)
                task = self._watchers.pop(key, None)
                if task is not None:
                    task.cancel()
                replica = self.state.pending_deletions[(topic.topic_id, p, r["replica_id"])]
                self._background.append(asyncio.get_running_loop().create_task(
                    self._finish_deletion(topic.topic_id, p, r["replica_id"], replica)))

    async def _finish_deletion(self, topic_id: str, p: int, rid: int, replica: dict) -> None:
        """Delete one replica's files: through its actor, or, when the actor is gone or does not
        answer, with a task on its node. Waits while the node is down."""
        name = replica_actor_name(replica["topic"], topic_id, p, rid)
        while (topic_id, p, rid) in self.state.pending_deletions:
            if replica["node_id"] in self.nodes_alive:
                try:
                    handle = ray.get_actor(name, namespace=self.namespace)
                except ValueError:
                    handle = None
                if handle is not None:
                    await self._delete_replica(handle)
                try:
                    await _remove_directory.options(
                        scheduling_strategy=placement_nodes.pinned(replica["node_id"])).remote(
                            replica["directory"], topic_id)
                except Exception:  # noqa: BLE001 - the node went away meanwhile: try again when it is back
                    await asyncio.sleep(ATTACH_RETRY_S)
                    continue
                self._commit(self.state.replica_deleted(topic_id, p, rid))
                return
            await asyncio.sleep(self.config.node_check_interval_ms / 1000)

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        await self._ensure_started()
        return sorted(n for n in self.state.topics if include_internal or n not in INTERNAL_TOPICS)

    async def describe_topic(self, name: str) -> TopicDescription:
        validate_topic_name(name)
        await self._ensure_started()
        return self._describe(self.state.topic(name))

    async def topic_metadata(self, name: str) -> tuple[TopicDescription, list]:
        """The topic's description and each partition's leader handle (None while offline)."""
        validate_topic_name(name)
        await self._ensure_started()
        topic = self.state.topic(name)
        leaders = []
        for p, part in enumerate(topic.partitions):
            if part["leader"] == NO_LEADER:
                leaders.append(None)
                continue
            key = self._key(topic, p, part["leader"])
            if key not in self.handles:
                self._ensure_replica(topic, p, replica_of(part, part["leader"]))
            leaders.append(self.handles.get(key))
        return self._describe(topic), leaders

    async def partition_states(self, name: str) -> list[dict]:
        """Per partition: leader, replicas (with node and liveness), ISR, epochs, reassignment."""
        validate_topic_name(name)
        await self._ensure_started()
        topic = self.state.topic(name)
        out = []
        for p, part in enumerate(topic.partitions):
            alive = self._is_alive(topic, p)
            out.append({
                "partition": p, "leader": part["leader"], "leader_epoch": part["leader_epoch"],
                "partition_epoch": part["partition_epoch"], "isr": list(part["isr"]),
                "replicas": [{**r, "alive": alive(r["replica_id"]), "node_alive": r["node_id"] in self.nodes_alive}
                             for r in part["replicas"]],
                "adding": list(part["adding"]), "removing": list(part["removing"]),
                "offline": part["leader"] == NO_LEADER,
                "under_replicated": len(part["isr"]) < len(part["replicas"]) - len(part["adding"]),
            })
        return out

    async def replica_handles(self, name: str, partition: int) -> dict:
        """replica id -> actor handle, for admin calls that need a follower (describe, tests)."""
        validate_topic_name(name)
        await self._ensure_started()
        topic = self.state.topic(name)
        part = self.state.partition(name, partition)
        return {r["replica_id"]: self.handles.get(self._key(topic, partition, r["replica_id"]))
                for r in part["replicas"]}

    async def describe_cluster(self) -> dict:
        """The controller's node and process, the head node, the live nodes and their replica counts."""
        await self._ensure_started()
        load, leaders = self.state.replica_load()
        return {"controller": {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()},
                "head_node": self.head_node,
                "nodes": [{"node_id": n, "replicas": load[n], "preferred_leaders": leaders[n]}
                          for n in sorted(self.nodes_alive)]}

    async def cluster_config(self) -> dict:
        return self.config.to_dict()

    async def ping(self) -> int:
        return os.getpid()

    async def high_watermarks(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> high watermark, for those of ``topics`` whose leader has sent one in
        a heartbeat (every replica_heartbeat_interval_ms): group coordinators compute lag with it."""
        wanted = {args.text("topic", t, 249) for t in args.sequence("topics", topics, 1 << 20)}
        return {tp: hw for tp, hw in self._high_watermarks.items() if tp[0] in wanted}

    def _describe(self, topic: TopicState) -> TopicDescription:
        parts = []
        for p, part in enumerate(topic.partitions):
            assigned = tuple(ReplicaAssignment(r["node_id"], r["directory"], r["replica_id"])
                             for r in part["replicas"])
            leader = next((a for a in assigned if a.replica_id == part["leader"]), None)
            name = (replica_actor_name(topic.name, topic.topic_id, p, part["leader"])
                    if leader is not None else "")
            parts.append(PartitionInfo(topic.name, p, leader, assigned, part["leader_epoch"], name,
                                       tuple(part["isr"]), part["partition_epoch"]))
        return TopicDescription(topic.name, tuple(parts), dict(topic.config), internal=topic.name in INTERNAL_TOPICS,
                                topic_id=topic.topic_id)

    async def topic_config(self, name: str) -> dict:
        """The topic's whole config (field -> value), the fields it sets, and its config version."""
        validate_topic_name(name)
        await self._ensure_started()
        topic = self.state.topic(name)
        return {"config": dict(topic.config), "overrides": list(topic.overrides),
                "config_version": topic.config_version}

    async def alter_topic_config(self, name: str, set_values: dict | None = None, delete: list | None = None,
                                 validate_only: bool = False, replace: bool = False) -> dict:
        """Kafka's (Incremental)AlterConfigs for one topic: SET ``set_values``, DELETE (back to the
        default) ``delete``; with ``replace`` every set config not given returns to its default. The
        whole new config is validated first (InvalidConfigError, nothing changes); with
        ``validate_only`` nothing changes either. Otherwise it is written to the metadata log, then
        every live replica of the topic is told and answers once it applied it (those that do not
        answer within half request_timeout_ms, and those down, get it with their next state: a
        replica's heartbeat names the config version it holds). A change of
        unclean_leader_election_enable applies to the controller's next election; enabling it
        elects leaders for offline partitions now. Returns topic_config's answer."""
        validate_topic_name(name)
        set_values = args.mapping("set_values", {} if set_values is None else set_values)
        delete = [args.text("delete", k, 255) for k in args.sequence("delete", [] if delete is None else delete, 1024)]
        if not isinstance(validate_only, bool) or not isinstance(replace, bool):
            raise InvalidRequestError("validate_only and replace must be bools")
        await self._ensure_started()
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"topic {name!r} is raylog's own: its config is fixed")
        records, altered = self.state.alter_topic_config(name, set_values, delete, replace)
        topic = self.state.topic(name)
        if altered.config.min_insync_replicas > topic_configs.replication_factor_of(topic.partitions):
            log_event(logger, "min_insync_above_replication", logging.WARNING, topic=name,
                      min_insync_replicas=altered.config.min_insync_replicas,
                      consequence="acks_all_fails_with_NotEnoughReplicasError")
        if validate_only or not records:
            answer = await self.topic_config(name)
            if validate_only:
                answer.update(config=altered.config.to_dict(), overrides=list(altered.overrides))
            return answer
        self._commit(records)
        log_event(logger, "topic_config_altered", topic=name, config_version=topic.config_version,
                  keys=",".join(sorted(set_values) + delete))
        calls = []
        for p, part in enumerate(topic.partitions):
            for rid in replica_ids(part):
                key = self._key(topic, p, rid)
                handle = self.handles.get(key)
                if handle is not None and key in self.alive:
                    calls.append(asyncio.wait_for(handle.set_config.remote(dict(topic.config), topic.config_version),
                                                  self.config.request_timeout_ms / 2000))
        await asyncio.gather(*calls, return_exceptions=True)
        if self._unclean(topic):
            for p, part in enumerate(topic.partitions):
                epoch = part["leader_epoch"]
                self._elect_if_needed(topic, p)
                if topic.partitions[p]["leader_epoch"] != epoch:
                    self._push(topic, p)
        return await self.topic_config(name)

    async def check_topic(self, name: str) -> None:
        """Raise UnknownTopicOrPartitionError unless the topic exists."""
        validate_topic_name(name)
        await self._ensure_started()
        if name not in self.state.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")


_REPLICA_CLASS = None


def _replica_class():
    """One Ray actor class for every replica: each ``ray.remote(cls)`` is a new class that Ray
    exports and its workers load again."""
    global _REPLICA_CLASS
    if _REPLICA_CLASS is None:
        _REPLICA_CLASS = ray.remote(PartitionReplica)
    return _REPLICA_CLASS


@ray.remote(num_cpus=0, max_retries=0)
def _remove_directory(directory: str, topic_id: str) -> None:
    """On the replica's node: remove a deleted replica's directory if it still belongs to that topic
    incarnation, and the topic id's directory above it once it is empty."""
    import shutil
    from pathlib import Path

    from raylog.storage import files

    path = Path(directory)
    if files.read_text_value(path / files.PARTITION_METADATA_FILE) in (None, topic_id):
        shutil.rmtree(path, ignore_errors=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # other partitions of the topic are still there
