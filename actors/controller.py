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
- **Nodes**: a raylog node is a data directory with an identity
  (raylog/storage/node_directory.py); the controller speaks for the head
  node's, and a node agent (actors/node_agent.py) for each other Ray node's.
  ``ray.nodes()`` every node_check_interval_ms (one call to Ray's GCS) says
  which Ray nodes run: a new one registers (the agent tells which node id its
  directory holds; a new directory gets the next id) and its replicas are
  started, recovering their logs in place; a raylog node whose Ray node died
  is missing, and its replicas leave the ISR. Only after node_lost_timeout_ms
  missing are its replicas moved to a live node without a replica of the
  partition (the new replica catches up and joins the ISR, then the lost one
  is dropped, as Kafka's reassignment does).
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

import copy
import asyncio
import dataclasses
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
from actors.node_agent import NodeAgent
from actors.replica import PartitionReplica
from placement import nodes as placement_nodes
from placement.policy import assign_replicas, check_replication_factor, replacement_node
from raylog import topic_configs
from raylog.config import ClusterConfig, TopicConfig
from raylog.errors import (
    InvalidReplicationFactorError, InvalidRequestError, InvalidTopicError, LogDirError, RaylogError,
    ReplicaNotAvailableError, TopicCreationIncompleteError, UnknownTopicOrPartitionError,
)
from raylog.logs import configure_actor_logging, get_logger, log_event
from raylog.naming import (
    INTERNAL_TOPICS, OFFSETS_TOPIC, coordinator_actor_name, kafka_listener_actor_name, node_agent_actor_name,
    replica_actor_name,
    validate_topic_name, validate_topic_shape,
)
from raylog.protocol import PartitionInfo, ReplicaAssignment, TopicDescription
from raylog.storage import batch as record_batch
from raylog.storage import node_meta
from raylog.storage.log import PartitionLog
from raylog.storage.node_directory import NodeDirectory
from raylog.storage.node_meta import NodeMeta

METADATA_LOG_CONFIG = TopicConfig(flush_messages=1, retention_ms=-1, segment_bytes=64 * 1024 * 1024,
                                  segment_index_bytes=1024 * 1024)
"""The metadata log keeps everything (no retention) and fsyncs each record: changes are rare and
must survive a power loss of the controller's node."""
OFFSETS_TOPIC_CONFIG = {"cleanup_policy": "compact", "segment_bytes": 100 * 1024 * 1024}
"""Kafka's offsets topic settings: compacted (the last record per key is the state), 100 MiB
segments (offsets.topic.segment.bytes); commits are written with acks='all', and
min_insync_replicas follows the replication factor as for any topic (2 with 3 replicas)."""
ATTACH_RETRY_S = 1.0
"""How long the controller waits before asking a replica it could not reach whether it is back, and
how often a creation waiting for replicas to start looks whether their nodes are still there."""
REGISTER_RETRY_S = 5.0
"""How long a Ray node whose registration failed (its agent not answering, its data directory still
locked by a process of its previous session, or refused) waits before it is tried again."""
_TOPIC_ID = re.compile(r"[0-9a-f]{32}")
"""What a caller-picked topic id may be: it names the partition directories, so nothing else."""

logger = get_logger(__name__)


class Controller:
    def __init__(self, cluster_config: dict):
        configure_actor_logging()
        self.config = ClusterConfig(**cluster_config)
        self.namespace = self.config.namespace
        # The controller speaks for the head node: it holds the head's data directory (its lock and
        # identity), where the metadata log lives; node agents do the same on the other nodes.
        self.head_directory = NodeDirectory(placement_nodes.own_data_dir(self.config.data_root))
        self.head_directory.check_writable()
        self.head_directory.lock.acquire(timeout_s=self.config.replica_session_timeout_ms / 1000)
        self.metadata_log = PartitionLog(self.head_directory.metadata_log_path, METADATA_LOG_CONFIG)
        identity = process_state.own_identity()
        self._identity = identity.to_list() if identity is not None else None
        """Sent with every heartbeat answer: a replica on this host tells a busy controller from a stopped one."""
        self.state = ControllerState()
        self._state_changed = asyncio.Event()
        """Set on every committed change and every replica coming alive: what a drain waits for."""
        for record in self._read_metadata_log():
            self.state.replay(record)
        self.metrics = ControllerMetrics()
        self._bootstrap_identity()
        self.head_node: int = self.state.head_node_id
        self.handles: dict[tuple, object] = {}
        """(topic_id, partition, replica_id) -> the replica's actor handle."""
        self.alive: set[tuple] = set()
        """Replicas whose actor answered attach() and whose watch() has not failed since."""
        self.node_sessions: dict[int, str] = {}
        """raylog node id -> the Ray node id it runs on this session (registered, its Ray node alive)."""
        self.node_dirs: dict[int, str] = {}
        """raylog node id -> where its data directory is this session."""
        self.node_missing_since: dict[int, float] = {n: time.monotonic() for n in self.state.nodes}
        """Registered nodes not running now -> time.monotonic() since when (this controller's start
        for those it has not seen yet): past node_lost_timeout_ms their replicas are moved."""
        self._registering: dict[str, asyncio.Task] = {}
        """Ray node id -> the registration of the raylog node on it, while under way."""
        self._refused: dict[str, tuple[str, float]] = {}
        """Ray node id -> (why its registration failed, when): tried again after REGISTER_RETRY_S."""
        self._agents: dict[str, object] = {}
        self.listeners: dict[int, object] = {}
        """raylog node id -> its Kafka listener actor (this Ray session's), when kafka_listener is set."""
        self._listener_starts: dict[int, asyncio.Task] = {}
        self._replicas_starting: set[tuple] = set()
        self._declared_lost: set[int] = set()
        """Nodes missing past node_lost_timeout_ms (logged once as node_lost)."""
        self._start_done = False
        self._watchers: dict[tuple, asyncio.Task] = {}
        self._pids: dict[tuple, int] = {}
        """Replica -> the pid of the process last attached (a heartbeat from another one: it restarted)."""
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
        if OFFSETS_TOPIC in self.state.topics:
            # The group -> coordinator mapping depends on the offsets topic's partition count, which
            # is fixed once the topic exists, whatever a restart's settings say (as Kafka's).
            count = len(self.state.topics[OFFSETS_TOPIC].partitions)
            if count != self.config.offsets_topic_num_partitions:
                logger.warning("%s has %d partitions; offsets_topic_num_partitions=%d is ignored", OFFSETS_TOPIC,
                               count, self.config.offsets_topic_num_partitions)
                self.config = dataclasses.replace(self.config, offsets_topic_num_partitions=count)

    @property
    def nodes_alive(self) -> set[int]:
        return set(self.node_sessions)

    def _bootstrap_identity(self) -> None:
        """Make the metadata log and the head's data directory agree on who they are: a new cluster
        gets its id and the head node id 0 (metadata first, then meta.properties); a log written
        before node identity becomes a cluster, adopting what it can; anything inconsistent is
        refused (InconsistentClusterIdError, LogDirError) before the controller serves anything."""
        directory = self.head_directory
        meta = directory.identity()
        host = placement_nodes.own_address()
        if self.state.cluster_id is None:
            if meta is not None:
                raise LogDirError(
                    f"{directory.path} is node {meta.node_id} of cluster {meta.cluster_id} but holds no controller "
                    "metadata: the metadata log lives in the head node's data directory, so start the head node "
                    "on the disk that holds it (or give this head node a new data directory, for a new cluster)")
            legacy = bool(self.state.topics or self.state.pending_deletions)
            self._commit(self.state.create_cluster(node_meta.new_cluster_id(), 0, host, str(directory.path)))
            if legacy:
                records = self.state.adopt_legacy_nodes(0, lambda rel: (directory.path / rel).is_dir())
                self._commit(records)
                log_event(logger, "legacy_data_adopted", logging.WARNING, data_dir=directory.path,
                          nodes_adopted=len(records))
        else:
            if meta is not None:
                meta.check_cluster(self.state.cluster_id, directory.path)
                if meta.node_id != self.state.head_node_id:
                    raise LogDirError(
                        f"{directory.path} is node {meta.node_id}, but the metadata log in it was written by node "
                        f"{self.state.head_node_id}: the directory's files were mixed by hand")
            self._commit(self.state.register_node(self.state.head_node_id, host, str(directory.path)))
        directory.format(NodeMeta(self.state.cluster_id, self.state.head_node_id))

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
        self._state_changed.set()

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
        """Set every partition's ISR size, under-replicated and offline gauges (those changed or due again)."""
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
        """Bring the cluster up from the metadata log: register the nodes that are up (the head at
        once, the others through their node agents), attach to the replicas that run (a restarted
        controller finds them all), start the missing ones in the background, and elect leaders
        where the old one is not running. After a whole-cluster restart nothing runs yet: every
        partition is offline, its ISR kept, until a member of that ISR is back (then it leads)."""
        await self._nodes_registered()
        nodes = self.nodes_alive
        replicas = [(topic, p, r, None) for topic in list(self.state.topics.values())
                    for p, part in enumerate(topic.partitions) for r in part["replicas"] if r["node_id"] in nodes]
        await self._ensure_replicas(replicas, create=False)
        keys = [k for k in (self._key(t, p, r["replica_id"]) for t, p, r, _ in replicas) if k in self.handles]
        statuses = await asyncio.gather(*(self._attach(k, timeout_s=self.config.request_timeout_ms / 1000)
                                          for k in keys), return_exceptions=True)
        for key, status in zip(keys, statuses):
            if isinstance(status, dict):
                self._mark_alive(key)
        for topic in list(self.state.topics.values()):
            for p in range(len(topic.partitions)):
                self._elect_if_needed(topic, p)
                self._push(topic, p)
        self._start_done = True
        # The rest (not answering yet, stopped, recovering a large log, or not started at all) are
        # started or waited for in the background, and rejoin as they answer.
        for node in sorted(nodes):
            self._start_node_replicas(node)
        loop = asyncio.get_running_loop()
        if OFFSETS_TOPIC in self.state.topics:
            topic = self.state.topic(OFFSETS_TOPIC)
            for p in range(len(topic.partitions)):
                self._ensure_coordinator(topic, p)
        self._background.append(loop.create_task(self._node_loop()))
        self._background.append(loop.create_task(self._preferred_leader_loop()))
        if self.config.offsets_topic_eager and OFFSETS_TOPIC not in self.state.topics:
            self._background.append(loop.create_task(self._offsets_topic_with_the_cluster()))

    async def _offsets_topic_with_the_cluster(self) -> None:
        """__consumer_offsets and its coordinators made as the cluster starts: the first consumer
        group of a new cluster otherwise waited for their processes to start (kafka-python's
        consumer_timeout_ms=5000 ended with nothing read, issue 33)."""
        try:
            await self.ensure_offsets_topic()
        except Exception:  # noqa: BLE001 - the first group to join asks again
            logger.exception("creating %s with the cluster failed; the first consumer group creates it",
                             OFFSETS_TOPIC)

    # --- nodes: identity, registration, liveness ---------------------------------------------------

    async def _refresh_nodes(self) -> set[int]:
        """Ask Ray which nodes are alive: raylog nodes whose Ray node died are missing from now on
        (returned); a Ray node not seen before starts registering (the head at once, the others
        through their node agent). Registration is a task: it needs the agent, which may be starting."""
        infos = await asyncio.get_running_loop().run_in_executor(None, placement_nodes.alive_nodes)
        alive = {n.ray_node_id: n for n in infos}
        now = time.monotonic()
        died = {node for node, ray_node in self.node_sessions.items() if ray_node not in alive}
        for node in died:
            del self.node_sessions[node]
            self.node_dirs.pop(node, None)
            self.node_missing_since[node] = now
        running = set(self.node_sessions.values())
        for ray_node, info in alive.items():
            if ray_node in running or ray_node in self._registering:
                continue
            refused = self._refused.get(ray_node)
            if refused is not None and now - refused[1] < REGISTER_RETRY_S:
                continue
            if info.is_head:
                self._node_up(self.head_node, ray_node, str(self.head_directory.path), info.address)
            else:
                task = asyncio.get_running_loop().create_task(self._register(info))
                self._registering[ray_node] = task
        for gone in (set(self._refused) | set(self._agents)) - set(alive):
            self._refused.pop(gone, None)
            self._agents.pop(gone, None)
        for node in died:
            self.listeners.pop(node, None)
        return died

    async def _nodes_registered(self) -> None:
        """Look at Ray's nodes, and wait for the registrations that starts to end: placing a new
        topic's replicas, or starting up, needs every node that is there. However long a node
        agent takes to start (a loaded machine once left a placement one node short of a 1.5 s
        window): a registration ends when the agent answers, or Ray fails it or its node."""
        await self._refresh_nodes()
        if self._registering:
            await asyncio.wait(list(self._registering.values()))

    async def _register(self, info: placement_nodes.RayNode) -> None:
        """Learn which raylog node runs on a Ray node, from its agent: a data directory with an
        identity is that node again (its replicas recover in place); one without gets the next node
        id, recorded before the directory is formatted. Refused (logged, tried again later): another
        cluster's directory, one whose lock another live process holds, a node id already running
        elsewhere."""
        ray_node = info.ray_node_id
        try:
            agent = self._agents.get(ray_node) or await asyncio.to_thread(self._ensure_agent, ray_node)
            self._agents[ray_node] = agent
            found = await agent.identify.remote(self.state.cluster_id)
            node = found["node_id"]
            if node is None:
                node = self.state.next_node_id()
                self._commit(self.state.register_node(node, info.address, found["data_dir"]), "new_node")
                await agent.format.remote(self.state.cluster_id, node)
            elif node in self.node_sessions and self.node_sessions[node] != ray_node:
                raise LogDirError(f"data directory {found['data_dir']} on Ray node {ray_node} is node {node}, "
                                  f"which already runs on Ray node {self.node_sessions[node]}: two Ray nodes share "
                                  "one data directory's identity (copied by hand?)")
            else:
                self._commit(self.state.register_node(node, info.address, found["data_dir"]))
        except Exception as exc:  # noqa: BLE001 - refused or not answering: looked at again later
            message = f"{type(exc).__name__}: {exc}" if isinstance(exc, RaylogError) else repr(exc)
            if self._refused.get(ray_node, ("",))[0] != message:
                self.metrics.event("node_refused")
                log_event(logger, "node_refused", logging.ERROR, ray_node=ray_node, address=info.address,
                          reason=message)
            self._refused[ray_node] = (message, time.monotonic())
            return
        finally:
            self._registering.pop(ray_node, None)
        self._refused.pop(ray_node, None)
        self._node_up(node, ray_node, found["data_dir"], info.address)

    async def _start_listener(self, node: int, ray_node: str) -> None:
        """Start the node's Kafka listener (one per node, speaking for its raylog node id), or find
        the one running; it binds on its first address() call. Ray restarts it on its node; it ends
        with the node, and the node's next registration starts another."""
        options = placement_nodes.agent_actor_options(ray_node, kafka_listener_actor_name(ray_node), self.namespace)

        def start():
            # Imported in this worker thread: an import on the loop holds every heartbeat behind it.
            from actors.kafka_listener import KafkaListenerActor

            return _actor_class(KafkaListenerActor).options(**options, get_if_exists=True).remote(
                self.namespace, node, self.head_node)
        try:
            handle = await asyncio.to_thread(start)
        except Exception:  # noqa: BLE001 - the node is going away: its next registration starts one
            logger.exception("the Kafka listener of node %d did not start", node)
            return
        if self.node_sessions.get(node) == ray_node:
            self.listeners[node] = handle

    async def kafka_brokers(self) -> list[dict]:
        """Every running node's Kafka listener as Kafka's Metadata names brokers: [{"node_id", "host",
        "port"}], the head's first; [] when kafka_listener is off. A listener not answering within
        request_timeout_ms (its node going away) is left out."""
        if not self.config.kafka_listener:
            return []
        await self._ensure_started()
        timeout_s = self.config.request_timeout_ms / 1000
        starting = [t for n, t in self._listener_starts.items() if n in self.node_sessions and not t.done()]
        if starting:
            await asyncio.wait(starting, timeout=timeout_s)
        nodes = sorted(self.listeners, key=lambda n: (n != self.head_node, n))
        calls = [asyncio.ensure_future(_awaited(self.listeners[n].address.remote())) for n in nodes]
        if not calls:
            return []
        await asyncio.wait(calls, timeout=timeout_s)
        out = []
        for call in calls:
            if call.done() and call.exception() is None:
                out.append(call.result())
            else:
                call.cancel()
        return out

    def _ensure_agent(self, ray_node: str):
        """The node agent of a Ray node: found by name, else started there. Blocking (Ray's GCS)."""
        name = node_agent_actor_name(ray_node)
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            pass
        return _actor_class(NodeAgent).options(**placement_nodes.agent_actor_options(ray_node, name, self.namespace)).remote(
            self.config.data_root)

    def _node_up(self, node: int, ray_node: str, data_dir: str, address: str) -> None:
        """A raylog node runs on ``ray_node`` from now on: its replicas are started (recovering their
        logs in place) and rejoin their partitions; a drain it was under ends with the restart."""
        returned = node in self.node_missing_since
        missing_s = time.monotonic() - self.node_missing_since.pop(node, time.monotonic())
        self.node_sessions[node] = ray_node
        self.node_dirs[node] = data_dir
        self.metrics.event("node_registered")
        log_event(logger, "node_registered", node=node, ray_node=ray_node, address=address, data_dir=data_dir,
                  **({"missing_s": round(missing_s, 1)} if returned else {}))
        self._drain_ended(node, self.state.restarted(node, ray_node), "node_restarted")
        if self.config.kafka_listener:
            self._listener_starts[node] = asyncio.get_running_loop().create_task(self._start_listener(node, ray_node))
        if self._start_done:
            self._start_node_replicas(node)

    def _start_node_replicas(self, node: int) -> None:
        """Start (or find) every replica placed on ``node`` and watch each back into its partition;
        and finish deleting what was dropped from it while it was missing."""
        wanted = [(topic, p, r) for topic in list(self.state.topics.values())
                  for p, part in enumerate(topic.partitions) for r in part["replicas"] if r["node_id"] == node]
        wanted = [(t, p, r) for t, p, r in wanted if self._key(t, p, r["replica_id"]) not in self.alive
                  and self._key(t, p, r["replica_id"]) not in self._replicas_starting]
        loop = asyncio.get_running_loop()
        if wanted:
            self._background.append(loop.create_task(self._start_replicas(wanted)))
        for (topic_id, p, rid), replica in list(self.state.pending_deletions.items()):
            if replica["node_id"] == node:
                self._background.append(loop.create_task(self._finish_deletion(topic_id, p, rid, replica)))

    async def _start_replicas(self, wanted: list[tuple[TopicState, int, dict]]) -> None:
        """Start these replicas replica_start_concurrency at a time, each until it answers (see
        _await_return), so a node with hundreds of replicas does not start them all at once."""
        gate = asyncio.Semaphore(self.config.replica_start_concurrency)

        async def one(topic: TopicState, p: int, replica: dict) -> None:
            key = self._key(topic, p, replica["replica_id"])
            async with gate:
                self._replicas_starting.add(key)
                try:
                    await self._ensure_replicas([(topic, p, replica, None)])
                    await self._await_return(key)
                finally:
                    self._replicas_starting.discard(key)

        await asyncio.gather(*(one(t, p, r) for t, p, r in wanted), return_exceptions=True)

    async def _node_loop(self) -> None:
        nodes_every_s = self.config.node_check_interval_ms / 1000
        # Silent replicas are looked for every half heartbeat interval, not with the nodes (one GCS
        # call): a paused leader is fenced within 250 ms of its session's end at defaults, not
        # within a second. Issue 31's chaos run measured a paused leader's partition acknowledging
        # again 3.5-5.2 s after the pause with a 4 s session, against a target of session + 2 s.
        interval_s = min(nodes_every_s, self.config.replica_heartbeat_interval_ms / 2000)
        last = time.monotonic()
        nodes_at = last + nodes_every_s
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
            try:
                self._fence_silent_replicas(now)
                self._check_coordinators(now)
                if now >= nodes_at:
                    nodes_at = now + nodes_every_s
                    await self._check_nodes(now)
            except Exception:  # noqa: BLE001 - one bad round must not end fencing and healing for good
                logger.exception("node check failed; trying again next round")

    async def _check_nodes(self, now: float) -> None:
        """The node loop's round every node_check_interval_ms: learn which nodes died or arrived,
        heal, and set the partition and node gauges."""
        try:
            died = await self._refresh_nodes()
        except Exception:  # noqa: BLE001 - the GCS hiccuped: look again next round
            return
        if died:
            self._nodes_died(died)
        self._heal()
        self._report_partitions()
        self.metrics.nodes(self._node_states())

    # --- liveness: heartbeats and fencing --------------------------------------------------------

    async def replica_heartbeat(self, topic_id: str, partition: int, replica_id: int, leader_epoch: int,
                                partition_epoch: int, config_version: int = -1, high_watermark: int = -1,
                                pid: int = -1) -> dict:
        """A replica's heartbeat (Kafka's BrokerHeartbeat, per replica). Renews its session; answers
        whether it is a replica of a partition the controller knows (only then may it hold a lease)
        and, when its state or topic config is older than the controller's, the current state (which
        carries the config). A fenced replica that heartbeats again is alive again, and is told its
        state (it rejoins as a follower). A heartbeat from another process than the one attached
        means that one died unseen: it is mourned first (see _restarted_unseen)."""
        key = (args.text("topic_id", topic_id, 64), args.integer("partition", partition, 0, args.INT32_MAX),
               args.integer("replica_id", replica_id, 0, args.INT32_MAX))
        leader_epoch = args.integer("leader_epoch", leader_epoch, -1, args.INT32_MAX)
        partition_epoch = args.integer("partition_epoch", partition_epoch, -1, args.INT32_MAX)
        config_version = args.integer("config_version", config_version, -1, args.INT32_MAX)
        high_watermark = args.integer("high_watermark", high_watermark, -1)
        pid = args.integer("pid", pid, -1, args.INT32_MAX)
        found = self._locate(key)
        reply = {"controller_pid": os.getpid(), "controller_process": self._identity, "member": found is not None,
                 "state": None}
        if found is None:
            return reply
        self._seen[key] = time.monotonic()
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        topic, p = found
        if pid >= 0 and self._pids.get(key, pid) != pid and key in self.alive and self._started.done():
            self._restarted_unseen(key, pid)
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

    async def _ensure_replicas(self, wanted: list[tuple[TopicState, int, dict, dict | None]],
                               create: bool = True) -> None:
        """``_ensure_replica`` of each (topic, partition, replica, initial state), asking Ray from a
        worker thread: each lookup and creation is a blocking call to Ray's GCS, and hundreds of
        them while replicas starting take every core kept the loop from answering heartbeats for
        minutes (the replicas then killed the controller as hung). ``create=False`` only finds."""
        keyed = [(self._key(t, p, r["replica_id"]), t, p, r, state) for t, p, r, state in wanted]
        missing = [item for item in keyed if item[0] not in self.handles]
        if not missing:
            return
        found = await asyncio.to_thread(
            lambda: [self._find_or_create(t, p, r, state, create) for _, t, p, r, state in missing])
        for (key, *_), handle in zip(missing, found):
            if handle is not None:
                self.handles.setdefault(key, handle)

    def _find_or_create(self, topic: TopicState, p: int, replica: dict, initial_state: dict | None,
                        create: bool = True):
        """The replica's actor by name, else a new one on its node (None when that node is not
        running). Blocking; safe off the loop (it reads only what does not change under it)."""
        name = replica_actor_name(topic.name, topic.topic_id, p, replica["replica_id"])
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            pass
        ray_node, data_dir = self.node_sessions.get(replica["node_id"]), self.node_dirs.get(replica["node_id"])
        if not create or ray_node is None or data_dir is None:
            return None
        options = placement_nodes.replica_actor_options(ray_node, name, self.namespace,
                                                        self.config.replica_max_restarts)
        try:
            return _actor_class(PartitionReplica).options(**options).remote(
                topic.name, p, replica["replica_id"], os.path.join(data_dir, replica["directory"]), topic.config,
                topic.topic_id, self.config.to_dict(), initial_state, config_version=topic.config_version)
        except ValueError:  # created meanwhile by another call of the controller
            return ray.get_actor(name, namespace=self.namespace)

    def _restarted_unseen(self, key: tuple, pid: int) -> None:
        """A replica heartbeats from a new process while the controller still watches the one it
        attached: that one died and Ray restarted it without the watch failing first (seen under
        load: the restarted leader was told its old state and led on at the same epoch, nobody
        elected). It is mourned now, as its death would have been, and the new process attached and
        watched; the old watch, should it fail late, is dropped."""
        log_event(logger, "replica_restarted_unseen", logging.WARNING, topic_id=key[0], partition=key[1],
                  replica=key[2], old_pid=self._pids.get(key), pid=pid)
        self._pids[key] = pid
        old = self._watchers.pop(key, None)
        if old is not None:
            old.cancel()
        self._replica_died(key)
        self._watchers[key] = asyncio.get_running_loop().create_task(self._rewatch(key))

    def _forget(self, key: tuple):
        """Stop tracking a replica's process (its node died, it was removed or deleted): no longer
        alive, unwatched; returns its handle, if it had one."""
        self.alive.discard(key)
        self._pids.pop(key, None)
        task = self._watchers.pop(key, None)
        if task is not None:
            task.cancel()
        return self.handles.pop(key, None)

    async def _rewatch(self, key: tuple) -> None:
        if await self._await_return(key):
            await self._watch(key)

    async def _attach(self, key: tuple, timeout_s: float | None = None) -> dict:
        handle = self.handles[key]
        ref = handle.attach.remote()
        status = await (asyncio.wait_for(ref, timeout_s) if timeout_s else ref)
        if isinstance(status, dict) and isinstance(status.get("pid"), int):
            self._pids[key] = status["pid"]
        if isinstance(status, dict) and status.get("lost_committed"):
            self._lost_committed(key)
        return status

    def _lost_committed(self, key: tuple) -> None:
        """A replica opened its log below the high watermark it had checkpointed: it leaves the ISR
        and the ELR before anyone is elected, so a member that still holds those records leads."""
        found = self._locate(key)
        if found is None:
            return
        topic, p = found
        records, _ = self.state.replica_lost_committed(topic.name, p, key[2])
        if records:
            self._commit(records, "lost_committed_records")
            self._push(topic, p)

    def _mark_alive(self, key: tuple) -> None:
        self.alive.add(key)
        self._state_changed.set()
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
            if node not in self.nodes_alive:
                return False  # started again when its node is back (_node_up)
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
                "ineligible": self.state.ineligible(part),
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

    def _nodes_died(self, died: set[int]) -> None:
        """Nodes whose Ray node died are missing: their replicas leave the ISR (partitions they led
        elect another in-sync replica) and their actors are let go, so the node's next session
        starts new ones under the same names. Their replicas move elsewhere only after
        node_lost_timeout_ms (``_heal``)."""
        for node in sorted(died):
            self.metrics.event("node_missing")
            log_event(logger, "node_missing", logging.WARNING, node=node,
                      replicas=sum(r["node_id"] == node for t in self.state.topics.values()
                                   for part in t.partitions for r in part["replicas"]),
                      node_lost_timeout_ms=self.config.node_lost_timeout_ms)
        gone = []
        for topic in list(self.state.topics.values()):
            for p, part in enumerate(topic.partitions):
                lost = {r["replica_id"] for r in part["replicas"] if r["node_id"] in died}
                if not lost:
                    continue
                for rid in lost:
                    handle = self._forget(self._key(topic, p, rid))
                    if handle is not None:
                        gone.append(handle)
                records, _ = self.state.replicas_lost(topic.name, p, lost, self._is_alive(topic, p),
                                                      self._unclean(topic))
                self._commit(records, "node_lost")
                self._push(topic, p)
        if gone:
            # Frees their names; a zombie process Ray has not ended yet keeps its partition directory's
            # lock, so the next session's replica opens the files only once it is gone.
            asyncio.get_running_loop().run_in_executor(None, _kill_all, gone)

    def _heal(self) -> None:
        """Move the replicas of nodes missing for node_lost_timeout_ms to live nodes (one reassignment
        per partition at a time), copying from the partition's leader. A partition with no leader
        (its only in-sync replicas are on missing nodes, as an RF=1 partition's) is left offline,
        never re-created empty: it comes back with its node."""
        wait_ms = self.config.node_lost_timeout_ms
        if wait_ms < 0:
            return
        now = time.monotonic()
        lost = {n for n, since in self.node_missing_since.items() if (now - since) * 1000 >= wait_ms}
        for node in sorted(lost - self._declared_lost):
            self.metrics.event("node_lost")
            log_event(logger, "node_lost", logging.WARNING, node=node,
                      missing_s=round(now - self.node_missing_since[node], 1),
                      consequence="replicas_move_to_live_nodes")
        self._declared_lost = lost
        if not lost:
            return
        load, _ = self.state.replica_load()
        secondary = {self.head_node}
        live = sorted(self.nodes_alive - self.state.draining_nodes())
        for topic in list(self.state.topics.values()):
            for p, part in enumerate(topic.partitions):
                if part["adding"] or part["leader"] == NO_LEADER:
                    continue
                nodes = [r["node_id"] for r in part["replicas"]]
                gone = [n for n in nodes if n in lost]
                if not gone:
                    continue
                # Survivors keep their order (the first is the preferred leader); replacements go last.
                target = [n for n in nodes if n not in gone]
                unreplaced = []
                for missing in gone:
                    new = replacement_node(nodes + target, live, load, secondary)
                    if new is None:
                        unreplaced.append(missing)  # stays a member until a node is free for it
                        continue
                    target.append(new)
                    load[new] += 1
                if len(unreplaced) == len(gone):
                    continue
                # The head stays last in the order, so it leads only when no other replica can.
                target = sorted(target, key=lambda n: n in secondary) + unreplaced
                records, state = self.state.reassign(topic.name, p, target)
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
            handle = self._forget(self._key(topic, p, r["replica_id"]))
            if handle is not None and r["node_id"] in self.nodes_alive:
                asyncio.get_running_loop().create_task(self._delete_replica(handle))
            else:
                # Its node is missing (or its actor never started): the files go once the node is back.
                self._commit(self.state.replica_removal_pending(topic.name, p, r))
                if r["node_id"] in self.nodes_alive:
                    self._background.append(asyncio.get_running_loop().create_task(self._finish_deletion(
                        topic.topic_id, p, r["replica_id"], self.state.pending_deletions[
                            (topic.topic_id, p, r["replica_id"])])))

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

    async def drain_node(self, node_id: int, cancel: bool = False, timeout_ms: int = 0) -> dict:
        """Kafka's controlled shutdown of one node: it is marked draining (no leadership, no new
        replicas, not added to any ISR, until it restarts), leadership of every partition it leads
        moves to another live in-sync replica, and its replicas leave the ISRs where another member
        stays; then each of its replicas is told and answers as a follower. A partition whose only
        in-sync replica is there, or whose ISR it cannot leave yet, waits, up to ``timeout_ms``, for
        another live replica to catch up and join its ISR or come back (Kafka's broker retries its
        controlled shutdown the same way). Returns what is left: ``leaders`` it still has (listed in
        ``blocked``: they go offline while it is down), ISRs it is still in, and ``can_stop`` (it
        leads nothing). ``cancel`` ends a drain without a restart."""
        node_id = args.integer("node_id", node_id, 0, args.INT32_MAX)
        if not isinstance(cancel, bool):
            raise InvalidRequestError(f"cancel must be a bool, got {cancel!r}")
        timeout_ms = args.integer("timeout_ms", timeout_ms, 0, args.INT32_MAX)
        await self._ensure_started()
        if not cancel and node_id not in self.node_sessions:
            raise InvalidRequestError(f"node {node_id} is not running (running: {sorted(self.node_sessions)}): "
                                      "there is nothing to drain")
        records = self.state.set_draining(node_id, not cancel, self.node_sessions.get(node_id, ""))
        if cancel:
            self._drain_ended(node_id, records, "admin_request")
            log_event(logger, "node_drain_cancelled", node=node_id)
            return {"node_id": node_id, "draining": False, "leaders": 0, "in_isr": 0, "blocked": [], "can_stop": False}
        self._commit(records, "admin_request")
        log_event(logger, "node_draining", node=node_id)
        deadline = time.monotonic() + timeout_ms / 1000
        partitions = [(topic, p) for topic in list(self.state.topics.values()) for p in range(len(topic.partitions))]
        while True:
            # Cleared before the moves: a change while they wait on the replicas (a follower joining
            # the ISR) must wake the next look, since the moves ran before it.
            self._state_changed.clear()
            await self._move_off(node_id, partitions)
            blocked, member = self._left_on(node_id)
            in_isr = len(member)
            # Where it still leads or is in sync (a leader is in its ISR), no other replica could
            # take its place yet: a follower is catching up, or a leader restarting is not alive for
            # a moment (seen under load: the drain ended in an ISR it could leave a moment later).
            # Each is moved again as the state changes.
            partitions = [(t, p) for t, p in member if self._may_catch_up(t, p, node_id)]
            left = deadline - time.monotonic()
            node = self.state.nodes.get(node_id)
            if not partitions or left <= 0 or node is None or not node.draining:
                break  # nothing left to wait for, or the drain was cancelled (or the node restarted) meanwhile
            try:
                await asyncio.wait_for(self._state_changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        log_event(logger, "node_drained", node=node_id, leaders_left=len(blocked), isr_left=in_isr)
        return {"node_id": node_id, "draining": True, "leaders": len(blocked), "in_isr": in_isr,
                "blocked": [[t.name, p] for t, p in blocked], "can_stop": not blocked}

    def _drain_ended(self, node_id: int, records: list[dict], reason: str) -> None:
        """Commit the end of a drain, and tell the leaders of the node's partitions that its replicas
        may join their ISRs again (no epoch changes with it, so nothing else would)."""
        self._commit(records, reason)
        if records:
            for topic in list(self.state.topics.values()):
                for p, part in enumerate(topic.partitions):
                    if any(r["node_id"] == node_id for r in part["replicas"]):
                        self._push(topic, p)

    async def _move_off(self, node_id: int, partitions: list[tuple[TopicState, int]]) -> None:
        """Leadership and ISR membership of ``partitions`` off a draining node, then its replicas told."""
        told = []
        for was, p in partitions:
            topic = self.state.topics.get(was.name)
            if topic is None or topic.topic_id != was.topic_id:
                continue  # deleted (or re-created) meanwhile
            records, _ = self.state.move_leaders_off(topic.name, p, node_id, self._is_alive(topic, p))
            self._commit(records, "controlled_shutdown")
            self._push(topic, p)
            for r in topic.partitions[p]["replicas"]:
                key = self._key(topic, p, r["replica_id"])
                handle = self.handles.get(key)
                if r["node_id"] == node_id and handle is not None and key in self.alive:
                    told.append(asyncio.wait_for(handle.set_state.remote(self._view(topic, p)),
                                                 self.config.request_timeout_ms / 1000))
        await asyncio.gather(*told, return_exceptions=True)

    def _left_on(self, node_id: int) -> tuple[list[tuple[TopicState, int]], list[tuple[TopicState, int]]]:
        """The partitions ``node_id`` still leads, and those whose ISR it is still in."""
        blocked, member = [], []
        for topic in self.state.topics.values():
            for p, part in enumerate(topic.partitions):
                there = {r["replica_id"] for r in part["replicas"] if r["node_id"] == node_id}
                if part["leader"] in there:
                    blocked.append((topic, p))
                if there & set(part["isr"]):
                    member.append((topic, p))
        return blocked, member

    def _may_catch_up(self, topic: TopicState, p: int, node_id: int) -> bool:
        """Whether a replica of the partition is on another running node that is not draining, so
        it may yet join the ISR (its process may be restarting or paused: it is waited for too)."""
        draining = self.state.draining_nodes()
        return any(r["node_id"] != node_id and r["node_id"] in self.node_sessions and r["node_id"] not in draining
                   for r in topic.partitions[p]["replicas"])

    async def replica_corrupt(self, topic_id: str, partition: int, replica_id: int, leader_epoch: int,
                              partition_epoch: int) -> dict | None:
        """A leader's report that a batch of its log failed its CRC on disk: another in-sync replica
        leads from now on (the reporter refetches the batch as a follower). Returns the partition's
        view, changed or not (a stale report, or no other in-sync replica alive: the reporter learns
        the state it missed and asks again); None for a partition no longer known."""
        key = (args.text("topic_id", topic_id, 64), args.integer("partition", partition, 0, args.INT32_MAX),
               args.integer("replica_id", replica_id, 0, args.INT32_MAX))
        leader_epoch = args.integer("leader_epoch", leader_epoch, 0, args.INT32_MAX)
        partition_epoch = args.integer("partition_epoch", partition_epoch, 0, args.INT32_MAX)
        await self._ensure_started()
        found = self._locate(key)
        if found is None:
            return None
        topic, p = found
        records, _ = self.state.replica_corrupt(topic.name, p, replica_id, leader_epoch, partition_epoch,
                                                self._is_alive(topic, p))
        if records:
            self._commit(records, "corrupt_batch")
            self._push(topic, p)
        return self._view(topic, p)

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
                args.integer("node id", node, 0, args.INT32_MAX)
        await self._ensure_started()
        out = {}
        for (name, p), target_nodes in reassignments.items():
            topic = self.state.topic(name)
            check_replication_factor(len(target_nodes), len(self.nodes_alive))
            missing = [n for n in target_nodes if n not in self.nodes_alive]
            if missing:
                raise InvalidReplicationFactorError(f"reassignment of {name}-{p} names nodes that are not alive: "
                                                    f"{missing} (alive: {sorted(self.nodes_alive)})")
            before = dict(topic.partitions[p])
            records, state = self.state.reassign(name, p, list(target_nodes))
            self._commit(records, "admin_request")
            self._start_added(topic, p)
            if len(state["replicas"]) != len(before["replicas"]):
                self._drop_removed(topic, p, before)
            out[(name, p)] = [r["node_id"] for r in state["replicas"]]
        return out

    # --- topics --------------------------------------------------------------------------------------

    def _placement(self, count: int, first: int, replication_factor: int) -> list[list[int]]:
        """Nodes for new partitions' replicas: running nodes, a draining one only if too few others run."""
        replicas, leaders = self.state.replica_load()
        live = self.nodes_alive
        undrained = live - self.state.draining_nodes()
        usable = undrained if len(undrained) >= replication_factor else live
        return assign_replicas(count, replication_factor, sorted(usable), replicas, leaders, first, {self.head_node})

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
        await self._nodes_registered()
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
                "missing": sorted(progress["missing"]), "done": not progress["missing"]}

    # --- consumer groups' coordinators ------------------------------------------------------------

    async def ensure_offsets_topic(self) -> int:
        """Create __consumer_offsets and its group coordinators if they do not exist yet (the first
        consumer group asks); returns the partition count. One coordinator actor per partition,
        named, restarted by Ray, started near its partition's leader."""
        await self._ensure_started()
        async with self._offsets_lock():
            existing = self.state.topics.get(OFFSETS_TOPIC)
            if existing is None:
                await self._nodes_registered()
                spare = len(self.nodes_alive - {self.head_node}) or len(self.nodes_alive)
                await self.create_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, min(3, spare),
                                        OFFSETS_TOPIC_CONFIG, internal=True)
            elif OFFSETS_TOPIC in self._creating:  # an earlier creation timed out: this one waits for the rest
                await self.create_topic(OFFSETS_TOPIC, len(existing.partitions), len(existing.partitions[0]["replicas"]),
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
        ray_node = self.node_sessions.get(node) or self.node_sessions[self.head_node]
        from actors.coordinator import GroupCoordinator

        return _actor_class(GroupCoordinator).options(
            name=name, namespace=self.namespace, lifetime="detached", get_if_exists=True, num_cpus=0,
            max_restarts=-1, max_task_retries=0, max_concurrency=1000,
            # Near its partition's leader, but anywhere if that node is gone: it owns no files.
            scheduling_strategy=placement_nodes.pinned(ray_node, soft=True),
        ).remote(p, self.config.to_dict())

    async def topic_partition_counts(self) -> dict[str, int]:
        """Every user topic and its partition count (coordinators resolve subscriptions with it)."""
        await self._ensure_started()
        return {name: len(t.partitions) for name, t in self.state.topics.items() if name not in INTERNAL_TOPICS}

    async def create_partitions(self, name: str, total: int) -> TopicDescription:
        validate_topic_name(name)
        await self._ensure_started()
        await self._nodes_registered()
        topic = self.state.topic(name)
        current = len(topic.partitions)
        records, _ = self.state.create_partitions(name, total, self._placement)
        self._commit(records)
        await self._start_partitions(topic, range(current, total))
        return self._describe(topic)

    async def _start_partitions(self, topic: TopicState, partitions) -> None:
        """Start every replica of these partitions with its role, replica_start_concurrency at a
        time, and wait for each to answer or fail: however slow a busy machine makes a start, only
        an event ends the wait (Ray fails the actor, its node leaves the cluster). Then
        TopicCreationIncompleteError names the missing ones; the topic stays, ``creation_progress``
        reports it, and creating it again with the same shape finishes it."""
        partitions = list(partitions)
        keys = {p: [self._key(topic, p, r["replica_id"]) for r in topic.partitions[p]["replicas"]] for p in partitions}
        waiting = [k for p in partitions for k in keys[p] if k not in self.alive]
        progress = {"started": 0, "total": len(waiting), "missing": {(k[1], k[2]) for k in waiting}}
        self._creating[topic.name] = progress
        queue = [p for p in partitions if any(k not in self.alive for k in keys[p])]
        pending: dict[asyncio.Future, tuple] = {}
        failures = []
        while queue or pending:
            if queue and len(pending) < self.config.replica_start_concurrency:
                wave = []
                while queue and len(pending) + sum(len(keys[p]) for p in wave) < self.config.replica_start_concurrency:
                    wave.append(queue.pop(0))
                # Leaders first, so their handles are in the state their followers start with (a
                # restarted controller may have found a partition offline: its replicas start with no role).
                await self._ensure_replicas([(topic, p, replica_of(topic.partitions[p], topic.partitions[p]["leader"]),
                                              self._view(topic, p)) for p in wave
                                             if topic.partitions[p]["leader"] != NO_LEADER])
                views = {p: self._view(topic, p) for p in wave}
                await self._ensure_replicas([(topic, p, r, views[p]) for p in wave for r in topic.partitions[p]["replicas"]])
                pending.update({asyncio.ensure_future(self._attach(k)): k for p in wave for k in keys[p]
                                if k not in self.alive and k in self.handles})
                continue
            # A start takes 1-2 s of CPU, far more on a loaded machine (a 1.5 s window once failed
            # a creation there): no time limit, but a look at the nodes every ATTACH_RETRY_S, since
            # a replica whose node left never answers (_node_up starts it when the node is back).
            done, _ = await asyncio.wait(list(pending), timeout=ATTACH_RETRY_S, return_when=asyncio.FIRST_COMPLETED)
            for fut, key in list(pending.items()):
                if fut not in done and replica_of(topic.partitions[key[1]], key[2])["node_id"] not in self.nodes_alive:
                    fut.cancel()
                    del pending[fut]
                    failures.append(f"replica {key[2]} of partition {key[1]}: its node left the cluster")
            for fut in done:
                key = pending.pop(fut)
                if fut.exception() is None:
                    self._mark_alive(key)
                    if topic.partitions[key[1]]["leader"] == NO_LEADER:
                        self._elect_if_needed(topic, key[1])
                        self._push(topic, key[1])
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
                self._forget(self._key(topic, p, r["replica_id"]))
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
                if self.state.directory_taken(topic_id, p, replica):
                    # Its delete_data would remove the live replica's files: it only goes away.
                    if handle is not None:
                        ray.kill(handle, no_restart=True)
                    self._commit(self.state.replica_deleted(topic_id, p, rid))
                    return
                if handle is not None:
                    await self._delete_replica(handle)
                try:
                    await self._remove_partition_files(replica["node_id"], replica["directory"], topic_id)
                except Exception:  # noqa: BLE001 - the node went away meanwhile: try again when it is back
                    await asyncio.sleep(ATTACH_RETRY_S)
                    continue
                self._commit(self.state.replica_deleted(topic_id, p, rid))
                return
            await asyncio.sleep(self.config.node_check_interval_ms / 1000)

    async def _remove_partition_files(self, node: int, directory: str, topic_id: str) -> None:
        """Remove a partition directory on a running node, by whoever holds that node's data directory."""
        if node == self.head_node:
            await asyncio.to_thread(self.head_directory.remove_partition, directory, topic_id)
            return
        agent = self._agents.get(self.node_sessions[node])
        if agent is None:
            raise ReplicaNotAvailableError(f"node {node} has no agent yet")
        await asyncio.wait_for(agent.remove_partition.remote(directory, topic_id), self.config.request_timeout_ms / 1000)

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
                "replicas": [{**r, "directory": self._replica_path(r), "alive": alive(r["replica_id"]),
                              "node_alive": r["node_id"] in self.nodes_alive,
                              "ray_node_id": self.node_sessions.get(r["node_id"], "")} for r in part["replicas"]],
                "elr": list(part.get("elr", [])),
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
        """The cluster id, the controller (on the head node) and every registered node: its state
        (``alive``: running with all its replicas up; ``registered``: running, its replicas still
        starting or recovering; ``missing``: not running, with ``missing_ms``, and ``lost`` once past
        node_lost_timeout_ms), where it runs this session, its data directory, and what it holds."""
        await self._ensure_started()
        load, preferred = self.state.replica_load()
        leading = {}
        for topic in self.state.topics.values():
            for part in topic.partitions:
                for r in part["replicas"]:
                    if r["replica_id"] == part["leader"]:
                        leading[r["node_id"]] = leading.get(r["node_id"], 0) + 1
        states = self._node_states(per_node=True)
        now = time.monotonic()
        nodes = []
        for n, node in sorted(self.state.nodes.items()):
            running = n in self.node_sessions
            nodes.append({
                "node_id": n, "state": states[n],
                "ray_node_id": self.node_sessions.get(n, ""), "host": node.host,
                "data_dir": self.node_dirs.get(n, node.data_dir), "draining": node.draining,
                "missing_ms": 0 if running else int((now - self.node_missing_since.get(n, now)) * 1000),
                "lost": n in self._declared_lost, "replicas": load[n], "leaders": leading.get(n, 0),
                "preferred_leaders": preferred[n]})
        return {"cluster_id": self.state.cluster_id,
                "controller": {"node_id": self.head_node, "ray_node_id": ray.get_runtime_context().get_node_id(),
                               "pid": os.getpid()},
                "head_node": self.head_node, "node_lost_timeout_ms": self.config.node_lost_timeout_ms,
                "nodes": nodes}

    # --- Kafka listener users (raylog/kafka/sasl.py) ----------------------------------------

    async def set_user(self, name: str, credentials: dict) -> None:
        """Add a user of the Kafka listener, or replace its credentials (SCRAM's, computed by the
        caller: no password reaches the controller)."""
        name = args.text("name", name, 255)
        checked = {}
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            entry = args.mapping(mechanism, args.mapping("credentials", credentials).get(mechanism),
                                 required=("salt", "stored_key", "server_key", "iterations"))
            checked[mechanism] = {"salt": args.text("salt", entry["salt"], 256),
                                  "stored_key": args.text("stored_key", entry["stored_key"], 256),
                                  "server_key": args.text("server_key", entry["server_key"], 256),
                                  "iterations": args.integer("iterations", entry["iterations"], 4096, 1_000_000)}
        await self._ensure_started()
        self._commit(self.state.set_user(name, checked))
        log_event(logger, "user_set", user=name)

    async def delete_user(self, name: str) -> None:
        name = args.text("name", name, 255)
        await self._ensure_started()
        self._commit(self.state.delete_user(name))
        log_event(logger, "user_deleted", user=name)

    async def list_users(self) -> list[dict]:
        """[{"name", "mechanisms": [...], "iterations"}] of every user, sorted; no credentials."""
        await self._ensure_started()
        return [{"name": n, "mechanisms": sorted(c), "iterations": c["SCRAM-SHA-256"]["iterations"]}
                for n, c in sorted(self.state.users.items())]

    async def user_credentials(self, name: str) -> dict | None:
        """A user's stored SCRAM credentials (the listener checks logins with them), None if none."""
        name = args.text("name", name, 255)
        await self._ensure_started()
        found = self.state.users.get(name)
        return None if found is None else copy.deepcopy(found)

    async def cluster_config(self) -> dict:
        return self.config.to_dict()

    async def ping(self) -> int:
        return os.getpid()

    async def start(self) -> None:
        """Bring the cluster up from the metadata log now rather than on the first request
        (connect() asks without waiting)."""
        await self._ensure_started()

    async def high_watermarks(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> high watermark, for those of ``topics`` whose leader has sent one in
        a heartbeat (every replica_heartbeat_interval_ms): group coordinators compute lag with it."""
        wanted = {args.text("topic", t, 249) for t in args.sequence("topics", topics, 1 << 20)}
        return {tp: hw for tp, hw in self._high_watermarks.items() if tp[0] in wanted}

    def _describe(self, topic: TopicState) -> TopicDescription:
        parts = []
        for p, part in enumerate(topic.partitions):
            assigned = tuple(ReplicaAssignment(r["node_id"], self._replica_path(r), r["replica_id"],
                                               self.node_sessions.get(r["node_id"], ""))
                             for r in part["replicas"])
            leader = next((a for a in assigned if a.replica_id == part["leader"]), None)
            name = (replica_actor_name(topic.name, topic.topic_id, p, part["leader"])
                    if leader is not None else "")
            parts.append(PartitionInfo(topic.name, p, leader, assigned, part["leader_epoch"], name,
                                       tuple(part["isr"]), part["partition_epoch"],
                                       "" if leader is not None else self._offline_reason(topic, p)))
        return TopicDescription(topic.name, tuple(parts), dict(topic.config), internal=topic.name in INTERNAL_TOPICS,
                                topic_id=topic.topic_id, ever_compacted=topic.ever_compacted)

    def _offline_reason(self, topic: TopicState, p: int) -> str:
        part = topic.partitions[p]
        eligible = set(part["isr"]) | set(part.get("elr", []))
        nodes = sorted({r["node_id"] for r in part["replicas"] if r["replica_id"] in eligible})
        missing = [n for n in nodes if n not in self.node_sessions]
        if missing and len(missing) == len(nodes):
            now = time.monotonic()
            since = ", ".join(f"node {n} missing for {now - self.node_missing_since.get(n, now):.0f} s" for n in missing)
            return (f"the replicas that hold every acknowledged record are on nodes {nodes} ({since}); it is served "
                    "again when one of them is back (its replicas are never re-created empty elsewhere)")
        return f"its in-sync replicas (on nodes {nodes}) are starting or recovering their logs"

    def _node_states(self, per_node: bool = False) -> dict:
        """Each registered node's state (``per_node``), else how many are in each: ``alive``,
        ``registered`` (running, some of its replicas not up yet) or ``missing``."""
        starting = {r["node_id"] for topic in self.state.topics.values() for p, part in enumerate(topic.partitions)
                    for r in part["replicas"] if self._key(topic, p, r["replica_id"]) not in self.alive}
        states = {n: ("registered" if n in starting else "alive") if n in self.node_sessions else "missing"
                  for n in self.state.nodes}
        if per_node:
            return states
        counts: dict[str, int] = {}
        for state in states.values():
            counts[state] = counts.get(state, 0) + 1
        return counts

    def _replica_path(self, replica: dict) -> str:
        """The replica's directory where its node runs now (relative to its data directory while missing)."""
        data_dir = self.node_dirs.get(replica["node_id"])
        return os.path.join(data_dir, replica["directory"]) if data_dir else replica["directory"]

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


_ACTOR_CLASSES: dict[type, object] = {}


async def _awaited(ref):
    return await ref


def _actor_class(cls: type):
    """One Ray actor class per kind of actor raylog starts (replicas, node agents): each
    ``ray.remote(cls)`` is a new class that Ray exports and its workers load again."""
    if cls not in _ACTOR_CLASSES:
        _ACTOR_CLASSES[cls] = ray.remote(cls)
    return _ACTOR_CLASSES[cls]


def _kill_all(handles: list) -> None:
    for handle in handles:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
