"""Replication on a simulated cluster (head + 3 workers): ISR, acks, epochs, admin (issue 13).

Followers are paused with SIGSTOP (a process that stops answering without dying,
like a stalled disk or a GC pause) and resumed with SIGCONT.
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from pathlib import Path

import pytest
import ray

from raylog.errors import (
    InvalidConfigError, InvalidReplicationFactorError, NotEnoughReplicasError,
)
from raylog.records import TopicPartition
from tests.integration.conftest import wait_for
from tests.support.cluster import simulated_cluster
from tests.support.processes import pause
from tests.support.topics import consume_all

pytestmark = [pytest.mark.ray, pytest.mark.cluster]

LAG_MS = 3000
"""replica_lag_time_max_ms, short so that a stopped follower leaves the ISR soon. A new topic's
replicas all start in its ISR, but a follower whose fetches stall for LAG_MS (a loaded 2-core
machine running three simulated nodes does that) is out until it fetches again: a test that needs
the whole ISR waits for it (a loaded fresh-clone run saw "isr 0,2" right after a creation)."""


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    root = tmp_path_factory.mktemp("replication")
    with simulated_cluster(str(root), workers=3, cluster_config={
            "replica_lag_time_max_ms": LAG_MS, "auto_leader_rebalance_enable": False,
            "request_timeout_ms": 8000}) as sim:
        sim.root = root
        yield sim


def new_topic(sim, partitions=1, rf=3, **configs) -> str:
    name = f"r-{uuid.uuid4().hex[:8]}"
    sim.cluster.admin().create_topic(name, partitions, replication_factor=rf, **configs)
    return name


def replicas(sim, topic: str, partition: int = 0) -> dict[int, dict]:
    return {r["replica_id"]: r for r in sim.cluster.admin().describe_replicas(topic, partition)}


def isr(sim, topic: str, partition: int = 0) -> list[int]:
    return sim.cluster.admin().describe_partitions(topic)[partition]["isr"]


def log_ends(sim, topic: str) -> set[int]:
    """The distinct log end offsets of partition 0's replicas (one when they agree)."""
    return {r["log_end_offset"] for r in replicas(sim, topic).values()}


def followers(sim, topic: str) -> list[dict]:
    return [r for r in replicas(sim, topic).values() if r.get("role") == "follower"]


def test_replicas_live_on_distinct_worker_nodes_and_leaders_spread(sim):
    topic = new_topic(sim, partitions=6, rf=3)
    # A follower starved past the lag time on a loaded machine is out of the ISR until it catches up.
    def in_sync():
        desc = sim.cluster.admin().describe_topics([topic])[0]
        return desc if all(p.isr == (0, 1, 2) for p in desc.partitions) else None

    desc = wait_for(in_sync, timeout_s=120)
    head = sim.raylog_node(sim.head_id())
    leaders = [p.leader.node_id for p in desc.partitions]
    for p in desc.partitions:
        nodes = [r.node_id for r in p.replicas]
        assert len(set(nodes)) == 3 and head not in nodes
    assert sorted(leaders.count(n) for n in set(leaders)) == [2, 2, 2]
    for p in desc.partitions:
        for r in p.replicas:
            assert Path(r.directory).parent.parent == Path(sim.data_dirs[r.ray_node_id])


def test_the_controller_runs_on_rays_head_node(sim):
    described = sim.cluster.admin().describe_cluster()
    assert described["controller"]["ray_node_id"] == sim.head_id()
    assert described["controller"]["node_id"] == described["head_node"] == sim.raylog_node(sim.head_id())
    assert sorted(n["ray_node_id"] for n in described["nodes"]) == sorted(sim.node_ids())
    # A node whose replicas were fenced for a stall under load is "registered" until they heartbeat.
    wait_for(lambda: all(n["state"] == "alive" for n in sim.cluster.admin().describe_cluster()["nodes"]),
             timeout_s=120, describe=lambda: sim.cluster.admin().describe_cluster()["nodes"])


def test_every_in_sync_replica_has_an_acks_all_record_before_it_is_acknowledged(sim):
    topic = new_topic(sim, min_insync_replicas=2)
    producer = sim.cluster.producer(acks="all")
    offsets = producer.send_batch(topic, [b"%d" % i for i in range(500)]).offsets(timeout=60)
    assert offsets.tolist() == list(range(500))
    # Every replica in the ISR the ack was given under (a follower starved past the lag time on a
    # loaded machine leaves it, and is then rightly not waited for; min_insync_replicas still holds).
    in_sync = isr(sim, topic)
    ends = {rid: r["log_end_offset"] for rid, r in replicas(sim, topic).items()}
    assert len(in_sync) >= 2 and {rid: ends[rid] for rid in in_sync} == {rid: 500 for rid in in_sync}, (in_sync, ends)
    producer.close()


