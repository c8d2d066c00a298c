"""Killing replica and controller processes under an acks='all' workload (issue 13).

Fault model: SIGKILL of a process, no clean shutdown: the partition leader's
replica process (Ray restarts it on its node; it recovers its log, truncates
by leader epoch and rejoins as a follower), and the controller in the middle
of the elections that follow (Ray restarts it; it replays its metadata log,
finds the replicas and tells each the current state again).

What must survive: every record acknowledged with acks='all' is in the log
exactly once at its acknowledged offset, in per-key order, and nothing a
consumer read disappears (tests/support/history.py).
"""

from __future__ import annotations

import os
import signal

import pytest
import ray

from raylog.naming import CONTROLLER_ACTOR_NAME
from tests.integration.conftest import wait_for
from tests.support.cluster import simulated_cluster
from tests.support.workload import Workload, read_everything

pytestmark = [pytest.mark.ray, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with simulated_cluster(str(tmp_path_factory.mktemp("kills")), workers=3,
                           cluster_config={"replica_lag_time_max_ms": 4000,
                                           "leader_imbalance_check_interval_ms": 2000}) as sim:
        yield sim


def leader_info(cluster, topic: str, partition: int) -> dict:
    return cluster.admin().describe_partitions(topic)[partition]


def check(workload: Workload, cluster, topic: str) -> None:
    final = read_everything(cluster, topic)
    anomalies = workload.history.check(final)
    assert anomalies == {}, {k: v[:5] for k, v in anomalies.items()}
    assert not workload.history.failed, list(workload.history.failed.items())[:3]


def test_acks_all_records_survive_the_leader_process_being_killed(sim):
    cluster = sim.cluster
    topic = "leader-kills"
    cluster.admin().create_topic(topic, 2, replication_factor=3, min_insync_replicas=2)
    workload = Workload(cluster, topic, request_timeout_ms=10_000)
    try:
        wait_for(lambda: workload.acked() > 300, timeout_s=120)
        for round_ in range(4):
            partition = round_ % 2
            victim = leader_info(cluster, topic, partition)
            os.kill(victim["pid"], signal.SIGKILL)
            before = workload.acked()
            wait_for(lambda: workload.acked() > before + 300, timeout_s=120, interval_s=0.5)
            wait_for(lambda: leader_info(cluster, topic, partition).get("leader_epoch", -1) > victim["leader_epoch"],
                     timeout_s=120, interval_s=0.5)
            wait_for(lambda: len(leader_info(cluster, topic, partition)["isr"]) == 3, timeout_s=120, interval_s=0.5)
        # auto_leader_rebalance_enable: once back in sync, each preferred replica leads again.
        wait_for(lambda: all(leader_info(cluster, topic, p)["leader"] == 0 for p in (0, 1)), timeout_s=120)
    finally:
        workload.stop()
    check(workload, cluster, topic)


def test_acks_all_records_survive_the_controller_being_killed_mid_election(sim):
    cluster = sim.cluster
    topic = "controller-kills"
    cluster.admin().create_topic(topic, 2, replication_factor=3, min_insync_replicas=2)
    workload = Workload(cluster, topic, request_timeout_ms=10_000)
    controller = ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog")
    try:
        wait_for(lambda: workload.acked() > 300, timeout_s=120)
        for partition in (0, 1):
            victim = leader_info(cluster, topic, partition)
            controller_pid = ray.get(controller.ping.remote())
            os.kill(victim["pid"], signal.SIGKILL)
            os.kill(controller_pid, signal.SIGKILL)  # while it learns of the death and elects
            wait_for(lambda: ray.get(controller.ping.remote(), timeout=5) != controller_pid, timeout_s=120)
            before = workload.acked()
            wait_for(lambda: workload.acked() > before + 300, timeout_s=120, interval_s=0.5)
            wait_for(lambda: len(leader_info(cluster, topic, partition)["isr"]) == 3, timeout_s=120, interval_s=0.5)
        assert cluster.admin().list_topics().count(topic) == 1, "the restarted controller kept its metadata"
    finally:
        workload.stop()
    check(workload, cluster, topic)


def test_consumers_read_locally_only_what_is_led_on_their_node_and_fetch_the_rest(sim):
    """Reads from a leader's files (issue 22) happen on the leader's node only: partitions led on
    other simulated nodes are fetched by call, and the records are the same either way."""
    import ray

    from raylog import TopicPartition
    from raylog.consumer.local_leader import open_local_reader

    cluster = sim.cluster
    topic = "where-read"
    cluster.admin().create_topic(topic, 8)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(4000)]).get(60)
    producer.close()
    here = ray.get_runtime_context().get_node_id()
    leaders = {st["partition"]: st["replicas"][0]["ray_node_id"] for st in cluster.admin().describe_partitions(topic)}
    assert set(leaders.values()) - {here}, "every partition is led on the driver's node: nothing to fall back from"
    for p, node in leaders.items():
        reader, _ = open_local_reader(cluster.metadata, topic, p)
        assert (reader is not None) == (node == here), (p, node, here)
        if reader is not None:
            reader.close()

    def read(local: bool):
        consumer = cluster.consumer(auto_offset_reset="earliest", local_reads=local)
        consumer.assign([TopicPartition(topic, p) for p in range(8)])
        values = []
        while len(values) < 4000:
            for batch in consumer.poll_batch(timeout_ms=2000):
                values += [(batch.partition, o, v) for o, v in zip(batch.offsets.tolist(), batch.value_list())]
        metrics = consumer.metrics()["consumer-fetch-manager-metrics"]
        consumer.close()
        return sorted(values), metrics

    local, local_metrics = read(True)
    remote, _ = read(False)
    assert local == remote
    assert local_metrics["bytes-fetched-remotely-total"] > 0
    assert (local_metrics["bytes-read-locally-total"] > 0) == (here in leaders.values())


