"""A Jepsen-style chaos run: a real workload on a simulated cluster, seeded faults, a checked history.

The workload (what Kafka users run, and what Jepsen's queue test runs against Kafka):

- Two idempotent producers (acks='all') in the driver, on the head node (so Ray calls reach the
  leaders, on the workers), and one more on each worker node as a Ray actor (so it sends to the
  leaders there over the same-node produce channel, and to the others by Ray calls), send keyed
  records ``b"<key>:<n>"`` (n counts up per key) to a 3-partition topic with replication factor
  3 and min_insync_replicas 2. Every send is recorded when issued and again when its future
  completes (acknowledged at a partition and offset, or failed).
- A consumer group of members running as Ray actors on the worker nodes (reading the partitions
  led there from the leaders' files, the others by fetch calls) polls, records what it got
  (through a ledger actor that outlives any member), then commits. Members are killed and
  paused by the faults; a supervisor starts new ones to keep two running, and now and then adds
  a third and closes one, so members join and leave while everything else goes on.
- Kafka's own clients, through the listeners (tests/support/chaos_kafka.py): librdkafka's
  idempotent producer and a classic consumer group of librdkafka members.
- An observer reads the groups' committed offsets twice a second.
- With ``spark=True``, a Spark micro-batch stream (spark_bridge.stream through RayDP) reads the
  topic under its own group and writes each batch to parquet under its batch id; the checker
  reads the parquet back. A second query streams a lossy topic (tests/support/lossy.py) through
  two more faults, an unclean leader election and the topic deleted and created again: what
  they lose is lost by design, and the checker asks that the stream re-emit nothing, skip
  nothing left in the log and never stop.

Faults come from tests/support/faults.py (its module doc is the fault model), one at a time:
inject, hold it for its duration, heal, let the cluster settle, next. At the end every fault is
healed, the producers stop and flush, the group (and the stream) drain to the end of every
partition, and a fresh consumer reads everything. tests/support/history.py then checks the whole
history and names every anomaly; for acks='all' with idempotence none is allowed.

Liveness is checked too (``stalls``): a partition whose acknowledged sends, or whose records
polled by the group, make no progress for longer than STALL_FACTOR x replica_session_timeout_ms
is a ``stall``, unless the partition could not serve meanwhile: the controller showed it without
a leader or short of MIN_INSYNC in-sync replicas, or a fault that leaves no healthy leader (the
whole cluster restarting, the controller down, a full disk on the leader) covers that time, or
for polls a faulty or changing group (its coordinator or a member paused or killed, by itself or
with its node, its offsets partition short of in-sync replicas, members replaced or added:
members commit synchronously, and a rebalance hands partitions over). A paused leader is no
excuse: it is fenced after the session timeout, and clients resend to the next.

Run it: ``python -m tests.support.chaos --minutes 30 --out bench/results/chaos.json`` (``make
chaos``), or ``run(...)`` from a test (``tests/faults/test_chaos.py`` runs a short one).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import ray

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raylog import ray_calls
from raylog.errors import RaylogError
from raylog.naming import OFFSETS_TOPIC
from raylog.records import TopicPartition
from tests.support.chaos_kafka import KAFKA_GROUP, KafkaClients
from tests.support.cluster import simulated_cluster
from tests.support.faults import KILLS, PAUSES, FaultInjector
from tests.support import lossy, topics
from tests.support.history import History, render, value_of

TOPIC = "chaos"
GROUP = "chaos-group"
STREAM_GROUP = "chaos-stream"
PARTITIONS = 3
MIN_INSYNC = 2
"""The cluster's min_insync_replicas (its default): what the topic needs to acknowledge acks='all'."""
CLUSTER_CONFIG = {
    "replica_lag_time_max_ms": 5000,
    "replica_session_timeout_ms": 4000,
    "replica_heartbeat_interval_ms": 500,
    "request_timeout_ms": 10_000,
    "offsets_topic_num_partitions": 1,
    "leader_imbalance_check_interval_ms": 15_000,
    # A node restarted with its disk is back within seconds and recovers its replicas in place; a
    # lost one is replaced by a fresh node, and its replicas move there after this long.
    "node_lost_timeout_ms": 20_000,
    # Every node's Kafka listener, for the workload of tests/support/chaos_kafka.py (a taken port
    # moves to the next free one: each simulated node gets its own).
    "kafka_listener": "127.0.0.1:9092",
}
MEMBER_CONFIG = {"session_timeout_ms": 4000, "heartbeat_interval_ms": 500, "max_poll_interval_ms": 60_000,
                 "request_timeout_ms": 10_000}
PRODUCER_CONFIG = {"acks": "all", "linger_ms": 5, "request_timeout_ms": 10_000, "delivery_timeout_ms": 180_000,
                   "retry_backoff_ms": 100}
MEMBERS = 2
NODE_PRODUCER_KEYS = 2
SEND_INTERVAL_S = 0.02
"""Each producer sends one record per key every this long: about 600 records a second in all, so
a half-hour run stores about 120 MB per node (each node's data directory is a 512 MB tmpfs)."""
DATA_DIR_MB = 512
WEIGHTS = {**{k: 2 for k in KILLS}, **{k: 2 for k in PAUSES}, "lose-node": 1, "restart-node": 2,
           "restart-cluster": 1, "elect-leaders": 1, "reassign": 1, "fill-disk": 1, "pause-busy-leader": 2,
           "flip-follower-byte": 1, "intrude-channels": 1}
SPARK_WEIGHTS = {"unclean-election": 1, "recreate-topic": 1}
"""The lossy topic's faults, in runs with the Spark stream."""
STALL_FACTOR = 2
"""A partition without progress for longer than this many session timeouts is a stall."""
EXCUSED = ("restart-cluster", "kill-controller", "pause-controller", "fill-disk")
"""Faults during which, and for STALL_FACTOR session timeouts after which, a partition may make no
progress: none leaves a healthy leader able to take writes (the controller's replicas hold no lease
while it is down; a leader on a full disk refuses appends, docs/architecture.md "Not yet")."""
EXCUSED_POLLS = ("kill-coordinator", "pause-coordinator", "kill-member", "pause-member")
"""Faults that excuse, in the same way, only the group's polls, because the group rather than the
partition is faulty: members commit after every poll and wait for it (Kafka's commitSync), so a
coordinator paused or restarting holds the group's polls; a member paused or killed holds its
partitions until the group's session timeout and a rebalance hand them on, as in a Kafka group."""
OFFSETS = -1
"""Progress.note_isr's key for the group's __consumer_offsets partition: while it is short of
in-sync replicas, commits (which members wait for after every poll) cannot be written, and the
group's polls of every partition may stall with them."""
SLOW_STEP_S = 1.0
"""A member's poll, report (to the ledger) or commit that took this long is listed with the stalls
it overlaps."""
SHORT_SCHEDULE = ["pause-busy-leader", "intrude-channels", "kill-leader", "flip-follower-byte", "pause-coordinator",
                  "kill-member", "restart-node", "kill-controller", "fill-disk", "pause-follower", "lose-node",
                  "pause-controller", "reassign"]
