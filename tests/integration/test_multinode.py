"""Placement on a simulated 3-node cluster (ray.cluster_utils.Cluster): one data directory per node."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import raylog
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.cluster]


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    import ray
    from ray.cluster_utils import Cluster

    sim = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 150 * 1024 * 1024})
    for _ in range(2):
        sim.add_node(num_cpus=1, object_store_memory=150 * 1024 * 1024)
    sim.wait_for_nodes()
    root = tmp_path_factory.mktemp("multinode-data")
    cluster = raylog.connect(address=sim.address, data_root=str(root))
    yield cluster, root, [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    ray.shutdown()
    sim.shutdown()


def test_partitions_spread_over_the_worker_nodes_and_live_under_each_nodes_directory(three_nodes):
    """The head node holds replicas only when the other nodes are too few (its loss ends the cluster)."""
    import ray

    cluster, root, node_ids = three_nodes
    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
    workers = sorted(set(node_ids) - {head})
    desc = cluster.admin().create_topic("spread", 4)
    placed = [p.leader.node_id for p in desc.partitions]
    assert sorted(placed) == sorted(workers * 2), "four partitions on two workers: two each"
    producer = cluster.producer()
    for p in range(4):
        producer.send_batch("spread", [b"p%d-%d" % (p, i) for i in range(10)], partition=p).wait(timeout=60)
    infos = cluster.admin().describe_partitions("spread")
    for part, info in zip(desc.partitions, infos):
        assert info["node_id"] == part.leader.node_id
        node_dir = Path(root) / f"node-{part.leader.node_id[:16]}"
        assert Path(info["directory"]).parent.parent == node_dir
        assert any(f.suffix == ".log" for f in Path(info["directory"]).iterdir())
        assert info["log_end_offset"] == 10
    producer.close()


def test_killed_replica_comes_back_on_its_node_without_losing_acknowledged_records(three_nodes):
    cluster, _, _ = three_nodes
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
    assert after["node_id"] == victim["node_id"] == desc.partitions[1].leader.node_id
    consumer = cluster.consumer("survive", auto_offset_reset="earliest")
    seen = {p: [] for p in range(3)}
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < 80 and time.monotonic() < deadline:
        for chunk in consumer.poll_batch(timeout_ms=500):
            seen[chunk.partition] += chunk.offsets.tolist()
    for p in range(3):
        assert seen[p] == sorted(acked[p]) == list(range(len(acked[p])))
    producer.close()