def test_an_in_sync_follower_on_the_readers_node_serves_committed_records_from_its_files(sim):
    """Where the driver's node holds no leader but an in-sync follower, a consumer reads that
    follower's files (issue 22): the records equal the leader's fetch, through a SIGKILL of the
    follower (readers fall back to the leader while it is gone, and come back to it)."""
    import ray

    from raylog import TopicPartition
    from raylog.consumer.local_leader import LocalLeader
    from raylog.storage.read_view import ROLE_FOLLOWER, ROLE_LEADER

    cluster = sim.cluster
    topic = "follower-read"
    cluster.admin().create_topic(topic, 6, replication_factor=3)
    producer = cluster.producer(acks="all")
    producer.send_batch(topic, [b"%d" % i for i in range(3000)], partition=[i % 6 for i in range(3000)]).get(60)
    here = ray.get_runtime_context().get_node_id()
    # Partition 0 gets a follower on the driver's node whatever placement chose.
    others = [n for n in sim.node_ids() if n != here][:2]
    cluster.admin().alter_partition_reassignments(
        {TopicPartition(topic, 0): [sim.raylog_node(n) for n in (others[0], here, others[1])]})

    def reassigned():
        st = cluster.admin().describe_partitions(topic)[0]
        return sorted(r["ray_node_id"] for r in st["replicas"]) == sorted([here, *others]) and len(st["isr"]) == 3
    wait_for(reassigned, timeout_s=120, interval_s=0.5)
    # Every ISR full before the roles are read from it: a follower here starved out of it at that
    # moment would be taken for one that cannot be read.
    wait_for(lambda: all(len(st["isr"]) == 3 for st in cluster.admin().describe_partitions(topic)), timeout_s=120)
    parts = cluster.admin().describe_partitions(topic)
    roles = {}
    for st in parts:
        nodes = {r["replica_id"]: r["ray_node_id"] for r in st["replicas"]}
        if nodes[st["leader"]] == here:
            roles[st["partition"]] = ROLE_LEADER
        elif any(node == here and rid in st["isr"] for rid, node in nodes.items()):
            roles[st["partition"]] = ROLE_FOLLOWER
    followed = [p for p, role in roles.items() if role == ROLE_FOLLOWER]
    assert 0 in followed, roles

    def wait_for_reader(p: int, role: int | None):
        def opened():
            local = LocalLeader(cluster.metadata, topic, p)
            try:
                if local.current() is None:
                    return role is None
                return local.reader.role == role and local.read(0, 1) is not None
            finally:
                local.close()
        wait_for(opened, timeout_s=120, describe=lambda: f"partition {p} read from role {role} here")

    for p in range(6):
        wait_for_reader(p, roles.get(p))

    def read(local: bool, expected: int, partitions=range(6)):
        consumer = cluster.consumer(auto_offset_reset="earliest", local_reads=local)
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        values = []
        while len(values) < expected:
            for batch in consumer.poll_batch(timeout_ms=2000):
                values += [(batch.partition, o, v) for o, v in zip(batch.offsets.tolist(), batch.value_list())]
        metrics = consumer.metrics()["consumer-fetch-manager-metrics"]
        consumer.close()
        return sorted(values), metrics

    local, _ = read(True, 3000)
    assert local == read(False, 3000)[0]
    # The follower's files, not only partitions led here, served the reads. A follower starved
    # past the lag time leaves the ISR, and its page then rightly sends readers to the leader (a
    # CI run read all 500 records remotely so): each try starts once the page says "follower".
    for p in followed:
        def served_by_the_follower() -> bool:
            wait_for_reader(p, ROLE_FOLLOWER)
            _, metrics = read(True, 500, [p])
            return metrics["bytes-read-locally-total"] > 0 and metrics["bytes-fetched-remotely-total"] == 0
        wait_for(served_by_the_follower, timeout_s=180,
                 describe=lambda: f"partition {p} read from its follower's files")

    # SIGKILL the follower on this node: its page's writer is gone, so readers fetch from the
    # leader; Ray restarts it, it rejoins the ISR, and its files are read again.
    p = followed[0]
    replica_id = next(r["replica_id"] for r in parts[p]["replicas"] if r["ray_node_id"] == here)
    pid = next(r["pid"] for r in cluster.admin().describe_replicas(topic, p) if r["replica_id"] == replica_id)
    os.kill(pid, signal.SIGKILL)
    producer.send_batch(topic, [b"after-%d" % i for i in range(600)], partition=p).get(60)
    producer.close()
    during, _ = read(True, 3600)
    assert during == read(False, 3600)[0]
    wait_for_reader(p, ROLE_FOLLOWER)
    after, _ = read(True, 3600)
    assert after == during