"""The short run's faults, in order (its targets and durations are still drawn from the seed)."""


@ray.remote(num_cpus=0, resources={"node:__internal_head__": 0.001})
class Ledger:
    """What members did, in the order they reported it (one actor: one order across members)."""

    def __init__(self):
        self.rows: list[tuple] = []

    def add(self, rows: list[tuple]) -> None:
        self.rows.extend(rows)

    def since(self, index: int) -> list[tuple]:
        return self.rows[index:]


@ray.remote(num_cpus=0, max_restarts=0)
class ChaosMember:
    """One group member: poll, report to the ledger, commit; rebalances reported as they happen."""

    def __init__(self, name: str, ledger, configs: dict):
        import raylog
        from raylog.consumer.group_member import ConsumerRebalanceListener

        self.session = f"{GROUP}/{name}"
        self.ledger = ledger
        self.cluster = raylog.connect(address="auto", namespace="raylog")
        self.consumer = self.cluster.consumer(group_id=GROUP, auto_offset_reset="earliest",
                                              enable_auto_commit=False, **configs)
        session, report = self.session, self._report

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, assigned):
                report([("assigned", session, sorted(tp.partition for tp in assigned))])

            def on_partitions_revoked(self, revoked):
                report([("revoked", session, sorted(tp.partition for tp in revoked))])

        self.consumer.subscribe([TOPIC], listener=Listener())
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _report(self, rows: list[tuple]) -> None:
        ray.get(self.ledger.add.remote(rows))

    def _loop(self) -> None:
        # Whether records read may be uncommitted: a commit that raised is tried again after the
        # next poll even if it reads nothing (the producers may have stopped; nothing else would).
        uncommitted = False
        while not self._stop.is_set():
            # (step, started ns, took s): what a stall of this member's polls was spent on. In
            # monotonic ns, the driver's clock too: members run on the driver's host (simulated nodes).
            steps: list[tuple] = []
            try:
                with self._step("poll", steps):
                    chunks = self.consumer.poll_batch(timeout_ms=200)
                now_ns = time.monotonic_ns()
                rows = [("poll", self.session, chunk.partition, chunk.offsets.tolist(), chunk.value_list(), now_ns)
                        for chunk in chunks if len(chunk)]
                if rows:
                    with self._step("report", steps):
                        self._report(rows)  # processed before committed: a kill after this re-reads, never skips
                    uncommitted = True
                if uncommitted:
                    positions = {tp: self.consumer.position(tp) for tp in self.consumer.assignment()}
                    with self._step("commit", steps):
                        self.consumer.commit(positions)
                    uncommitted = False
                    self._report([("commit", GROUP, {tp.partition: o for tp, o in positions.items()})])
            except RaylogError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.2)
            slow = [("slow", self.session, *step) for step in steps if step[2] >= SLOW_STEP_S]
            if slow:
                with contextlib.suppress(ray.exceptions.RayError):
                    self._report(slow)

    @staticmethod
    @contextlib.contextmanager
    def _step(name: str, steps: list[tuple]):
        """Times a step into ``steps``, a failed one too (a commit held by a paused coordinator)."""
        started = time.monotonic_ns()
        try:
            yield
        finally:
            steps.append((name, started, (time.monotonic_ns() - started) / 1e9))

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def error_list(self) -> list[str]:
        return list(self.errors)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=20)
        self.consumer.close(autocommit=False)


@ray.remote(num_cpus=0, max_restarts=0)
class NodeProducer:
    """An idempotent acks='all' producer on one worker node: the partitions led there get its
    batches over the same-node produce channel. It reports every send and outcome to the ledger,
    with the time of each acknowledgement, in the order they happened."""

    def __init__(self, name: str, ledger, generation: int):
        import raylog

        self.name, self.ledger = name, ledger
        self.cluster = raylog.connect(address="auto", namespace="raylog")
        self.producer = self.cluster.producer(**PRODUCER_CONFIG)
        self.keys = [b"g%dn%sk%d" % (generation, name.encode(), k) for k in range(NODE_PRODUCER_KEYS)]
        self.rows: list[tuple] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._report, daemon=True)]
        for t in self._threads:
            t.start()

    def _note(self, row: tuple) -> None:
        with self._lock:
            self.rows.append(row)

    def _send(self) -> None:
        n = 0
        while not self._stop.is_set():
            for key in self.keys:
                value = value_of(key, n)
                self._note(("issue", self.name, value))
                try:
                    future = self.producer.send(TOPIC, value, key=key)
                except RaylogError as exc:
                    self._note(("fail", value, f"{type(exc).__name__}: {exc}"))
                    continue
                future.add_callback(lambda m, v=value: self._note(("ack", v, m.partition, m.offset,
                                                                   time.monotonic_ns())))
                future.add_errback(lambda e, v=value: self._note(("fail", v, f"{type(e).__name__}: {e}")))
            n += 1
            time.sleep(SEND_INTERVAL_S)

    def _report(self) -> None:
        while not self._stop.wait(0.2):
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            rows, self.rows = self.rows, []
        if rows:
            ray.get(self.ledger.add.remote(rows))

    def pid(self) -> int:
        return os.getpid()

    def local_requests(self) -> int:
        return self.producer.metrics()["producer-metrics"]["requests-sent-locally-total"]

    def stop(self) -> None:
        self._stop.set()
        self._threads[0].join(timeout=30)
        try:
            self.producer.flush(timeout=60)
        except RaylogError:
            pass  # what did not complete was reported as failed by its errback
        self.producer.close(timeout=30)
        self._flush()