@pytest.mark.parametrize("call,error,words", [
    (lambda a, t: a.create_topic(t, 1, 0), InvalidReplicationFactorError, "replication factor"),
    (lambda a, t: a.create_topic(t, 1, 5), InvalidReplicationFactorError, "5 live nodes, and 4 are alive"),
    (lambda a, t: a.create_topic(t, 1, 2, min_insync_replicas=3), InvalidConfigError, "min_insync_replicas 3"),
])
def test_bad_replication_settings_are_refused_before_anything_changes(sim, call, error, words):
    admin = sim.cluster.admin()
    before = admin.list_topics()
    name = f"bad-{uuid.uuid4().hex[:6]}"
    with pytest.raises(error, match=words):
        call(admin, name)
    assert admin.list_topics() == before


@pytest.mark.parametrize("acks", [2, "2", "leader", -2, None])
def test_acks_other_than_0_1_all_is_refused(sim, acks):
    with pytest.raises(InvalidConfigError, match="acks"):
        sim.cluster.producer(acks=acks)


def test_a_stopped_follower_leaves_the_isr_and_acks_all_keeps_working_until_too_few_remain(sim):
    topic = new_topic(sim, min_insync_replicas=2)
    # The sends that must succeed retry NotEnoughReplicas (a running follower starved past LAG_MS
    # is out for a moment); only the send that must fail gives up after one retry.
    patient = sim.cluster.producer(acks="all")
    strict = sim.cluster.producer(acks="all", retries=1, retry_backoff_ms=50, request_timeout_ms=5000)
    patient.send(topic, b"warm").get(timeout=60)
    paused = [r["pid"] for r in followers(sim, topic)]
    assert len(paused) == 2
    pause(paused[0])
    try:
        wait_for(lambda: len(isr(sim, topic)) == 2, timeout_s=LAG_MS / 1000 + 20)
        assert patient.send(topic, b"two in sync").get(timeout=150).offset == 1
        pause(paused[1])
        wait_for(lambda: len(isr(sim, topic)) == 1, timeout_s=LAG_MS / 1000 + 20)
        with pytest.raises(NotEnoughReplicasError):
            strict.send(topic, b"one in sync").get(timeout=30)
        loose = sim.cluster.producer(acks=1)
        assert loose.send(topic, b"acks=1 still works").get(timeout=30).offset >= 2
        loose.close()
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: len(isr(sim, topic)) == 3, timeout_s=120)
    assert patient.send(topic, b"back in sync").get(timeout=150).offset >= 3
    # A follower out of the ISR again when the ack came is not waited for: it catches up after.
    wait_for(lambda: len(log_ends(sim, topic)) == 1, timeout_s=120,
             describe=lambda: replicas(sim, topic))  # the resumed followers caught up
    strict.close()
    patient.close()


def test_an_old_leader_with_unreplicated_batches_drops_exactly_those_when_it_returns(sim):
    """KIP-101's divergence, end to end: records the old leader took with acks=1 while its followers
    were stopped never reached them; a follower is elected, the old leader comes back as a follower,
    truncates to where its epoch ended on the new leader, and copies what the new leader wrote."""
    topic = new_topic(sim, min_insync_replicas=1)
    producer = sim.cluster.producer(acks=1, linger_ms=0)
    committed = [producer.send(topic, b"committed-%d" % i).get(timeout=30).offset for i in range(5)]
    wait_for(lambda: len(log_ends(sim, topic)) == 1, timeout_s=120)
    old = next(r for r in replicas(sim, topic).values() if r["role"] == "leader")
    handle = ray.get(sim.cluster.controller.replica_handles.remote(topic, 0))[old["replica_id"]]

    def open_fetches() -> int:  # asked of the leader alone: paused followers answer nothing
        return ray.get(handle.attach.remote(), timeout=60)["replication"]["follower_fetches_open"]

    wait_for(lambda: open_fetches() >= 1, timeout_s=120)  # idle followers' fetches park at the leader
    paused = [r["pid"] for r in followers(sim, topic)]
    for pid in paused:
        pause(pid)
    # Their parked fetches answer empty (at replica_fetch_wait_max_ms), so nothing sent below is on
    # its way to them: a fetch still open when the records came would carry them.
    wait_for(lambda: open_fetches() == 0, timeout_s=120, describe=open_fetches)
    try:
        lost = [producer.send(topic, b"unreplicated-%d" % i).get(timeout=30).offset for i in range(3)]
        assert lost == [5, 6, 7]
        os.kill(old["pid"], signal.SIGKILL)
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
    producer.close()
    sim.cluster.metadata.invalidate(topic)
    writer = sim.cluster.producer(acks="all")
    after = [writer.send(topic, b"new-leader-%d" % i).get(timeout=60).offset for i in range(3)]
    assert after == [5, 6, 7], "the new leader's epoch starts where the followers' logs ended"
    wait_for(lambda: replicas(sim, topic)[old["replica_id"]].get("log_end_offset") == 8
             and replicas(sim, topic)[old["replica_id"]].get("role") == "follower", timeout_s=120)
    wait_for(lambda: len(isr(sim, topic)) == 3, timeout_s=120)
    consumer = sim.cluster.consumer(topic, auto_offset_reset="earliest")
    values = [r.value for r in consume_all(consumer, 8)]
    assert values == [b"committed-%d" % i for i in range(5)] + [b"new-leader-%d" % i for i in range(3)]
    assert committed == [0, 1, 2, 3, 4]
    writer.close()


