"""A seeded fault injector for a simulated raylog cluster (ray.cluster_utils), as Jepsen's nemesis.

The fault model, and why raylog must survive each fault:

- ``kill-*`` (SIGKILL, no clean shutdown) of a partition's leader or follower replica, the
  controller, the group's coordinator, or a consumer-group member: processes crash (OOM, a bug,
  an operator's kill -9). Ray restarts raylog's actors on their node; they recover from disk
  (replicas), the metadata log (controller) or __consumer_offsets (coordinator). A killed member
  is gone; its partitions move to the others at their committed offsets.
- ``pause-*`` (SIGSTOP, then SIGCONT seconds to tens of seconds later) of any of them: a GC pause,
  a hung disk, an overloaded host. Ray sees nothing (the process is alive), so raylog's own
  heartbeats must fence it, and a paused leader that wakes believing it still leads must not
  acknowledge anything (Jepsen's favourite).
- ``lose-node``: a worker node (raylet and every process on it) is removed without warning, the
  way a machine is lost (its processes may keep answering for a while: zombies); a fresh node
  joins a few seconds later, as an autoscaler would add one, and the lost node's replicas move
  there once node_lost_timeout_ms has passed.
- ``restart-node``: a worker node goes down the same way and comes back seconds later on its own
  disk (a reboot, ``ray stop``/``ray start``, a pod rescheduled onto its volume): the same raylog
  node under a new Ray node id, whose replicas recover in place and catch up.
- ``restart-cluster`` (run by tests/support/chaos.py, which restarts the workload around it): the
  whole Ray cluster ends, stopped or with every process SIGKILLed, and starts again on the same
  disks, the nodes coming back in a random order, one of them sometimes only after the others
  elected leaders.
- ``elect-leaders`` and ``reassign``: an operator moves leadership (preferred election) and
  reorders a partition's replicas while traffic runs.
- ``fill-disk``: a node's data directory fills up (a ballast file fills its small tmpfs); appends
  there fail with KafkaStorageError until the ballast goes.
- ``pause-busy-leader``: SIGSTOP of a leader whose node also runs a producer and a group member
  of the workload, busy with it over the same-node channel and the read page: they must learn the
  new leader once the old one is fenced, as clients elsewhere do.
- ``flip-follower-byte``: one byte of a committed batch in a follower's segment flips on disk
  (bit rot); then, half the time, that follower is made leader. Its local readers skip the batch
  by CRC; as leader it never serves it, hands over and fetches it again.
- ``intrude-channels``: a local process of another user (or, where the run may not start one,
  of the same user without the secret) connects to every produce channel on the machine and sends
  a well-formed batch: every one must be refused, and nothing reaches a log.

Every fault is recorded (kind, target, start and end) and undone by ``heal()``; ``heal_all()``
undoes whatever is still in force (resumes paused processes, removes ballast), so a run always
ends with a whole cluster. Randomness comes from one ``random.Random`` the caller seeds.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray

from raylog.errors import RaylogError
from raylog.naming import CONTROLLER_ACTOR_NAME, OFFSETS_TOPIC, coordinator_actor_name
from raylog.records import TopicPartition
from raylog.storage.batch import iter_batches
from tests.support.disks import fill
from tests.support.processes import pause

KILLS = ("kill-leader", "kill-follower", "kill-controller", "kill-coordinator", "kill-member")
PAUSES = ("pause-leader", "pause-follower", "pause-controller", "pause-coordinator", "pause-member")
CLUSTER = ("lose-node", "restart-node", "restart-cluster", "elect-leaders", "reassign", "fill-disk", "pause-busy-leader",
           "flip-follower-byte", "intrude-channels")
KINDS = KILLS + PAUSES + CLUSTER


@dataclass
class Fault:
    kind: str
    target: str
    started: float = field(default_factory=time.monotonic)
    duration_s: float = 0.0
    ended: float | None = None
    pid: int | None = None
    node: str | None = None
    data_dir: str | None = None
    ballast: Path | None = None
    error: str | None = None

    def describe(self) -> str:
        extra = f" for {self.duration_s:.0f} s" if self.duration_s else ""
        return f"{self.kind} {self.target}{extra}" + (f" (could not: {self.error})" if self.error else "")


class FaultInjector:
    """Faults against ``sim`` (tests/support/cluster.SimulatedCluster) running ``topics`` and,
    optionally, a consumer group ``group`` whose members ``members()`` returns as actor handles."""

    def __init__(self, sim, topics: list[str], rng: random.Random, group: str | None = None,
                 members=None, pause_s: tuple[float, float] = (2.0, 20.0), restart_cluster=None,
                 own: dict | None = None):
        """``restart_cluster()``: runs a whole-cluster restart (with the workload around it) and
        describes it; without one that fault is skipped. ``own``: faults the workload runs itself
        (kind -> a callable that runs one and describes it), recorded as the others."""
        self.sim = sim
        self.restart_cluster = restart_cluster
        self.own = own or {}
        self.topics = topics
        self.rng = rng
        self.group = group
        self.members = members or (lambda: [])
        self.pause_s = pause_s
        self.active: list[Fault] = []
        self.history: list[Fault] = []
        self.lost_nodes: list[str] = []
        self.intrusions = 0
        """Requests of an intruder a produce channel answered (must stay 0)."""

    @property
    def cluster(self):
        """The raylog cluster of the simulated cluster as it is now (a whole-cluster restart makes a new one)."""
        return self.sim.cluster

    # --- choosing targets ------------------------------------------------------------------

    def _partitions(self) -> list[tuple[str, int]]:
        out = [(t, p) for t in self.topics for p in range(self.cluster.metadata.partition_count(t))]
        if OFFSETS_TOPIC in self.cluster.admin().list_topics(include_internal=True):
            out += [(OFFSETS_TOPIC, p) for p in range(self.cluster.config.offsets_topic_num_partitions)]
        return out

    def _replica(self, role: str) -> tuple[str, dict] | None:
        topic, p = self.rng.choice(self._partitions())
        views = [v for v in self.cluster.admin().describe_replicas(topic, p) if v.get("role") == role]
        if not views:
            return None
        view = self.rng.choice(views)
        return f"{topic}-{p} replica {view['replica_id']}", view

    def _controller_pid(self) -> int:
        return ray.get(ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog").ping.remote(), timeout=10)

    def _coordinator(self) -> tuple[str, int] | None:
        if self.group is None:
            return None
        from raylog.producer.partitioner import coordinator_partition

        p = coordinator_partition(self.group, self.cluster.config.offsets_topic_num_partitions)
        actor = ray.get_actor(coordinator_actor_name(p), namespace="raylog")
        return f"coordinator {p}", ray.get(actor.ping.remote(), timeout=10)

    def _member(self) -> tuple[str, int, object] | None:
        members = self.members()
        if not members:
            return None
        actor = self.rng.choice(members)
        return f"member {actor}", ray.get(actor.pid.remote(), timeout=10), actor

    def _target_pid(self, what: str) -> tuple[str, int] | None:
        if what in ("leader", "follower"):
            found = self._replica(what)
            return None if found is None else (found[0], found[1]["pid"])
        if what == "controller":
            return "controller", self._controller_pid()
        if what == "coordinator":
            return self._coordinator()
        found = self._member()
        return None if found is None else found[:2]

    # --- injecting -------------------------------------------------------------------------

    def inject(self, kind: str) -> Fault:
        """Start one fault of ``kind``; a fault with a duration stays in ``active`` until healed."""
        fault = Fault(kind, "?")
        try:
            self._start(fault)
        except (RaylogError, ray.exceptions.RayError, OSError, subprocess.SubprocessError, ValueError) as exc:
            fault.error = f"{type(exc).__name__}: {exc}"
            if fault.ballast is not None:
                fault.ballast.unlink(missing_ok=True)
        self.history.append(fault)
        if fault.error is None and fault.duration_s:
            self.active.append(fault)
        else:
            fault.ended = time.monotonic()
        return fault

    def _start(self, fault: Fault) -> None:
        action, _, what = fault.kind.partition("-")
        if fault.kind in self.own:
            fault.target = self.own[fault.kind]()
        elif fault.kind in KILLS + PAUSES:
            target = self._target_pid(what)
            if target is None:
                raise ValueError(f"no {what} to {action}")
            fault.target, fault.pid = target
            if action == "kill":
                os.kill(fault.pid, signal.SIGKILL)
            else:
                fault.duration_s = self.rng.uniform(*self.pause_s)
                pause(fault.pid)
        elif fault.kind in ("lose-node", "restart-node"):
            workers = [n for n in self.sim.node_ids() if n != self.sim.head_id()]
            if len(workers) < 3:
                raise ValueError("fewer than 3 worker nodes: losing one would stall replication factor 3")
            mounted = [n for n in workers if n in self.sim.disks]
            if fault.kind == "lose-node" and len(mounted) == 1 and len(workers) > 1:
                workers.remove(mounted[0])  # keep one data directory fill-disk can fill
            fault.node = self.rng.choice(workers)
            fault.data_dir = self.sim.data_dirs[fault.node]
            fault.target = f"node {self.sim.raylog_node(fault.node)} (Ray node {fault.node[:12]})"
            fault.duration_s = self.rng.uniform(3.0, 10.0)  # until it (or a fresh node) is back
            self.sim.remove(fault.node)
            if fault.kind == "lose-node":
                self.lost_nodes.append(fault.node)
        elif fault.kind == "restart-cluster":
            if self.restart_cluster is None:
                raise ValueError("no workload to restart with the cluster")
            self.heal_all()
            fault.target = self.restart_cluster()
        elif fault.kind == "pause-busy-leader":
            busy = {ray.get(m.node.remote(), timeout=10) for m in self.members()}
            led = [(t, s["partition"], s) for t in self.topics for s in self.cluster.admin().describe_partitions(t)
                   if not s["offline"] and s.get("ray_node_id") in busy]
            if not led:
                raise ValueError("no leader shares its node with a member now")
            topic, p, state = self.rng.choice(led)
            fault.target, fault.pid = f"{topic}-{p} replica {state['leader']} (a member and a producer on its node)", \
                state["pid"]
            fault.duration_s = self.rng.uniform(*self.pause_s)
            pause(fault.pid)
        elif fault.kind == "flip-follower-byte":
            fault.target = self._flip_follower_byte()
        elif fault.kind == "intrude-channels":
            refused, answered, _ = intrude_channels()
            fault.target = f"{refused} channels refused the intruder"
            if answered:
                self.intrusions += answered
                raise ValueError(f"{answered} channels answered an intruder")
        elif fault.kind == "elect-leaders":
            moved = self.cluster.admin().elect_leaders()
            fault.target = f"{len(moved)} partitions moved"
        elif fault.kind == "reassign":
            topic, p = self.rng.choice([(t, p) for t, p in self._partitions() if t != OFFSETS_TOPIC])
            admin = self.cluster.admin()
            info = admin.describe_partitions(topic)[p]
            nodes = [r["node_id"] for r in info["replicas"]]
            if info["adding"] or not all(r["node_alive"] for r in info["replicas"]):
                raise ValueError(f"{topic}-{p} is being reassigned or has a replica on a lost node")
            shift = self.rng.randrange(1, len(nodes))
            order = nodes[shift:] + nodes[:shift]
            admin.alter_partition_reassignments({TopicPartition(topic, p): order})
            admin.elect_leaders([TopicPartition(topic, p)])
            fault.target = f"{topic}-{p} led from node {order[0]}"
        elif fault.kind == "fill-disk":
            alive = [n for n in self.sim.disks if n in self.sim.node_ids()]
            if not alive:
                raise ValueError("no node data directory on a tmpfs (mounting needs root)")
            fault.node = self.rng.choice(alive)
            fault.target = f"node {fault.node[:12]} data directory"
            fault.duration_s = self.rng.uniform(*self.pause_s)
            fault.ballast = self.sim.disks[fault.node] / "ballast.fill"
            fill(fault.ballast)
        else:
            raise ValueError(f"unknown fault {fault.kind!r}")

    def _flip_follower_byte(self) -> str:
        topic = self.rng.choice(self.topics)
        # A follower in sync, and another in-sync replica to take over from it once it leads.
        states = [s for s in self.cluster.admin().describe_partitions(topic)
                  if not s["offline"] and len(s["isr"]) >= 2 and s.get("high_watermark", 0) > 0]
        if not states:
            raise ValueError("no partition with an in-sync follower and records to rot")
        state = self.rng.choice(states)
        p = state["partition"]
        follower = self.rng.choice([r for r in state["replicas"] if r["replica_id"] != state["leader"]
                                    and r["replica_id"] in state["isr"]])
        directory = Path(follower["directory"])
        segment = max(directory.glob("*.log"))
        data = segment.read_bytes()
        # A byte inside a batch well below the high watermark (committed, and already copied here).
        committed = [b for b in iter_batches(data) if b.last_offset < state["high_watermark"] - 1000]
        if not committed:
            raise ValueError(f"{topic}-{p}: no committed batch old enough in {segment.name}")
        batch = self.rng.choice(committed)
        at = batch.position + self.rng.randrange(61, batch.size)
        with open(segment, "r+b") as f:
            f.seek(at)
            f.write(bytes([data[at] ^ 0x5A]))
        target = f"{topic}-{p} replica {follower['replica_id']} offset {batch.base_offset}"
        if self.rng.random() < 0.5:
            order = [follower["node_id"]] + [r["node_id"] for r in state["replicas"]
                                             if r["replica_id"] != follower["replica_id"]]
            # The byte is flipped whatever happens next: a failure here must still name the target
            # (a run once reported this fault as not done, and the rotted replica led after a restart).
            try:
                self.cluster.admin().alter_partition_reassignments({TopicPartition(topic, p): order})
                self.cluster.admin().elect_leaders([TopicPartition(topic, p)])
                target += ", then made leader"
            except RaylogError as exc:
                target += f", not made leader ({type(exc).__name__}: {exc})"
        return target

    def heal(self, fault: Fault) -> None:
        """Undo a fault with a duration: resume, add a fresh node, remove the ballast."""
        if fault in self.active:
            self.active.remove(fault)
        if fault.kind.startswith("pause-") and fault.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(fault.pid, signal.SIGCONT)
        elif fault.kind == "lose-node":
            self.sim.add()
        elif fault.kind == "restart-node":
            self.sim.add(fault.data_dir)
        elif fault.kind == "fill-disk" and fault.ballast is not None:
            fault.ballast.unlink(missing_ok=True)
        fault.ended = time.monotonic()

    def due(self) -> list[Fault]:
        now = time.monotonic()
        return [f for f in self.active if now >= f.started + f.duration_s]

    def heal_all(self) -> None:
        for fault in list(self.active):
            self.heal(fault)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for fault in self.history:
            if fault.error is None:
                out[fault.kind] = out.get(fault.kind, 0) + 1
        return out

    def skipped(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for fault in self.history:
            if fault.error is not None:
                out[fault.kind] = out.get(fault.kind, 0) + 1
        return out


INTRUDER = r"""
import socket, struct, sys
prefix, batch, files = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3:]
names = sorted({line.split()[-1] for line in open("/proc/net/unix") if line.split()[-1].startswith(prefix)})
# A well-formed produce and a well-formed fetch (the documented frames).
request = struct.pack("<IIbii", len(batch), 1, 1, -1, 1000) + batch \
    + struct.pack("<IIbii", 20, 2, 2, -1, 0) + struct.pack("<qiii", 0, 1 << 20, 0, 1)