class Progress:
    """When each partition last moved: acknowledged sends and records polled by the group, with the
    times they happened (monotonic, one clock for every process of the machine)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.times: dict[tuple[str, int], list[int]] = {}
        self.short_of_isr: dict[int, list[tuple[float, float]]] = {}
        """Partition -> (start, end) in monotonic seconds: spans when the controller showed it without
        a leader or with fewer than MIN_INSYNC in-sync replicas (nothing can be acknowledged with
        acks='all' then, nor the high watermark move)."""
        self._healthy_at: dict[int, float] = {}
        self._short_since: dict[int, float] = {}
        self.group_changes: list[tuple[float, float]] = []
        """(start, end) in monotonic seconds of each change of the group's members that the workload
        made (a dead member replaced, one more joining and the oldest leaving): the group hands
        partitions over in a rebalance meanwhile, as a Kafka group does."""

    def note(self, kind: str, partition: int, t_ns: int) -> None:
        with self._lock:
            self.times.setdefault((kind, partition), []).append(t_ns)

    def note_isr(self, partition: int, healthy: bool, t_s: float) -> None:
        """One look at a partition's state. A span short of in-sync replicas starts at the last look
        that found it healthy (it may have changed just after) and ends at the next such look."""
        with self._lock:
            if healthy:
                since = self._short_since.pop(partition, None)
                if since is not None:
                    self.short_of_isr.setdefault(partition, []).append((since, t_s))
                self._healthy_at[partition] = t_s
            elif partition not in self._short_since:
                self._short_since[partition] = self._healthy_at.get(partition, t_s)

    def moving(self, expected: list[tuple[str, int]]) -> bool:
        """Whether every ``expected`` series (kind, partition) has moved at least once."""
        with self._lock:
            return all(self.times.get(k) for k in expected)

    def longest_gap(self, kind: str, partition: int, start_s: float, end_s: float, until_s: float) -> float | None:
        """The longest time ``kind`` of ``partition`` made no progress that began between ``start_s``
        and ``end_s`` (monotonic seconds; the first such time begins at ``start_s``), up to
        ``until_s``; None when the series never moved."""
        with self._lock:
            times = sorted(t / 1e9 for t in self.times.get((kind, partition), []))
        if not times:
            return None
        points = [start_s] + [t for t in times if start_s < t <= until_s]
        if points[-1] < until_s:
            points.append(until_s)
        return max((b - a for a, b in zip(points, points[1:]) if a <= end_s), default=0.0)

    def stalls(self, expected: list[tuple[str, int]], windows: dict[str, list[tuple[float, float]]], limit_s: float,
               until_s: float, origin_s: float) -> list[dict]:
        """Each gap longer than ``limit_s`` in a partition's progress that neither a window excused
        for its kind (``windows``: kind -> (start, end) in monotonic seconds) nor a span of the
        partition short of in-sync replicas covers,
        from the moment every ``expected`` series (kind, partition) had moved once (the workload up:
        the first group join is not a fault's doing) to ``until_s`` (monotonic seconds); gaps are
        given in seconds since ``origin_s``."""
        with self._lock:
            series = {k: sorted(v) for k, v in self.times.items()}
            short = {p: spans + ([(self._short_since[p], until_s)] if p in self._short_since else [])
                     for p, spans in self.short_of_isr.items()}
            for p, since in self._short_since.items():
                short.setdefault(p, [(since, until_s)])
        missing = [k for k in expected if not series.get(k)]
        if missing:
            return [{"kind": kind, "partition": partition, "never_moved": True} for kind, partition in missing]
        since_s = max(series[k][0] for k in expected) / 1e9
        found = []
        for (kind, partition), times in sorted(series.items()):
            points = [since_s] + [t / 1e9 for t in times if since_s <= t / 1e9 <= until_s] + [until_s]
            for a, b in zip(points, points[1:]):
                if b - a <= limit_s:
                    continue
                # The part of the gap no excused window covers.
                uncovered = [(a, b)]
                excuses = windows.get(kind, []) + short.get(partition, [])
                if kind == "polls":
                    excuses = excuses + short.get(OFFSETS, [])
                for start, end in excuses:
                    uncovered = [piece for lo, hi in uncovered for piece in ((lo, min(hi, start)), (max(lo, end), hi))
                                 if piece[1] > piece[0]]
                longest = max((hi - lo for lo, hi in uncovered), default=0.0)
                if longest > limit_s:
                    found.append({"kind": kind, "partition": partition, "from_s": round(a - origin_s, 1),
                                  "to_s": round(b - origin_s, 1), "gap_s": round(b - a, 1),
                                  "unexcused_s": round(longest, 1)})
        return found


def leader_pause_gaps(faults, progress: Progress, until_s: float, origin_s: float) -> dict:
    """Issue 31's failover target, measured: for each leader of the checked topic paused (alone,
    or busy with same-node clients), the longest time its partition's acknowledgements and polls
    made no progress that began during the pause, against replica_session_timeout_ms + 2 s."""
    rows = []
    for f in faults:
        match = re.match(rf"{re.escape(TOPIC)}-(\d+) replica ", f.target)
        if f.kind not in ("pause-leader", "pause-busy-leader") or f.error is not None or match is None:
            continue
        p, end = int(match.group(1)), f.ended or until_s
        gaps = {kind: progress.longest_gap(kind, p, f.started, end, until_s) for kind in ("acks", "polls")}
        rows.append({"fault": f"{f.kind} {f.target}", "at_s": round(f.started - origin_s, 1),
                     "paused_s": round(end - f.started, 1),
                     **{f"{kind}_gap_s": None if g is None else round(g, 1) for kind, g in gaps.items()}})
    worst = {kind: max((r[f"{kind}_gap_s"] for r in rows if r[f"{kind}_gap_s"] is not None), default=None)
             for kind in ("acks", "polls")}
    return {"target_s": CLUSTER_CONFIG["replica_session_timeout_ms"] / 1000 + 2, "worst_s": worst, "pauses": rows}


class Producers:
    """Producer threads in the driver, each an idempotent acks='all' Producer of its own."""

    def __init__(self, cluster, history: History, progress: Progress, count: int = 2, keys: int = 6,
                 generation: int = 0):
        """``generation`` counts whole-cluster restarts: each one's producers send under keys of their
        own (a producer's sequence of values per key starts again)."""
        self.history = history
        self.progress = progress
        self.generation = generation
        self.producers = [cluster.producer(**PRODUCER_CONFIG) for _ in range(count)]
        self.keys = keys
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(count)]
        for t in self._threads:
            t.start()

    def _run(self, index: int) -> None:
        producer, history, name = self.producers[index], self.history, f"producer-{self.generation}.{index}"
        n = 0
        while not self._stop.is_set():
            for k in range(self.keys):
                key = b"g%dp%dk%d" % (self.generation, index, k)
                value = value_of(key, n)
                history.issue(name, value, TOPIC)
                try:
                    future = producer.send(TOPIC, value, key=key)
                except RaylogError as exc:
                    history.fail(value, exc)
                    continue
                future.add_callback(lambda meta, v=value: self._acked(v, meta.partition, meta.offset))
                future.add_errback(lambda error, v=value: history.fail(v, error))
            n += 1
            time.sleep(SEND_INTERVAL_S)

    def _acked(self, value: bytes, partition: int, offset: int) -> None:
        self.progress.note("acks", partition, time.monotonic_ns())
        self.history.ack(value, partition, offset)

    def stop(self, flush_timeout_s: float = 240) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        for producer in self.producers:
            try:
                producer.flush(timeout=flush_timeout_s)
            except RaylogError:
                pass  # what did not complete is recorded as failed by its errback
            producer.close(timeout=30)