def test_a_partition_fetched_from_another_node_is_delivered_while_a_local_one_always_has_records(sim):
    """A consumer reading one partition from its leader's files here and fetching another from a
    leader on another node. The fetched records must come while the local partition still has a
    backlog. They did not (issue 31's chaos run, pause-busy-leader): a fetch's answer was taken up
    only when a poll found nothing to return, and the local reads always had something, so the
    fetched partition was stuck for as long as the local one had records. The chaos run met it
    when a paused leader's partition moved to another node and the member's other partitions,
    led on its node, kept being written."""
    import ray

    from raylog import TopicPartition

    cluster = sim.cluster
    topic = "local-and-fetched"
    cluster.admin().create_topic(topic, 2)
    here = ray.get_runtime_context().get_node_id()
    elsewhere = next(n for n in sim.node_ids() if n != here)
    local_tp, fetched_tp = TopicPartition(topic, 0), TopicPartition(topic, 1)
    cluster.admin().alter_partition_reassignments({local_tp: [sim.raylog_node(here)],
                                                   fetched_tp: [sim.raylog_node(elsewhere)]})
    wait_for(lambda: [st["ray_node_id"] for st in cluster.admin().describe_partitions(topic)] == [here, elsewhere],
             timeout_s=120, interval_s=0.5)
    backlog = 200_000
    producer = cluster.producer(linger_ms=0, compression_type="none")
    for start in range(0, backlog, 20_000):
        producer.send_batch(topic, [b"%d" % i for i in range(start, start + 20_000)], partition=0)
    producer.send_batch(topic, [b"fetched %d" % i for i in range(10)], partition=1)
    producer.flush(timeout=60)
    producer.close()

    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([local_tp, fetched_tp])
    local_read, fetched = 0, []
    try:
        # One record a poll: the local backlog outlasts any fetch's round trip by far.
        while len(fetched) < 10 and local_read < backlog:
            for chunk in consumer.poll_batch(timeout_ms=1000, max_records=1):
                if chunk.partition == 0:
                    local_read += len(chunk)
                else:
                    fetched += chunk.value_list()
        metrics = consumer.metrics()["consumer-fetch-manager-metrics"]
    finally:
        consumer.close()
    assert fetched == [b"fetched %d" % i for i in range(10)] and local_read < backlog, \
        f"the fetched partition's records came only after all {local_read} of the local partition's: {fetched}"
    assert metrics["bytes-read-locally-total"] > 0 and metrics["bytes-fetched-remotely-total"] > 0, metrics