refused = answered = readable = 0
for name in names:
    replies = 0
    # The requests first after a hello of the current version with a secret it cannot know, then
    # on their own (the channel before it had a hello).
    for hello in (struct.pack("<4sH32s", b"RLPC", 2, bytes(32)), b""):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect("\0" + name[1:])
            sock.sendall(hello + request)
            replies += bool(sock.recv(8))
        except OSError:
            pass
        finally:
            sock.close()
    answered += bool(replies)
    refused += not replies
for path in files:
    try:
        open(path, "rb").read(1)
        readable += 1
    except OSError:
        pass
print(refused, answered, readable)
"""


def another_user_can_run() -> str | None:
    """Why a process of another uid cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root to start a process as another user (setpriv)"
    if not Path("/usr/bin/setpriv").exists() or not Path("/usr/bin/python3").exists():
        return "needs setpriv and /usr/bin/python3 (what runs as uid 65534: the venv is under /root)"
    return None


def intrude_channels(prefix: str = "@raylog/", files: list[str] = ()) -> tuple[int, int, int]:
    """Run a process that connects to every raylog produce channel on the machine whose name starts
    with ``prefix``, sends a well-formed batch and fetch without the secret, and tries to read
    ``files``: as uid 65534 where the run may start one (root, setpriv), else as this user.
    Returns (channels that refused it, channels that answered, files it could read)."""
    from raylog.storage import batch as rb

    command = [sys.executable, "-c", INTRUDER]
    if another_user_can_run() is None:
        command = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                   INTRUDER]
    batch = rb.build([b"a", b"b", b"c"], timestamps_ms=[1] * 3)
    done = subprocess.run(command + [prefix, batch.hex(), *files], capture_output=True, text=True, timeout=120,
                          cwd="/")
    if done.returncode:
        raise RuntimeError(f"the intruder failed: {done.stderr}")
    refused, answered, readable = map(int, done.stdout.split())
    return refused, answered, readable