class Group:
    """The consumer group's members, kept at MEMBERS running on the worker nodes, and the producers
    on the worker nodes, one each; the ledger's rows fed into the history."""

    def __init__(self, sim, history: History, progress: Progress, rng: random.Random, log, generation: int = 0):
        self.sim = sim
        self.history = history
        self.progress = progress
        self.rng = rng
        self.log = log
        self.generation = generation
        self.members: list = []
        self.node_producers: dict[str, object] = {}
        """Ray node id -> the producer actor on it."""
        self._made = 0
        self._lock = threading.Lock()
        self.commits = 0
        self.slow_steps: list[tuple] = []
        """(member, step, started ns, seconds) of each member step that took SLOW_STEP_S or more."""
        self.acknowledged: dict[int, int] = {}
        """The highest commit a member saw acknowledged, per partition. Members report a commit after
        it returns (a pause in between delays the report past later commits and observations), so
        these are checked against the final committed offsets only, where that order cannot matter."""
        self.start()

    def start(self) -> None:
        """A new ledger, MEMBERS members and a producer per worker node (again after a whole-cluster
        restart, which ended them)."""
        self.ledger = Ledger.remote()
        self._read = 0
        with self._lock:
            self.members = []
        self.node_producers = {}
        for _ in range(MEMBERS):
            self.add()
        self._start_node_producers()

    def _workers(self) -> list[str]:
        head = self.sim.head_id()
        return sorted(n for n in self.sim.node_ids() if n != head)

    def _start_node_producers(self) -> None:
        for node in self._workers():
            if node not in self.node_producers:
                self._made += 1
                self.node_producers[node] = NodeProducer.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                    node, soft=False)).remote(f"p{self._made}", self.ledger, self.generation)

    def add(self):
        """Start one more member (its actor handle)."""
        self._made += 1
        workers = self._workers()
        # Spread over the worker nodes (soft: anywhere if that node is gone), where they read the
        # partitions led there from the leaders' files.
        node = workers[self._made % len(workers)] if workers else None
        options = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True)} if node else {}
        member = ChaosMember.options(**options).remote(f"m{self._made}", self.ledger, MEMBER_CONFIG)
        with self._lock:
            self.members.append(member)
        return member

    def handles(self) -> list:
        with self._lock:
            return list(self.members)

    def supervise(self, since: float | None = None) -> None:
        """Replace dead members and start a producer on each worker node without one (a node that
        came back, or joined); now and then let one more member join and close an old one.
        ``since``: when the fault just healed began (monotonic seconds). A member found dead died
        with it (a node restarted or lost with the member on it is a member killed, for the group)
        and the group's change began then, not when it is found."""
        # Only a dead actor is gone: one slow to answer (starved, or paused by a fault) is alive,
        # and dropped unstopped it would go on producing or holding partitions unwatched.
        for node, producer in list(self.node_producers.items()):
            try:
                ray.get(producer.pid.remote(), timeout=15)
            except ray.exceptions.GetTimeoutError:
                pass
            except ray.exceptions.RayError:
                del self.node_producers[node]  # gone with its node: what it had not had acknowledged is open
        self._start_node_producers()
        alive = []
        started = time.monotonic()
        for member in self.handles():
            try:
                ray.get(member.pid.remote(), timeout=15)
                alive.append(member)
            except ray.exceptions.GetTimeoutError:
                alive.append(member)
            except ray.exceptions.RayError:
                self.log("  a member is gone; a new one joins")
        with self._lock:
            replaced = len(self.members) - len(alive)
            self.members = alive
        while len(self.handles()) < MEMBERS:
            self.add()
        if self.rng.random() < 0.15:
            # The new member up first (as a scale-out then scale-in would go), then the oldest leaves.
            newest = self.add()
            with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
                ray.get(newest.pid.remote(), timeout=60)
            oldest = self.handles()[0]
            with self._lock:
                self.members.remove(oldest)
            try:
                ray.get(oldest.stop.remote(), timeout=30)
            except ray.exceptions.RayError:
                pass
            self.log("  a member joined and the oldest left")
        elif not replaced:
            return
        if replaced and since is not None:
            started = min(started, since)
        self.progress.group_changes.append((started, time.monotonic()))

    def pump(self) -> None:
        """Record what the members reported since the last pump, in the ledger's order."""
        rows = ray.get(self.ledger.since.remote(self._read), timeout=60)
        self._read += len(rows)
        for row in rows:
            kind = row[0]
            if kind == "poll":
                self.history.poll(row[1], row[2], row[3], row[4])
                self.progress.note("polls", row[2], row[5])
            elif kind == "issue":
                self.history.issue(row[1], row[2], TOPIC)
            elif kind == "ack":
                self.history.ack(row[1], row[2], row[3])
                self.progress.note("acks", row[2], row[4])
            elif kind == "fail":
                self.history.fail(row[1], row[2])
            elif kind == "assigned":
                self.history.assigned(row[1], row[2])
            elif kind == "revoked":
                self.history.revoked(row[1], row[2])
            elif kind == "slow":
                self.slow_steps.append(row[1:])
            elif kind == "commit":
                self.commits += 1
                for partition, offset in row[2].items():
                    self.acknowledged[partition] = max(offset, self.acknowledged.get(partition, 0))

    def lost_commits(self, final_committed: dict[tuple[str, int], int]) -> list[dict]:
        """Acknowledged commits above the group's final committed offset, in the checker's shape."""
        return lost_commits(GROUP, self.acknowledged, final_committed)

    def stop(self) -> None:
        for member in self.handles():
            try:
                ray.get(member.stop.remote(), timeout=60)
            except ray.exceptions.RayError:
                pass

    def stop_producers(self) -> int:
        """Stop the node producers (flushing what they sent); returns how many requests they sent
        over same-node channels."""
        local = 0
        for producer in self.node_producers.values():
            try:
                local += ray.get(producer.local_requests.remote(), timeout=30)
                ray.get(producer.stop.remote(), timeout=120)
            except ray.exceptions.RayError:
                pass
        self.node_producers = {}
        return local


