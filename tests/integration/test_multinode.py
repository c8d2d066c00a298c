"""Placement on a simulated 3-node cluster (ray.cluster_utils.Cluster): one data directory per node."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.conftest import wait_for
from tests.support.cluster import simulated_cluster
from tests.support.event_log import logged

pytestmark = [pytest.mark.ray, pytest.mark.cluster]


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("multinode-data")
    with simulated_cluster(str(root), workers=2) as sim:
        yield sim


def test_partitions_spread_over_the_worker_nodes_and_live_under_each_nodes_directory(three_nodes):
    """The head node holds replicas only when the other nodes are too few (its loss ends the cluster)."""
    sim = three_nodes
    cluster = sim.cluster
    workers = sorted(sim.raylog_node(n) for n in sim.node_ids() if n != sim.head_id())
    desc = cluster.admin().create_topic("spread", 4)
    placed = [p.leader.node_id for p in desc.partitions]
    assert sorted(placed) == sorted(workers * 2), "four partitions on two workers: two each"
    producer = cluster.producer()
    for p in range(4):
        producer.send_batch("spread", [b"p%d-%d" % (p, i) for i in range(10)], partition=p).wait(timeout=60)
    infos = cluster.admin().describe_partitions("spread")
    for part, info in zip(desc.partitions, infos):
        assert info["ray_node_id"] == part.leader.ray_node_id
        node_dir = Path(sim.data_dirs[part.leader.ray_node_id])
        assert Path(info["directory"]).parent.parent == node_dir
        assert any(f.suffix == ".log" for f in Path(info["directory"]).iterdir())
        assert info["log_end_offset"] == 10
    producer.close()


def test_nodes_sharing_one_data_directory_are_refused_with_the_holder_named(three_nodes):
    """Two Ray nodes configured with one data directory would claim one identity: the second is
    refused (never registered, never given replicas), and the error names the directory."""
    sim = three_nodes
    second = sim.add(sim.worker_dirs()[0])
    try:
        wait_for(lambda: node_refused(second), timeout_s=60)
        nodes = sim.cluster.admin().describe_cluster()["nodes"]
        assert second not in {n["ray_node_id"] for n in nodes} and len(nodes) == 3
        desc = sim.cluster.admin().create_topic("on-the-registered-nodes", 6)
        assert {p.leader.ray_node_id for p in desc.partitions} <= set(sim.node_ids()) - {second}
    finally:
        sim.remove(second)


def node_refused(ray_node_id: str) -> bool:
    return any(ray_node_id == f.get("ray_node") and "DataDirectoryInUseError" in f.get("reason", "")
               for f in logged("node_refused"))


def test_killed_replica_comes_back_on_its_node_without_losing_acknowledged_records(three_nodes):
    cluster = three_nodes.cluster
    desc = cluster.admin().create_topic("survive", 3)
    producer = cluster.producer(linger_ms=0)
    acked = {p: [] for p in range(3)}
    for p in range(3):
        acked[p] += producer.send_batch("survive", [b"a%d" % i for i in range(20)], partition=p).offsets(60).tolist()
    victim = cluster.admin().describe_partitions("survive")[1]
    os.kill(victim["pid"], signal.SIGKILL)
    acked[1] += producer.send_batch("survive", [b"b%d" % i for i in range(20)], partition=1).offsets(60).tolist()
    after = wait_for(lambda: cluster.admin().describe_partitions("survive")[1], timeout_s=60)
    assert after["pid"] != victim["pid"]
    assert after["ray_node_id"] == victim["ray_node_id"] == desc.partitions[1].leader.ray_node_id
    consumer = cluster.consumer("survive", auto_offset_reset="earliest")
    seen = {p: [] for p in range(3)}
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < 80 and time.monotonic() < deadline:
        for chunk in consumer.poll_batch(timeout_ms=500):
            seen[chunk.partition] += chunk.offsets.tolist()
    for p in range(3):
        assert seen[p] == sorted(acked[p]) == list(range(len(acked[p])))
    producer.close()