def test_describe_shows_leader_replicas_isr_and_under_replicated_partitions(sim):
    topic = new_topic(sim)

    def in_sync():
        (info,) = sim.cluster.admin().describe_partitions(topic)
        return info if info["isr"] == [0, 1, 2] else None

    info = wait_for(in_sync, timeout_s=120)  # a follower can be out for a moment: see LAG_MS
    assert info["leader"] == 0 and not info["under_replicated"]
    assert not info["offline"] and [r["replica_id"] for r in info["replicas"]] == [0, 1, 2]
    assert all(r["alive"] for r in info["replicas"])
    pid = followers(sim, topic)[0]["pid"]
    pause(pid)
    try:
        wait_for(lambda: sim.cluster.admin().describe_partitions(topic)[0]["under_replicated"],
                 timeout_s=LAG_MS / 1000 + 20)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: not sim.cluster.admin().describe_partitions(topic)[0]["under_replicated"], timeout_s=120)


def test_preferred_leader_election_moves_leadership_back_to_the_first_replica(sim):
    topic = new_topic(sim)
    producer = sim.cluster.producer(acks="all")
    producer.send(topic, b"before").get(timeout=30)
    leader = replicas(sim, topic)[0]
    os.kill(leader["pid"], signal.SIGKILL)
    wait_for(lambda: sim.cluster.admin().describe_partitions(topic)[0]["leader"] not in (0, -1), timeout_s=120)
    wait_for(lambda: isr(sim, topic) == [0, 1, 2], timeout_s=120)
    assert sim.cluster.admin().describe_partitions(topic)[0]["leader"] != 0, "automatic rebalance is off here"

    def elected() -> bool:
        # Replica 0 must be in the ISR when the election runs; a loaded machine can drop it for a
        # moment (see LAG_MS), and then nothing moves: wait for it and elect again.
        if isr(sim, topic) != [0, 1, 2]:
            return False
        return sim.cluster.admin().elect_leaders([TopicPartition(topic, 0)]) == [TopicPartition(topic, 0)]

    wait_for(elected, timeout_s=120)
    info = sim.cluster.admin().describe_partitions(topic)[0]
    assert info["leader"] == 0 and info["leader_epoch"] == 2
    producer.send(topic, b"after").get(timeout=30)
    consumer = sim.cluster.consumer(topic, auto_offset_reset="earliest")
    assert [r.value for r in consume_all(consumer, 2)] == [b"before", b"after"]
    producer.close()


def test_a_partition_is_reassigned_to_other_nodes_after_the_new_replica_catches_up(sim):
    topic = new_topic(sim, rf=2)
    producer = sim.cluster.producer(acks="all")
    producer.send_batch(topic, [b"%d" % i for i in range(1000)]).wait(timeout=60)
    admin = sim.cluster.admin()
    part = admin.describe_topics([topic])[0].partitions[0]
    current = [r.node_id for r in part.replicas]
    spare = next(sim.raylog_node(n) for n in sim.node_ids() if sim.raylog_node(n) not in current and n != sim.head_id())
    old_dir = Path(part.replicas[1].directory)
    admin.alter_partition_reassignments({TopicPartition(topic, 0): [current[0], spare]})
    wait_for(lambda: [r["node_id"] for r in admin.describe_partitions(topic)[0]["replicas"]] == [current[0], spare]
             and len(admin.describe_partitions(topic)[0]["isr"]) == 2, timeout_s=120)
    wait_for(lambda: not old_dir.exists(), timeout_s=120)
    producer.send_batch(topic, [b"x"] * 10).wait(timeout=60)
    # Both replicas get there; one starved out of the ISR when the ack came catches up after it.
    wait_for(lambda: log_ends(sim, topic) == {1010}, timeout_s=120, describe=lambda: replicas(sim, topic))
    producer.close()