def lost_commits(group: str, acknowledged: dict[int, int], final_committed: dict[tuple[str, int], int]) -> list[dict]:
    """``group``'s acknowledged commits (partition -> highest) above its final committed offset, in
    the checker's shape."""
    return [{"group": group, "partition": p, "offsets": [o, final_committed.get((group, p))],
             "ops": ["acknowledged-commit", "final"]}
            for p, o in sorted(acknowledged.items()) if final_committed.get((group, p), -1) < o]


def wait_listening(sim, timeout_s: float = 120) -> None:
    """Every node's Kafka listener up (the Kafka clients bootstrap from all of them)."""
    nodes = {sim.raylog_node(n) for n in sim.node_ids()}
    deadline = time.monotonic() + timeout_s
    while {b["node_id"] for b in ray_calls.get(sim.cluster.controller.kafka_brokers.remote(), 60)} != nodes:
        if time.monotonic() > deadline:
            raise AssertionError(f"the Kafka listeners of nodes {sorted(nodes)} did not all start")
        time.sleep(0.5)


def committed(cluster, group: str) -> dict[int, int]:
    found = cluster.admin().list_consumer_group_offsets(group, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    return {tp.partition: om.offset for tp, om in found.items() if om is not None}


def end_offsets(cluster) -> dict[int, int]:
    return {tp.partition: o for tp, o in topics.end_offsets(cluster, TOPIC).items()}


def read_everything(cluster, timeout_s: float = 180) -> dict[int, list[tuple[int, bytes]]]:
    ends = end_offsets(cluster)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout_s

    def reached() -> dict[int, int]:
        return {p: out[p][-1][0] + 1 if out[p] else 0 for p in out}
    try:
        while any(reached()[p] < ends[p] for p in out):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {TOPIC} to its end offsets {ends}: reached {reached()}; "
                                     f"partitions now {cluster.admin().describe_partitions(TOPIC)}")
            for chunk in consumer.poll_batch(timeout_ms=500):
                out[chunk.partition].extend(zip(chunk.offsets.tolist(), chunk.value_list()))
    finally:
        consumer.close()
    return out


def in_sync(state: dict) -> bool:
    """Whether a partition (describe_partitions' row) can acknowledge acks='all' sends."""
    return not state["offline"] and len(state["isr"]) >= MIN_INSYNC


def wait_healthy(cluster, timeout_s: float) -> bool:
    """Every partition of the topic led and with at least MIN_INSYNC in-sync replicas."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            states = cluster.admin().describe_partitions(TOPIC)
            if all(in_sync(s) for s in states):
                return True
        except RaylogError:
            pass
        time.sleep(1)
    return False


STREAM_STUCK_S = 120.0
"""How long the stream may commit nothing while records wait before it is restarted (batches of
up to 20,000 records take seconds; a stream whose executor is gone never commits again)."""
QUERY_STOP_S = 60.0
SPARK_HOST = "chaos_spark_host"
"""A resource only the head node has: Spark's app master and executor run there, so losing a worker
node loses raylog replicas, not the Spark job reading them (RayDP does not replace lost executors)."""


class Stream:
    """The Spark micro-batch stream: parquet per batch id under ``out``."""

    def __init__(self, out: Path, lossy_errors: list[str]):
        import spark_bridge

        self.out = out
        self.lossy_errors = lossy_errors
        self.session = spark_bridge.session(app_name="raylog-chaos", configs={
            f"spark.ray.raydp_spark_executor.actor.resource.{SPARK_HOST}": "1",
            f"spark.ray.raydp_spark_master.actor.resource.{SPARK_HOST}": "1"})
        self.query = spark_bridge.stream(
            self.session, TOPIC, STREAM_GROUP,
            lambda df, batch_id: df.select("partition", "offset", "value").write.parquet(
                str(out / f"batch-{batch_id:06d}"), mode="overwrite"),
            checkpoint_location=str(out.parent / "stream-checkpoint"), starting_offsets="earliest",
            max_offsets_per_trigger=20_000, trigger_interval_s=1.0)
        self.lossy = lossy.start_query(self.session, out.parent)
        self._moved = (None, time.monotonic())
        """(the group's committed offsets, when they last changed)."""

    def stuck(self, cluster) -> bool:
        """Whether the stream has committed nothing new for STREAM_STUCK_S while records wait for it
        (or its query ended), or its lossy query stopped (an error the checker reports)."""
        if not self.lossy.isActive:
            self.lossy_errors.append(str(self.lossy.exception()))
            return True
        if not self.query.isActive:
            return True
        try:
            now, behind = committed(cluster, STREAM_GROUP), end_offsets(cluster)
        except RaylogError:
            return False
        if now != self._moved[0] or now == behind:
            self._moved = (now, time.monotonic())
            return False
        return time.monotonic() - self._moved[1] > STREAM_STUCK_S

    def drain_lossy(self, timeout_s: float) -> bool:
        """Whether the lossy query processed all its topic holds (it has stopped being written)."""
        waiter = threading.Thread(target=self.lossy.processAllAvailable, name="chaos-lossy-drain", daemon=True)
        waiter.start()
        waiter.join(timeout_s)
        return not waiter.is_alive() and self.lossy.isActive

    def drain(self, cluster, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.query.isActive:
                return False
            ends = end_offsets(cluster)
            if committed(cluster, STREAM_GROUP) == ends:
                return True
            time.sleep(1)
        return False

    def stop(self) -> None:
        """Stop the query, waiting at most QUERY_STOP_S: a query whose batch waits for an executor
        that is gone never stops (its stream thread waits on the batch's Spark job), and ending the
        session ends its JVM with it."""
        if self.session is None:
            return
        try:
            for query in (self.lossy, self.query):
                stopper = threading.Thread(target=query.stop, name="chaos-query-stop", daemon=True)
                stopper.start()
                stopper.join(QUERY_STOP_S)
        finally:
            self.session.stop(timeout_s=60)
            self.session = None

    def record(self, history: History) -> None:
        """Each batch's rows as one poll per partition (a batch is one read of its ranges)."""
        import pyarrow.parquet as pq

        for batch_dir in sorted(self.out.glob("batch-*")):
            table = pq.read_table(batch_dir)
            rows = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                              table.column("value").to_pylist()))
            session = f"{STREAM_GROUP}/{batch_dir.name}"
            history.assigned(session, list(range(PARTITIONS)))
            for p in range(PARTITIONS):
                got = [(o, v) for q, o, v in rows if q == p]
                if got:
                    history.poll(session, p, [o for o, _ in got], [v for _, v in got])


