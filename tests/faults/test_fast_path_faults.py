"""The same-node fast paths under faults (issue 31): the produce channel and reads of the leader's files.

Fault model: a leader is paused (SIGSTOP: a GC pause, a hung disk, an overloaded host) while
producers and consumers on its own node are busy with it (the channel, the read page) and others,
on other nodes, use Ray calls; and a byte of a replica's segment rots on disk.

What must hold: a paused leader holds up only its own partition: other partitions keep being
acknowledged, and nothing waits on a socket or a lock for it (producer.close() included). Once
the controller has fenced it (replica_session_timeout_ms), producers and consumers on its node
and elsewhere learn the new leader and go on, long before request_timeout_ms would have made
them give up. A corrupt batch is never served: the replica holding it gives up leadership and
fetches it again. No acknowledged record is lost (tests/support/history.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import raylog
from raylog.errors import RaylogError
from raylog.records import TopicPartition
from raylog.storage import batch as rb
from tests.integration.conftest import wait_for
from tests.support.cluster import simulated_cluster
from tests.support.event_log import logged
from tests.support.history import History, value_of
from tests.support.processes import pause
from tests.support.workload import read_everything

pytestmark = [pytest.mark.ray, pytest.mark.cluster, pytest.mark.slow]

SESSION_MS = 4000
REQUEST_MS = 600_000
"""Far above the session timeout, and above any wait here: what these tests show is failover that
does not wait for it, so anything that resumes while the old leader sleeps came from fencing, however
long a loaded machine takes to fence and elect."""
CONFIG = {"replica_session_timeout_ms": SESSION_MS, "replica_heartbeat_interval_ms": 500,
          "replica_lag_time_max_ms": 4000, "offsets_topic_num_partitions": 1}


@pytest.fixture
def single_node(tmp_path):
    cluster = raylog.connect("local", data_root=str(tmp_path / "data"), num_cpus=2, cluster_config=CONFIG,
                             object_store_memory=300 * 1024 * 1024)
    try:
        yield cluster
    finally:
        ray.shutdown()


def test_a_paused_leader_holds_up_only_its_own_partition_and_its_sends_fail_in_time(single_node):
    """Finding 3: the channel sent with a blocking sendall under its lock on the producer's one
    sender thread, and the default 1 MiB batch is larger than a socket's buffer: against a
    SIGSTOPped leader the call never returned, every partition stopped, and close() waited."""
    cluster = single_node
    cluster.admin().create_topic("two", 2)
    producer = cluster.producer(request_timeout_ms=5000, delivery_timeout_ms=10_000, retries=2, linger_ms=0)
    assert producer.send("two", b"warm", partition=0).get(60) and producer.send("two", b"warm", partition=1).get(60)
    assert producer.metrics()["producer-metrics"]["requests-sent-locally-total"] > 0, "the channel is in use"
    paused = cluster.admin().describe_partitions("two")[0]["pid"]
    payload = [os.urandom(1000) for _ in range(1024)]  # ~1 MiB batches, larger than a socket's buffer
    stop = threading.Event()
    futures: dict[int, list] = {0: [], 1: []}

    def send() -> None:
        while not stop.is_set():
            for p in (0, 1):
                futures[p].append(producer.send_batch("two", payload, partition=p))
            time.sleep(0.05)

    pause(paused)
    sender = threading.Thread(target=send, daemon=True)
    try:
        sender.start()
        wait_for(lambda: sum(f.is_done() and not f.errors() for f in futures[1]) >= 20, timeout_s=120,
                 describe=lambda: f"partition 1: {sum(f.is_done() for f in futures[1])} of {len(futures[1])} done")
        stop.set()
        sender.join(30)
        for f in futures[0]:  # the paused partition's sends end within delivery_timeout_ms, as errors
            with pytest.raises(RaylogError):
                f.wait(timeout=60)
        closing = threading.Thread(target=producer.close, kwargs={"timeout": 30}, daemon=True)
        closing.start()
        closing.join(60)
        assert not closing.is_alive(), "close() returned"
    finally:
        stop.set()
        os.kill(paused, signal.SIGCONT)


def test_a_consumer_on_a_paused_leaders_node_reads_its_other_partitions_without_waiting_for_it(single_node):
    """Issue 31's chaos run: a member's poll took 7.4 s, the whole pause of a leader on its node.
    Finding a partition's files here asked the leader where they are (read_location), and a
    paused leader answers nothing until it wakes or request_timeout_ms passes (10 minutes here).
    The metadata says where every replica lives: the poll must go on with the other partition."""
    cluster = single_node
    cluster.admin().create_topic("lookup", 2)
    producer = cluster.producer(linger_ms=0)
    for p in (0, 1):
        producer.send_batch("lookup", [b"%d-%d" % (p, i) for i in range(100)], partition=p).get(60)
    producer.close()
    paused = cluster.admin().describe_partitions("lookup")[0]["pid"]
    consumer = cluster.consumer(request_timeout_ms=600_000)
    tps = [TopicPartition("lookup", p) for p in (0, 1)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)  # no offset lookup: what is shown is the first read
    got: list[bytes] = []
    done = threading.Event()

    def poll() -> None:
        while len(got) < 100:
            got.extend(v for chunk in consumer.poll_batch(timeout_ms=200) if chunk.partition == 1
                       for v in chunk.value_list())
        done.set()

    pause(paused)
    try:
        threading.Thread(target=poll, daemon=True).start()
        assert done.wait(120), f"partition 1 read {len(got)} of 100 records while partition 0's leader was paused"
        assert got == [b"1-%d" % i for i in range(100)]
        assert consumer.metrics()["consumer-fetch-manager-metrics"]["bytes-read-locally-total"] > 0
    finally:
        os.kill(paused, signal.SIGCONT)
        consumer.close()


@ray.remote(num_cpus=0)
class NodeClient:
    """A producer and a consumer on one node, sending keyed records to one partition and reading it,
    recording when each ack and each record came."""

    def __init__(self, topic: str, partition: int, name: str):
        self.cluster = raylog.connect(address="auto", namespace="raylog")
        self.topic, self.partition, self.name = topic, partition, name
        self.producer = self.cluster.producer(request_timeout_ms=REQUEST_MS, delivery_timeout_ms=REQUEST_MS + 60_000,
                                              linger_ms=1)
        self.consumer = self.cluster.consumer(auto_offset_reset="latest", request_timeout_ms=REQUEST_MS)
        self.consumer.assign([TopicPartition(topic, partition)])
        self.acks: list[tuple[bytes, int, int, float]] = []
        self.reads: list[tuple[int, bytes, float]] = []
        self.issued: list[tuple[bytes, float]] = []
        self.failed: list[tuple[bytes, str]] = []
        self._stop = threading.Event()
        for target in (self._produce, self._consume):
            threading.Thread(target=target, daemon=True).start()

    def _produce(self) -> None:
        n = 0
        while not self._stop.is_set():
            value = value_of(self.name.encode(), n)
            self.issued.append((value, time.monotonic()))
            future = self.producer.send(self.topic, value, key=self.name.encode(), partition=self.partition)
            future.add_callback(lambda m, v=value: self.acks.append((v, m.partition, m.offset, time.monotonic())))
            future.add_errback(lambda e, v=value: self.failed.append((v, repr(e))))
            n += 1
            time.sleep(0.01)

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                for chunk in self.consumer.poll_batch(timeout_ms=200):
                    now = time.monotonic()
                    self.reads += [(o, v, now) for o, v in zip(chunk.offsets.tolist(), chunk.value_list())]
            except RaylogError:
                time.sleep(0.1)

    def paths(self) -> dict:
        producer = self.producer.metrics()["producer-metrics"]
        consumer = self.consumer.metrics()["consumer-fetch-manager-metrics"]
        return {"sent_locally": producer["requests-sent-locally-total"],
                "read_locally": consumer["bytes-read-locally-total"]}

    def report(self) -> dict:
        return {"acks": list(self.acks), "reads": list(self.reads), "issued": list(self.issued),
                "failed": list(self.failed)}

    def stop(self) -> None:
        self._stop.set()
        try:
            self.producer.flush(timeout=120)
        except RaylogError:
            pass
        self.producer.close(timeout=30)
        self.consumer.close()


def resumed_after(report: dict, kind: str, paused_at: float) -> float | None:
    """Seconds from the pause to the first ack or read (``kind``) of a record sent after it: one
    only the new leader can have taken (events end with their monotonic time)."""
    sent_after = {value for value, at in report["issued"] if at > paused_at}
    later = [e[-1] for e in report[kind] if value_in(e, kind) in sent_after]
    return min(later) - paused_at if later else None


def value_in(event: tuple, kind: str) -> bytes:
    return event[0] if kind == "acks" else event[1]


def test_a_paused_leaders_partition_acknowledges_and_delivers_again_once_it_is_fenced(tmp_path):
    """The failover issue 31 asks for: producers and consumers on the paused leader's node (the
    channel, local reads) and on another node (Ray calls) go on at the new leader once the
    controller fenced the old one, not after request_timeout_ms (10 minutes here)."""
    with simulated_cluster(str(tmp_path), workers=3, cluster_config=CONFIG) as sim:
        admin = sim.cluster.admin()
        admin.create_topic("failover", 1, replication_factor=3)
        leader = admin.describe_partitions("failover")[0]
        here = leader["ray_node_id"]
        elsewhere = sim.head_id()  # holds no replica (the workers hold the three): Ray calls only
        clients = {where: NodeClient.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                   .remote("failover", 0, where) for where, node in (("local", here), ("remote", elsewhere))}
        wait_for(lambda: all(len(ray.get(c.report.remote())["reads"]) > 200 for c in clients.values()),
                 timeout_s=120)
        paths = {w: ray.get(c.paths.remote()) for w, c in clients.items()}
        assert paths["local"]["sent_locally"] > 0 and paths["local"]["read_locally"] > 0, paths
        assert paths["remote"]["sent_locally"] == 0 and paths["remote"]["read_locally"] == 0, paths
        paused_at = time.monotonic()
        pause(leader["pid"])
        try:
            wait_for(lambda: admin.describe_partitions("failover")[0]["leader"] != leader["leader"], timeout_s=120)
            wait_for(lambda: all(resumed_after(report, kind, paused_at) is not None
                                 for report in ray.get([c.report.remote() for c in clients.values()])
                                 for kind in ("acks", "reads")), timeout_s=300)
        finally:
            os.kill(leader["pid"], signal.SIGCONT)
        reports = {w: ray.get(c.report.remote()) for w, c in clients.items()}
        for where, report in reports.items():
            acked, read = resumed_after(report, "acks", paused_at), resumed_after(report, "reads", paused_at)
            print(f"{where}: acknowledged again {acked:.1f} s and delivering again {read:.1f} s after the pause "
                  f"(session timeout {SESSION_MS / 1000:.0f} s, request timeout {REQUEST_MS / 1000:.0f} s)")
        ray.get([c.stop.remote() for c in clients.values()])
        history = History()
        for where, report in {w: ray.get(c.report.remote()) for w, c in clients.items()}.items():
            for value, _ in report["issued"]:
                history.issue(where, value)
            for value, partition, offset, _ in report["acks"]:
                history.ack(value, partition, offset)
            for value, error in report["failed"]:
                history.fail(value, error)
        anomalies = history.check(read_everything(sim.cluster, "failover", timeout_s=120))
        assert anomalies == {}, {k: v[:5] for k, v in anomalies.items()}


def rotted_leader(cluster, records: int, rotted: int) -> tuple[list[bytes], dict, str]:
    """Topic "rot" (one partition, created by the caller) gets ``records`` numbered records in
    batches of 100; a payload byte of a follower's batch holding offset ``rotted`` flips on disk (the
    batch passed its CRC when appended), and that follower is made leader. Returns the values, the
    rotted replica (describe_partitions' row) and its segment's path."""
    admin = cluster.admin()
    producer = cluster.producer(acks="all", linger_ms=0, compression_type="none")
    values = [b"record %05d" % i for i in range(records)]
    for start in range(0, records, 100):
        producer.send_batch("rot", values[start:start + 100], partition=0).wait(60)
    producer.close()
    state = admin.describe_partitions("rot")[0]
    victim = next(r for r in state["replicas"] if r["replica_id"] != state["leader"])
    segment = sorted(p for p in os.listdir(victim["directory"]) if p.endswith(".log"))[0]
    path = os.path.join(victim["directory"], segment)
    with open(path, "rb") as f:
        data = f.read()
    batch = next(b for b in rb.iter_batches(data) if b.base_offset == rotted)
    with open(path, "r+b") as f:
        f.seek(batch.position + batch.size - 5)
        f.write(bytes([data[batch.position + batch.size - 5] ^ 0xFF]))
    order = [victim["node_id"]] + [r["node_id"] for r in state["replicas"] if r["replica_id"] != victim["replica_id"]]
    admin.alter_partition_reassignments({TopicPartition("rot", 0): order})  # the rotted replica first
    wait_for(lambda: admin.elect_leaders([TopicPartition("rot", 0)]) or
             admin.describe_partitions("rot")[0]["leader"] == victim["replica_id"], timeout_s=120)
    return values, victim, path


def read_until(consumer, got: list[bytes], done, describe, timeout_s: float = 120) -> None:
    """Poll ``consumer``'s values onto ``got`` until ``done()``; fails with ``describe()`` past the timeout."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, describe()
        for chunk in consumer.poll_batch(timeout_ms=500):
            got += chunk.value_list()


def test_a_byte_rotted_on_a_replica_is_never_served_and_the_replica_fetches_it_again(tmp_path):
    """A byte of a follower's segment flips on disk (the batch passed its CRC when appended). Local
    readers of its files skip it (CRC); once it leads, its fetch finds it, serves what comes before,
    hands leadership to another in-sync replica and, as a follower, cuts its log there and fetches
    the rest again: every consumer reads every record intact."""
    with simulated_cluster(str(tmp_path), workers=3, cluster_config=CONFIG) as sim:
        admin = sim.cluster.admin()
        admin.create_topic("rot", 1, replication_factor=3)
        values, victim, path = rotted_leader(sim.cluster, 2000, rotted=700)
        consumer = sim.cluster.consumer(auto_offset_reset="earliest", local_reads=False)
        consumer.assign([TopicPartition("rot", 0)])
        got: list[bytes] = []
        read_until(consumer, got, lambda: len(got) >= 2000, lambda: f"read {len(got)} of 2000")
        consumer.close()
        assert got == values, "every record, intact, in order"
        assert logged("corrupt_batch", topic="rot", offset="700"), "the replica found the rotted batch"
        wait_for(lambda: len(admin.describe_partitions("rot")[0]["isr"]) == 3, timeout_s=120)
        views = {v["replica_id"]: v for v in admin.describe_replicas("rot", 0)}
        assert views[victim["replica_id"]]["log_end_offset"] == 2000
        # Only the rotted replica cuts its log: a follower's fetch parked at it as it handed over was
        # once told its cut log end, and the follower (the new leader) cut committed records to it.
        cuts = logged("truncation", topic="rot")
        assert [f["log_end_offset"] for f in cuts if f["replica"] == str(victim["replica_id"])] == ["700"]
        assert [f for f in cuts if f["replica"] != str(victim["replica_id"])] == [], "no other replica cut its log"
        with open(path, "rb") as f:
            again = f.read()
        fixed = next(b for b in rb.iter_batches(again) if b.base_offset == 700)
        assert fixed.compute_crc() == fixed.crc, "fetched again from the new leader"


def test_a_rotted_leader_refused_a_hand_over_asks_again_once_an_in_sync_replica_is_back(tmp_path):
    """The rotted replica leads, and its only follower is paused and fenced when a reader first
    reaches the corrupt batch: the controller refuses the hand-over (no other in-sync replica).
    The leader used to report a batch once only, so the partition served nothing past it for good
    (a short chaos run's final read once waited 180 s on it). It asks again while readers still
    ask for the batch: once the follower is back in sync, it takes over and every record is read."""
    # No preferred-leader election: the rotted replica is the preferred leader, and one that ran
    # once it was back in sync (every 30 s, so on a slow run) would move the leadership back.
    with simulated_cluster(str(tmp_path), workers=2,
                           cluster_config={**CONFIG, "auto_leader_rebalance_enable": False}) as sim:
        admin = sim.cluster.admin()
        admin.create_topic("rot", 1, replication_factor=2)
        values, victim, _ = rotted_leader(sim.cluster, 1000, rotted=500)
        other = next(r for r in admin.describe_replicas("rot", 0) if r["replica_id"] != victim["replica_id"])
        consumer = sim.cluster.consumer(auto_offset_reset="earliest", local_reads=False)
        consumer.assign([TopicPartition("rot", 0)])
        got: list[bytes] = []
        pause(other["pid"])
        try:
            wait_for(lambda: admin.describe_partitions("rot")[0]["isr"] == [victim["replica_id"]], timeout_s=120)
            read_until(consumer, got, lambda: logged("corrupt_batch_kept", topic="rot", offset="500"),
                       lambda: f"no refused hand-over logged; read {len(got)}")
            assert got == values[:500], "what comes before the corrupt batch, and nothing past it"
        finally:
            os.kill(other["pid"], signal.SIGCONT)
        wait_for(lambda: len(admin.describe_partitions("rot")[0]["isr"]) == 2, timeout_s=120)
        read_until(consumer, got, lambda: len(got) >= 1000,
                   lambda: f"read {len(got)} of 1000 once the follower was back in sync")
        consumer.close()
        assert got == values, "every record, intact, in order"
        assert admin.describe_partitions("rot")[0]["leader"] == other["replica_id"]