def test_a_topic_deleted_while_a_replica_was_stopped_is_not_reopened_by_a_new_topic_of_that_name(sim):
    topic = new_topic(sim)
    producer = sim.cluster.producer(acks="all")
    producer.send_batch(topic, [b"old-%d" % i for i in range(50)]).wait(timeout=60)
    paused = followers(sim, topic)[0]
    pause(paused["pid"])
    try:
        sim.cluster.admin().delete_topics([topic])
    finally:
        os.kill(paused["pid"], signal.SIGCONT)
    sim.cluster.admin().create_topic(topic, 1, replication_factor=3)
    producer.send_batch(topic, [b"new-%d" % i for i in range(5)]).wait(timeout=60)
    consumer = sim.cluster.consumer(topic, auto_offset_reset="earliest")
    assert [r.value for r in consume_all(consumer, 5, timeout_s=120)] == [b"new-%d" % i for i in range(5)]
    # Waited for: a follower starved out of the ISR when the ack came catches up after it (an old
    # log reopened would hold 55 and never come to 5).
    wait_for(lambda: log_ends(sim, topic) == {5}, timeout_s=120,
             describe=lambda: replicas(sim, topic))
    producer.close()


def test_the_cli_describes_partitions_and_elects_preferred_leaders(sim, capsys):
    from raylog import cli

    def said(*args) -> str:
        assert cli.main(list(args)) == 0
        return capsys.readouterr().out

    topic = new_topic(sim, partitions=2)

    def in_sync():
        out = said("topics", "describe", topic)
        return out if out.count("isr 0,1,2  ok") == 2 else None

    out = wait_for(in_sync, timeout_s=120)  # a follower can be out for a moment: see LAG_MS
    assert f"topic {topic}: 2 partitions" in out and "leader 0 (epoch 0)" in out
    wait_for(lambda: topic not in said("topics", "describe", "--under-replicated"), timeout_s=120)

    def preferred_leaders_lead() -> bool:
        # Nothing moves when every leader is its preferred replica already; a leader fenced under
        # load in the meantime is moved back by this same command once its replica is in sync.
        out = said("partitions", "elect-leaders", topic)
        assert re.fullmatch(r"preferred leader elected for \d+ partitions(: .*)?\n", out), out
        return [p["leader"] for p in sim.cluster.admin().describe_partitions(topic)] == [0, 0]

    wait_for(preferred_leaders_lead, timeout_s=120)


def test_with_no_in_sync_replica_alive_the_partition_stays_offline_unless_unclean_election_is_on(sim):
    """Runs last in this module: it loses a worker node (and adds a fresh one back)."""
    admin = sim.cluster.admin()
    safe = new_topic(sim, rf=2)
    unclean = new_topic(sim, rf=2, unclean_leader_election_enable=True)
    producer = sim.cluster.producer(acks=1, retries=2, retry_backoff_ms=50, delivery_timeout_ms=10_000,
                                    request_timeout_ms=3000)
    for topic in (safe, unclean):
        producer.send(topic, b"before").get(timeout=30)
    # Put both partitions on the same two nodes, led from the same one, so one node loss hits both alike.
    nodes = [r.node_id for r in admin.describe_topics([safe])[0].partitions[0].replicas]
    admin.alter_partition_reassignments({TopicPartition(unclean, 0): nodes})
    wait_for(lambda: [r["node_id"] for r in admin.describe_partitions(unclean)[0]["replicas"]] == nodes
             and len(isr(sim, unclean)) == 2, timeout_s=120)
    admin.elect_leaders([TopicPartition(unclean, 0)])
    wait_for(lambda: admin.describe_topics([unclean])[0].partitions[0].leader.node_id == nodes[0], timeout_s=120)
    paused = [r["pid"] for topic in (safe, unclean) for r in followers(sim, topic)]
    for pid in paused:
        pause(pid)
    try:
        wait_for(lambda: len(isr(sim, safe)) == 1 and len(isr(sim, unclean)) == 1, timeout_s=LAG_MS / 1000 + 20)
        sim.remove(sim.ray_node(nodes[0]))
        wait_for(lambda: admin.describe_partitions(safe)[0]["offline"], timeout_s=120,
                 describe=lambda: (nodes, sim.node_ids(), admin.describe_partitions(safe)))
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
    from raylog.errors import LeaderNotAvailableError

    with pytest.raises(LeaderNotAvailableError, match="no leader"):
        producer.send(safe, b"while offline").get(timeout=30)
    time.sleep(2)
    info = admin.describe_partitions(safe)[0]
    assert info["offline"] and info["leader"] == -1, "the out-of-sync follower is never elected silently"
    wait_for(lambda: not admin.describe_partitions(unclean)[0]["offline"], timeout_s=120)
    producer.close()
    after = sim.cluster.producer(acks=1)
    assert after.send(unclean, b"after unclean election").get(timeout=60).offset >= 0
    after.close()
    sim.add()