class Workload:
    """Everything that runs against the cluster: the producers, the group, the stream."""

    def __init__(self, sim, history: History, rng: random.Random, say, out: Path | None):
        self.sim, self.history, self.rng, self.say, self.out = sim, history, rng, say, out
        self.generation = 0
        self.progress = Progress()
        self.local_requests = 0
        self.producers = Producers(sim.cluster, history, self.progress)
        self.group = Group(sim, history, self.progress, rng, say)
        self.lossy_errors: list[str] = []
        self.lossy_acked: set[bytes] = set()
        self.lossy = lossy.LossyProducer(sim.cluster) if out is not None else None
        self.stream = Stream(out, self.lossy_errors) if out is not None else None
        self.stream_restarts = 0
        self.kafka = self._kafka_clients()
        self.kafka_rng = random.Random(rng.getrandbits(32))
        """The Kafka group's own draws (who joins and leaves when), apart from the faults'."""
        self.kafka_commits = 0
        self.kafka_errors: list[str] = []
        self.kafka_acknowledged: dict[int, int] = {}
        """chaos.Group.acknowledged, for the Kafka group, over every cluster generation."""

    def _kafka_clients(self) -> KafkaClients:
        return KafkaClients(self.sim.cluster.bootstrap_servers, TOPIC, self.history, self.progress, self.generation,
                            SEND_INTERVAL_S)

    def supervise(self, since: float | None = None) -> None:
        """Keep the group, the node producers and the stream running (``since``: GroupWorkload.supervise)."""
        self.group.supervise(since)
        self.kafka.top_up()
        if self.kafka_rng.random() < 0.15:
            started = time.monotonic()
            self.kafka.rotate()
            self.progress.group_changes.append((started, time.monotonic()))
        if self.stream is not None and self.stream.stuck(self.sim.cluster):
            # RayDP does not replace a lost executor (Ray ends one whose actor was leased through a
            # node that died), so a stream that stopped moving starts again from its checkpoint:
            # the parquet it writes is still exactly once.
            self.say("  the Spark stream stopped moving; restarted from its checkpoint")
            self.stream.stop()
            self.stream = Stream(self.out, self.lossy_errors)
            self.stream_restarts += 1

    def stop_kafka(self) -> None:
        """End the Kafka clients (their members leave the group), keeping what they counted."""
        self.kafka.stop()
        self.kafka_commits += self.kafka.commits
        self.kafka_errors += self.kafka.errors
        for p, o in self.kafka.acknowledged.items():
            self.kafka_acknowledged[p] = max(o, self.kafka_acknowledged.get(p, 0))

    def lost_commits(self, final_committed: dict[tuple[str, int], int]) -> list[dict]:
        """Both groups' acknowledged commits above their final committed offsets (raylog's group's
        and the Kafka group's), in the checker's shape."""
        return self.group.lost_commits(final_committed) + lost_commits(KAFKA_GROUP, self.kafka_acknowledged,
                                                                        final_committed)

    def _stop_lossy(self) -> None:
        if self.lossy is not None:
            self.lossy.stop()
            self.lossy_acked |= self.lossy.acked

    def stop_producers(self) -> None:
        self.producers.stop()
        self.kafka.stop_producer()
        self.local_requests += self.group.stop_producers()
        self._stop_lossy()

    def restart_cluster(self) -> str:
        """The whole-cluster restart fault: the workload stops (what the producers had not had
        acknowledged is recorded as failed: its outcome is unknown; the members leave the group
        after recording what they read), the Ray cluster ends, stopped
        or every process SIGKILLed, and starts again on the same disks, its workers in a random
        order, one of them sometimes only once the others have elected every partition's leader;
        then the workload starts again on the new cluster."""
        rng, sim = self.rng, self.sim
        self.producers.stop(flush_timeout_s=30)
        self.local_requests += self.group.stop_producers()
        self._stop_lossy()
        self.stop_kafka()
        if self.stream is not None:
            self.stream.stop()
        # The members stop before their ledger (an actor) goes with the cluster: what they polled and
        # committed is recorded. (The ledger stands for the application's own state, which outlives
        # the cluster.)
        self.group.stop()
        self.group.pump()
        kill = rng.random() < 0.5
        workers = sim.worker_dirs()
        rng.shuffle(workers)
        late = workers.pop() if rng.random() < 0.5 else None
        sim.restart_all(workers, CLUSTER_CONFIG, log_to_driver=False, kill=kill)
        if late is not None:
            wait_led(sim.cluster, 120)
            sim.add(late)
        self.generation += 1
        self.producers = Producers(sim.cluster, self.history, self.progress, generation=self.generation)
        self.group.generation = self.generation
        self.group.start()
        wait_listening(sim)
        self.kafka = self._kafka_clients()
        if self.out is not None:
            self.lossy = lossy.LossyProducer(sim.cluster, first=self.lossy.next)
            self.stream = Stream(self.out, self.lossy_errors)
        return (f"{'SIGKILL of every process' if kill else 'stopped'}, workers back in a random order"
                + (", one after the others elected" if late else ""))


