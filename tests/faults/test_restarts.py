"""Restarts: the whole Ray cluster, one node with its disk, a node that never comes back (issue 30).

Fault model: Ray users restart clusters (``ray stop``/``ray start``, a reboot, ``ray down``/``ray
up`` on the same disks, KubeRay recreating pods over their volumes). Every process ends, cleanly
(``ray.shutdown()``, a simulated cluster stopped) or all at once (SIGKILL of every Ray process: a
power cut after the records reached the page cache), and a new Ray cluster, with new Ray node ids,
starts on the same data directories. Nodes come back in any order, some only after the others
have elected leaders; one node restarts alone while the others serve; one never comes back.

What must survive: every acknowledged record, in order, with its key, at its offset; every
committed group offset; a compacted topic's last value per key. The cluster takes new records
afterwards. A node back with its disk is the same raylog node: its replicas recover in place and
copy only what they missed. A node missing past node_lost_timeout_ms has its replicas re-created
elsewhere from the partition's leader, and a partition whose only replica is there stays offline
with an error that says so, never re-created empty. Another cluster's data directory is refused.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest
import ray

import raylog
from raylog.errors import ControllerNotAvailableError, KafkaTimeoutError, LeaderNotAvailableError
from raylog.records import OffsetAndMetadata, TopicPartition
from raylog.storage import files
from tests.integration.conftest import wait_for
from tests.support.cluster import kill_cluster_processes, simulated_cluster
from tests.support.event_log import logged
from tests.support.history import History
from tests.support.topics import consume_all
from tests.support.workload import Workload, read_everything

pytestmark = [pytest.mark.ray, pytest.mark.cluster, pytest.mark.slow]

RECORDS = 30_000
ONE_NODE_CONFIG = {"offsets_topic_num_partitions": 1}
SIM_CONFIG = {"offsets_topic_num_partitions": 1, "replica_session_timeout_ms": 4000,
              "replica_heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 4000, "request_timeout_ms": 10_000}


def connect_local(root: Path) -> raylog.Cluster:
    return raylog.connect("local", data_root=str(root), cluster_config=ONE_NODE_CONFIG, num_cpus=2,
                          object_store_memory=300 * 1024 * 1024)


def end_local_cluster(how: str) -> None:
    if how == "sigkill":
        assert kill_cluster_processes() > 0
    ray.shutdown()


def log_of(cluster, topic: str) -> dict[int, list[tuple[int, bytes, bytes]]]:
    """Every record of the topic as (offset, key, value) per partition, from the earliest."""
    partitions = cluster.metadata.partition_count(topic)
    ends = cluster.admin().end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign(list(ends))
    out = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 120
    while any((out[tp.partition][-1][0] + 1 if out[tp.partition] else 0) < end for tp, end in ends.items()):
        assert time.monotonic() < deadline, f"could not read {topic} to {ends}"
        for tp, records in consumer.poll(timeout_ms=500, max_records=50_000).items():
            out[tp.partition] += [(r.offset, r.key, r.value) for r in records]
    consumer.close()
    return out


@pytest.mark.parametrize("how", ["ray_shutdown", "sigkill"])
def test_a_whole_cluster_restart_on_one_node_serves_every_record_committed_offset_and_compacted_key(tmp_path, how):
    root = tmp_path / "data"
    cluster = connect_local(root)
    try:
        admin = cluster.admin()
        admin.create_topic("durable", 3)
        admin.create_topic("compacted", 1, cleanup_policy="compact", segment_bytes=64 * 1024)
        producer = cluster.producer(acks="all")
        sent = [producer.send("durable", b"value-%d" % i, key=b"key-%d" % (i % 97)) for i in range(RECORDS)]
        for i in range(RECORDS):
            producer.send("compacted", b"last-%d" % i, key=b"k%d" % (i % 50))
        producer.flush()
        producer.close()
        acked: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(3)}
        for i, future in enumerate(sent):
            meta = future.get(timeout=60)
            acked[meta.partition].append((meta.offset, b"key-%d" % (i % 97), b"value-%d" % i))
        member = cluster.consumer(group_id="readers", auto_offset_reset="earliest", enable_auto_commit=False)
        member.subscribe(["durable"])

        def assigned() -> bool:
            member.poll(timeout_ms=200)
            return len(member.assignment()) == 3
        wait_for(assigned, timeout_s=120)
        committed = {TopicPartition("durable", p): OffsetAndMetadata(len(acked[p]) // (p + 2), "", -1)
                     for p in range(3)}
        member.commit(committed)
        member.close(autocommit=False)
    finally:
        end_local_cluster(how)

    cluster = connect_local(root)
    try:
        admin = cluster.admin()
        assert sorted(admin.list_topics()) == ["compacted", "durable"]
        assert log_of(cluster, "durable") == {p: sorted(records) for p, records in acked.items()}
        assert {tp: om.offset for tp, om in admin.list_consumer_group_offsets("readers").items()} == \
            {tp: om.offset for tp, om in committed.items()}
        last = {}
        for _, key, value in log_of(cluster, "compacted")[0]:
            last[key] = value
        assert last == {b"k%d" % k: b"last-%d" % (RECORDS - 50 + k) for k in range(50)}
        producer = cluster.producer(acks="all")
        meta = producer.send("durable", b"after the restart", partition=0).get(timeout=60)
        assert meta.offset == len(acked[0])
        producer.close()
        resumed = cluster.consumer(group_id="readers", auto_offset_reset="earliest", enable_auto_commit=False)
        resumed.subscribe(["durable"])
        first = {}
        wait_for(lambda: first.update({tp: min(first.get(tp, 1 << 62), recs[0].offset)
                                       for tp, recs in resumed.poll(timeout_ms=500).items()}) or len(first) == 3,
                 timeout_s=120)
        assert first == {tp: om.offset for tp, om in committed.items()}, "the group goes on from its commits"
        resumed.close(autocommit=False)
    finally:
        ray.shutdown()


def partitions_led(cluster, topic: str) -> bool:
    return all(not p["offline"] for p in cluster.admin().describe_partitions(topic))


def fully_in_sync(cluster, topic: str, replicas: int = 3) -> bool:
    return all(len(p["isr"]) == replicas and not p["offline"] for p in cluster.admin().describe_partitions(topic))


def test_a_three_node_cluster_restarted_in_any_order_keeps_every_acknowledged_record(tmp_path):
    """RF=3, min_insync_replicas=2, each node its own data directory. First restart: stopped, then
    nodes 3 and 1 come back, elect leaders and take acks='all' writes before node 2 returns. Second:
    every process SIGKILLed, nodes back in another order. Clients connected while partitions are
    offline get retriable errors and carry on."""
    topic = "restarted"
    history = History()
    with simulated_cluster(str(tmp_path), workers=3, cluster_config=SIM_CONFIG) as sim:
        sim.cluster.admin().create_topic(topic, 3, replication_factor=3, min_insync_replicas=2)
        workload = Workload(sim.cluster, topic, history=history, prefix=b"a", request_timeout_ms=10_000)
        wait_for(lambda: workload.acked() > 2000, timeout_s=120)
        workload.stop()
        dirs = sim.worker_dirs()

        sim.restart_all([dirs[2]], SIM_CONFIG)
        # Its delivery timeout outlasts a node's start on a loaded machine.
        early = sim.cluster.producer(acks="all", request_timeout_ms=10_000, delivery_timeout_ms=300_000)
        pending = early.send(topic, b"sent while offline", partition=0)  # retried until partitions are back
        sim.add(dirs[0])
        wait_for(lambda: partitions_led(sim.cluster, topic), timeout_s=120)
        assert pending.get(timeout=300).offset >= 0
        early.close()
        states = {n["data_dir"]: n["state"] for n in sim.cluster.admin().describe_cluster()["nodes"]}
        assert states[dirs[1]] == "missing" and states[dirs[0]] in ("alive", "registered")
        workload = Workload(sim.cluster, topic, history=history, prefix=b"b", request_timeout_ms=10_000)
        wait_for(lambda: workload.acked() > 3000, timeout_s=120)
        sim.add(dirs[1])  # back only after the others elected and took writes: it truncates and catches up
        wait_for(lambda: fully_in_sync(sim.cluster, topic), timeout_s=120)
        wait_for(lambda: workload.acked() > 4000, timeout_s=120)
        workload.stop()

        sim.restart_all([dirs[1], dirs[2], dirs[0]], SIM_CONFIG, kill=True)
        wait_for(lambda: fully_in_sync(sim.cluster, topic), timeout_s=180)
        final = read_everything(sim.cluster, topic, timeout_s=120)
        anomalies = history.check(final)
        assert anomalies == {}, {k: v[:5] for k, v in anomalies.items()}
        assert len(history.acked) > 4000
        assert sum(len(v) for v in final.values()) >= len(history.acked) + 1
        # Waited for: a replica fenced for a starved moment makes its node read "registered".
        wait_for(lambda: all(n["state"] == "alive" for n in sim.cluster.admin().describe_cluster()["nodes"]),
                 timeout_s=120, describe=lambda: sim.cluster.admin().describe_cluster()["nodes"])


def test_a_node_restarted_with_its_disk_recovers_in_place_and_copies_only_what_it_missed(tmp_path):
    topic = "in-place"
    with simulated_cluster(str(tmp_path), workers=3, cluster_config=SIM_CONFIG) as sim:
        admin = sim.cluster.admin()
        admin.create_topic(topic, 1, replication_factor=3, min_insync_replicas=2)
        producer = sim.cluster.producer(acks="all", compression_type="none")
        producer.send_batch(topic, [os.urandom(1000) for _ in range(20_000)], partition=0).wait(timeout=120)
        follower = next(v for v in admin.describe_replicas(topic, 0) if v["role"] == "follower")
        node = sim.raylog_node(follower["ray_node_id"])
        size_before = admin.describe_partitions(topic)[0]["size_bytes"]
        data_dir = sim.data_dirs[follower["ray_node_id"]]
        sim.remove(follower["ray_node_id"])
        # A simulated node's processes outlive its raylet by seconds, and a zombie follower would
        # copy into the same directory itself; a rebooted machine's are gone at once.
        wait_for(lambda: not psutil.pid_exists(follower["pid"]), timeout_s=120)
        producer.send_batch(topic, [os.urandom(1000) for _ in range(2000)], partition=0).wait(timeout=120)
        grown = admin.describe_partitions(topic)[0]["size_bytes"] - size_before
        back = sim.add(data_dir)
        assert sim.raylog_node(back) == node, "the same data directory is the same node"
        wait_for(lambda: fully_in_sync(sim.cluster, topic), timeout_s=120)
        view = next(v for v in admin.describe_replicas(topic, 0) if v["replica_id"] == follower["replica_id"])
        copied = view["replication"]["bytes_fetched_as_follower"]
        assert view["log_end_offset"] == 22_000 and view["ray_node_id"] == back
        assert 0 < copied <= grown < size_before / 5, (copied, grown, size_before)
        producer.close()


def test_a_replica_whose_disk_lost_committed_records_is_not_elected_before_a_copy_that_holds_them(tmp_path):
    """Issue 30, from a chaos run: after a whole-cluster restart the first in-sync replica back was
    elected with a log its recovery had cut far below the high watermark (a hole in its segment),
    and the other replicas truncated 256,285 acknowledged records to it. Here the cut is made by
    hand while every process is down: the damaged replica comes back first, says it lost records
    it had checkpointed as committed, leaves the ISR, and the partition waits for the other copy."""
    topic = "damaged"
    count = 5000
    with simulated_cluster(str(tmp_path), workers=2, cluster_config=SIM_CONFIG) as sim:
        admin = sim.cluster.admin()
        admin.create_topic(topic, 1, replication_factor=2)
        producer = sim.cluster.producer(acks="all", compression_type="none")
        values = [b"v%06d" % i for i in range(count)]
        producer.send_batch(topic, values, partition=0).wait(timeout=120)
        producer.close()
        views = admin.describe_replicas(topic, 0)
        wait_for(lambda: all(files.read_checkpoint(Path(v["directory"]) / files.HIGH_WATERMARK_FILE) == count
                             for v in views), timeout_s=120)
        head = sim.head_id()
        # The head comes back first: damage its replica if it has one, else either worker's.
        damaged = next((v for v in views if v["ray_node_id"] == head), views[0])
        other = next(v for v in views if v is not damaged)
        first = [] if damaged["ray_node_id"] == head else [sim.data_dirs[damaged["ray_node_id"]]]
        other_dir = sim.data_dirs[other["ray_node_id"]]

        sim.power_cut()
        segment = Path(damaged["directory"]) / "00000000000000000000.log"
        with open(segment, "rb+") as f:
            data_end = os.lseek(f.fileno(), 0, os.SEEK_HOLE)
            f.truncate(data_end // 3)
        sim.restart_all(first, SIM_CONFIG)
        sim.cluster.admin().describe_cluster()  # a client's first request: the controller starts
        wait_for(lambda: logged("replica_lost_committed_records", topic=topic, replica=str(damaged["replica_id"])),
                 timeout_s=120)
        wait_for(lambda: logged("isr_shrink", topic=topic, reason="lost_committed_records"), timeout_s=120)
        assert sim.cluster.admin().describe_topics([topic])[0].partitions[0].leader is None, \
            "the damaged replica must not lead while the other copy may return"

        sim.add(other_dir)
        wait_for(lambda: fully_in_sync(sim.cluster, topic, 2), timeout_s=120)
        leader = sim.cluster.admin().describe_topics([topic])[0].partitions[0].leader
        assert leader.replica_id == other["replica_id"]
        assert [v for _, _, v in log_of(sim.cluster, topic)[0]] == values


def test_a_node_that_never_returns_has_its_replicas_recreated_after_node_lost_timeout(tmp_path):
    """An RF=2 partition on the lost node moves to another node once node_lost_timeout_ms passed;
    an RF=1 partition there stays offline with an error naming the node, never re-created empty."""
    timeout_ms = 3000
    with simulated_cluster(str(tmp_path), workers=3, cluster_config={**SIM_CONFIG,
                                                                   "node_lost_timeout_ms": timeout_ms}) as sim:
        admin = sim.cluster.admin()
        admin.create_topic("moved", 1, replication_factor=2)
        admin.create_topic("stranded", 1, replication_factor=1)
        lost = admin.describe_topics(["moved"])[0].partitions[0].replicas[1].node_id
        admin.alter_partition_reassignments({TopicPartition("stranded", 0): [lost]})
        wait_for(lambda: [r["node_id"] for r in admin.describe_partitions("stranded")[0]["replicas"]] == [lost],
                 timeout_s=120)
        producer = sim.cluster.producer(acks="all")
        producer.send_batch("moved", [b"m%d" % i for i in range(100)]).wait(timeout=120)
        producer.send_batch("stranded", [b"s%d" % i for i in range(100)]).wait(timeout=120)
        producer.close()
        sim.remove(sim.ray_node(lost))

        wait_for(lambda: logged("node_lost", node=str(lost)), timeout_s=120)
        assert float(logged("node_lost", node=str(lost))[0]["missing_s"]) >= timeout_ms / 1000
        wait_for(lambda: lost not in [r["node_id"] for r in admin.describe_partitions("moved")[0]["replicas"]]
                 and fully_in_sync(sim.cluster, "moved", 2), timeout_s=120)
        assert logged("reassignment_started", topic="moved", reason="node_lost"), "the RF=2 partition was moved"
        consumer = sim.cluster.consumer("moved", auto_offset_reset="earliest")
        assert [r.value for r in consume_all(consumer, 100)] == [b"m%d" % i for i in range(100)]
        consumer.close()

        stranded = admin.describe_partitions("stranded")[0]
        assert stranded["offline"] and [r["node_id"] for r in stranded["replicas"]] == [lost]
        assert not logged("reassignment_started", topic="stranded", reason="node_lost"), "never re-created empty"
        with pytest.raises(LeaderNotAvailableError, match=f"node {lost} missing"):
            sim.cluster.metadata.leader("stranded", 0)
        # Retried until delivery_timeout_ms; the request timeout is long enough that a starved
        # controller's late answer, not a timed-out call, is the last attempt's error.
        producer = sim.cluster.producer(acks="all", delivery_timeout_ms=30_000, request_timeout_ms=10_000)
        with pytest.raises(KafkaTimeoutError, match=f"node {lost} missing"):
            producer.send("stranded", b"nowhere").get(timeout=120)
        node = next(n for n in admin.describe_cluster()["nodes"] if n["node_id"] == lost)
        assert node["state"] == "missing" and node["lost"] and node["missing_ms"] >= timeout_ms
        producer.close()


def test_a_data_directory_of_another_cluster_is_refused_and_never_mixed_in(tmp_path):
    with simulated_cluster(str(tmp_path / "first"), workers=1, cluster_config=SIM_CONFIG) as sim:
        theirs = sim.cluster.admin().describe_cluster()["cluster_id"]
        their_worker = sim.worker_dirs()[0]
    with simulated_cluster(str(tmp_path / "second"), workers=1, cluster_config=SIM_CONFIG) as sim:
        ours = sim.cluster.admin().describe_cluster()["cluster_id"]
        assert ours != theirs
        intruder = sim.add(their_worker)
        wait_for(lambda: any(f.get("ray_node") == intruder for f in logged("node_refused")), timeout_s=120)
        reason = next(f["reason"] for f in logged("node_refused") if f.get("ray_node") == intruder)
        assert "InconsistentClusterIdError" in reason and theirs in reason and ours in reason
        assert intruder not in {n["ray_node_id"] for n in sim.cluster.admin().describe_cluster()["nodes"]}
        assert (Path(their_worker) / "meta.properties").read_text().count(theirs) == 1, "its identity is untouched"
    with pytest.raises(ControllerNotAvailableError, match="holds no controller metadata"):
        raylog.connect("local", data_root=their_worker, num_cpus=1)
    ray.shutdown()