def wait_led(cluster, timeout_s: float) -> bool:
    """Every partition of the topic has a leader."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if all(not s["offline"] for s in cluster.admin().describe_partitions(TOPIC)):
                return True
        except RaylogError:
            pass
        time.sleep(0.5)
    return False


def run(minutes: float, seed: int, data_root: str | None = None, spark: bool = False, short: bool = False,
        log=print, schedule: list[str] | None = None, faults: int | None = None) -> dict:
    """One chaos run; returns the report (see ``to_json``). ``short`` runs SHORT_SCHEDULE's faults
    (or ``schedule``'s, in turn) with pauses of 2-6 s instead of random faults of up to 20 s.
    ``faults``: inject that many, however long they take (each waits for a healthy cluster
    first, which a loaded machine slows), instead of as many as ``minutes`` allow."""
    schedule = schedule or (SHORT_SCHEDULE if short else None)
    rng = random.Random(seed)
    own_root = data_root is None
    root = Path(data_root or tempfile.mkdtemp(prefix="raylog-chaos-"))
    started = time.monotonic()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")

    def say(text: str) -> None:
        log(f"[{time.monotonic() - started:7.1f} s] {text}")

    history = History()
    report: dict = {"seed": seed, "minutes": minutes, "started": stamp, "spark": spark, "short": short}
    with simulated_cluster(str(root), workers=3, cluster_config=CLUSTER_CONFIG, log_to_driver=False,
                           head_resources={SPARK_HOST: 4} if spark else None, head_cpus=3 if spark else 1,
                           disk_mb=DATA_DIR_MB) as sim, \
            contextlib.ExitStack() as cleanup:
        # Undone in reverse order even when the run fails: no paused process or thread outlives it
        # (the simulated cluster unmounts its disks as it ends).
        if not sim.disks:
            say("fill-disk skipped: this machine does not let the run mount a tmpfs (needs root)")
        # Every node registered before the topic is placed on three of them. The controller waits
        # for the registrations under way when it places; this also waits out one refused and
        # tried again at its next node check (a 1.5 s window on an agent's answer once left the
        # placement one live node on a loaded machine: InvalidReplicationFactorError).
        for node in sim.node_ids():
            sim.raylog_node(node)
        sim.cluster.admin().create_topic(TOPIC, PARTITIONS, replication_factor=3)
        if spark:
            lossy.create(sim.cluster)
        in_use = threading.Lock()
        """Held by the observer thread while it calls the cluster, and by a whole-cluster restart:
        no thread may be inside a Ray call while Ray is shut down and started again."""
        wait_listening(sim)
        work = Workload(sim, history, rng, say, root / "stream-out" if spark else None)
        cleanup.callback(lambda: work.stream.stop() if work.stream is not None else None)
        cleanup.callback(lambda: work.kafka.stop())
        cleanup.callback(lambda: work.producers.stop(30))

        def restart_cluster() -> str:
            with in_use:
                return work.restart_cluster()

        own = {"unclean-election": lambda: lossy.unclean_election(sim.cluster, work.lossy),
               "recreate-topic": lambda: lossy.recreate(sim.cluster)} if spark else {}
        injector = FaultInjector(sim, [TOPIC], rng, group=GROUP, members=lambda: work.group.handles(),
                                 pause_s=(2.0, 6.0) if short else (2.0, 20.0), restart_cluster=restart_cluster,
                                 own=own)
        weights = {**WEIGHTS, **(SPARK_WEIGHTS if spark else {})}
        cleanup.callback(injector.heal_all)
        stop_observer = threading.Event()
        cleanup.callback(stop_observer.set)

        def observe() -> None:
            while not stop_observer.wait(0.5):
                with in_use:
                    try:
                        for group in (GROUP, KAFKA_GROUP):
                            for p, o in committed(sim.cluster, group).items():
                                history.observe_committed(group, p, o)
                        # The controller's view alone (describe_partitions would also ask each leader,
                        # and wait on a paused one, and drop the producers' cached metadata).
                        states = ray_calls.get(sim.cluster.controller.partition_states.remote(TOPIC), 10)
                        now = time.monotonic()
                        for state in states:
                            work.progress.note_isr(state["partition"], in_sync(state), now)
                        offsets = ray_calls.get(sim.cluster.controller.partition_states.remote(OFFSETS_TOPIC), 10)
                        work.progress.note_isr(OFFSETS, all(in_sync(s) for s in offsets), time.monotonic())
                    except (RaylogError, ray.exceptions.RayError):
                        pass

        observer = threading.Thread(target=observe, daemon=True)
        observer.start()
        say(f"workload running: {len(work.producers.producers)} producers, {MEMBERS} members, a Kafka producer and "
            f"group through the listeners{', a Spark stream' if spark else ''}; seed {seed}")
        # Faults start once every partition is acknowledged and polled: the first one must not
        # fall on the group's first join.
        moving = [(kind, p) for kind in ("acks", "polls") for p in range(PARTITIONS)]
        up_by = time.monotonic() + 120
        while not work.progress.moving(moving) and time.monotonic() < up_by:
            work.group.pump()
            time.sleep(0.5)
        time.sleep(2)
        deadline = started + minutes * 60
        deck: list[str] = []
        n = 0
        while (n < faults) if faults is not None else (time.monotonic() < deadline):
            if not schedule and not deck:
                # Drawn from a shuffled deck holding each kind WEIGHTS times, not independently: every
                # kind comes up once in each deck (31 faults), so a rare one, as a whole-cluster
                # restart, is in every run of that length.
                deck = [k for k in weights for _ in range(weights[k])]
                rng.shuffle(deck)
            kind = schedule[n % len(schedule)] if schedule else deck.pop()
            if kind == "fill-disk" and not sim.disks:
                kind = "pause-follower"
            n += 1
            fault = injector.inject(kind)
            summary = history.summary()
            say(f"fault {n}: {fault.describe()} | acked {summary['sends_acked']}, "
                f"polled {summary['records_polled']}")
            while injector.active:
                time.sleep(0.5)
                for due in injector.due():
                    injector.heal(due)
                    say(f"  healed {due.kind} {due.target}")
                work.group.pump()
            work.supervise(since=fault.started)
            work.group.pump()
            # Settled: every partition back in sync before the next fault, so faults do not pile up
            # (a follower still catching up after a restart, then another node lost, leaves one).
            wait_healthy(sim.cluster, 60)
            time.sleep(rng.uniform(3, 6) if short else rng.uniform(5, 15))
        say("faults over: healing, draining")
        injector.heal_all()
        cluster = sim.cluster
        healthy = wait_healthy(cluster, 120)
        group = work.group
        work.supervise()
        time.sleep(5)
        producing_until = time.monotonic()
        work.stop_producers()
        say(f"producers stopped: {history.summary()['sends_acked']} acknowledged")
        drain_deadline = time.monotonic() + 240
        drained = False
        behind: dict = {}
        """Each group's committed offsets short of the end offsets, at the last look."""
        while time.monotonic() < drain_deadline:
            group.pump()
            # Read again each time: a batch sent before the producers stopped, never acknowledged,
            # may still be committed once a follower that was catching up joins the ISR.
            ends = end_offsets(cluster)
            behind = {g: {"committed": c, "ends": ends} for g in (GROUP, KAFKA_GROUP)
                      if (c := committed(cluster, g)) != ends}
            if not behind:
                drained = True
                break
            time.sleep(1)
        stream_drained = work.stream.drain(cluster, 240) if work.stream else None
        if work.stream is not None and not work.stream.drain_lossy(240):
            stream_drained = False
        group.stop()
        group.pump()
        work.stop_kafka()
        stop_observer.set()
        observer.join(timeout=10)
        lossy_found, lossy_summary = {}, {}
        if work.stream is not None:
            lossy_found, lossy_summary = lossy.check(work.stream.session, root, lossy.final_values(cluster),
                                                     work.lossy_acked, work.lossy_errors)
            work.stream.stop()
            work.stream.record(history)
            work.stream = None
        final = read_everything(cluster)
        final_committed = {(g, p): o for g in (GROUP, KAFKA_GROUP) for p, o in committed(cluster, g).items()}
        if spark:
            final_committed.update({(STREAM_GROUP, p): o for p, o in committed(cluster, STREAM_GROUP).items()})
        anomalies = history.check(final, final_committed=final_committed, drained=drained)
        if spark:
            anomalies.update(lossy_found)
        if lost := work.lost_commits(final_committed):
            anomalies.setdefault("committed-offsets-backwards", []).extend(lost)
        if injector.intrusions:
            anomalies["intrusion"] = [f"{injector.intrusions} requests of a process without the secret answered"]
        session_s = CLUSTER_CONFIG["replica_session_timeout_ms"] / 1000
        excused = {kind: [(f.started, (f.ended or time.monotonic()) + STALL_FACTOR * session_s)
                          for f in injector.history if f.kind in kinds and f.error is None]
                   for kind, kinds in (("acks", EXCUSED), ("polls", EXCUSED + EXCUSED_POLLS))}
        excused["polls"] += [(a, b + STALL_FACTOR * session_s) for a, b in work.progress.group_changes]
        stalls = work.progress.stalls(moving, excused, STALL_FACTOR * session_s, producing_until, started)
        for stall in (s for s in stalls if "from_s" in s):
            # The faults in force during it or just before (as the run's log stamps them), and what
            # the members were slow at meanwhile (a poll, a report, a commit).
            stall["faults"] = [f"{f.kind} {f.target} {f.started - started:.1f}-{(f.ended or f.started) - started:.1f} s"
                               for f in injector.history if f.started - started <= stall["to_s"]
                               and (f.ended or f.started) - started + STALL_FACTOR * session_s >= stall["from_s"]]
            stall["member_steps"] = [f"{member} {step} at {at / 1e9 - started:.1f} s took {took:.1f} s"
                                     for member, step, at, took in group.slow_steps
                                     if at / 1e9 - started <= stall["to_s"] and at / 1e9 - started + took >= stall["from_s"]]
        leader_pauses = leader_pause_gaps(injector.history, work.progress, producing_until, started)
        kafka_sends = [op for op in history.snapshot() if op.f == "ack" and (op.process or "").startswith("kafka-")]
        kafka_polls = [op for op in history.snapshot() if op.f == "poll" and op.process.startswith(KAFKA_GROUP + "/")]
        operations = {**history.summary(), "commits": group.commits, "kafka_sends_acked": len(kafka_sends),
                      "kafka_records_polled": sum(len(op.value[1]) for op in kafka_polls),
                      "kafka_commits": work.kafka_commits, "sent_over_same_node_channels":
                      work.local_requests, "stream_restarts": work.stream_restarts, **lossy_summary}
        errors = {}
        for member in group.handles():
            try:
                errors[str(member)] = ray.get(member.error_list.remote(), timeout=10)[-3:]
            except ray.exceptions.RayError:
                pass
    report.update({
        "duration_s": round(time.monotonic() - started, 1),
        "machine": f"{platform.node()} ({os.cpu_count()} cores), Python {platform.python_version()}",
        "healthy_after_faults": healthy,
        "drained": drained,
        "not_drained": behind,
        "stream_drained": stream_drained,
        "operations": operations,
        "records_in_log": sum(len(v) for v in final.values()),
        "faults": injector.counts(),
        "faults_skipped": injector.skipped(),
        "anomalies": {name: len(examples) for name, examples in anomalies.items()},
        "stalls": len(stalls),
        "stall_examples": stalls[:10],
        "leader_pauses": leader_pauses,
        "examples": {name: [repr(e) for e in examples[:5]] for name, examples in anomalies.items()},
        "fault_log": [f"{f.kind} {f.target}" + (f" ({f.error})" if f.error else "") for f in injector.history],
        "member_errors": errors,
        "kafka_errors": work.kafka_errors[-10:],
        "report": render(anomalies, operations),
    })
    report["ok"] = not anomalies and not stalls and drained and healthy and (stream_drained is not False)
    if own_root:
        shutil.rmtree(root, ignore_errors=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description="A Jepsen-style chaos run against raylog on a simulated cluster.")
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("CHAOS_MINUTES", 30)))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("RAYLOG_TEST_SEED", random.randrange(2**31))))
    parser.add_argument("--spark", action="store_true", help="also run a Spark micro-batch stream (RayDP)")
    parser.add_argument("--short", action="store_true", help="the short schedule of make test's scenario")
    parser.add_argument("--out", default="bench/results/chaos.json")
    args = parser.parse_args()
    report = run(args.minutes, args.seed, spark=args.spark, short=args.short)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({k: v for k, v in report.items() if k != "report"}, indent=2) + "\n")
    print(report["report"])
    print(f"faults by kind: {dict(sorted(Counter(report['faults']).items()))}")
    print(f"stalls: {report['stalls']} {report['stall_examples'][:3]}")
    pauses = report["leader_pauses"]
    print(f"paused leaders: {len(pauses['pauses'])}; longest time without acknowledgements "
          f"{pauses['worst_s']['acks']} s, without polled records {pauses['worst_s']['polls']} s "
          f"(target {pauses['target_s']} s: the session timeout + 2 s)")
    print(f"{'OK' if report['ok'] else 'FAILED'}: {report['operations']['sends_acked']} acknowledged sends, "
          f"{len(report['anomalies'])} anomaly kinds, {report['stalls']} stalls; written to {args.out}")
    raise SystemExit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
