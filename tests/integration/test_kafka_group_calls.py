"""The Kafka listener's calls to raylog's group coordinator that a client stops waiting for.

The listener answers COORDINATOR_NOT_AVAILABLE after offsets_commit_timeout_ms (Kafka's
offsets.commit.timeout.ms), but the call still runs at the coordinator. Its own cluster: a
short wait, one coordinator, and replica sessions long enough that the paused coordinator is
never restarted meanwhile.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import uuid

import pytest
import ray

import raylog
from raylog import TopicPartition
from raylog.consumer.group_member import coordinator_for
from raylog.errors import GroupIdNotFoundError
from tests.integration.conftest import wait_for
from tests.support.kafka_wire import call
from tests.support.processes import pause

COORDINATOR_NOT_AVAILABLE = 15
INVALID_REQUEST = 42
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110
STALE_MEMBER_EPOCH = 113


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = raylog.connect(data_root=str(tmp_path_factory.mktemp("group-calls")), num_cpus=2,
                       object_store_memory=300 * 1024 * 1024,
                       cluster_config={"offsets_topic_num_partitions": 1, "offsets_commit_timeout_ms": 3000,
                                       "replica_session_timeout_ms": 120_000})
    yield c
    ray.shutdown()


def join(sock: socket.socket, group: str, topic: str):
    """A KIP-848 ConsumerGroupHeartbeat v0 join (no member id: the broker names the member), as a
    client's bytes; returns the answer."""
    from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
    from kio.schema.consumer_group_heartbeat.v0.response import ConsumerGroupHeartbeatResponse

    return call(sock, ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,), server_assignor=None,
        topic_partitions=()), ConsumerGroupHeartbeatResponse)


def test_a_join_answered_too_late_for_its_client_leaves_the_member_it_made(cluster):
    """The coordinator is paused while a KIP-848 member joins through the listener: the client is
    told COORDINATOR_NOT_AVAILABLE (and would join again under a new member id), then the
    coordinator wakes and carries out the join. The member it made, whose id no client knows,
    must leave at once, not hold its partitions for the 45 s session timeout."""
    topic, group = f"late-join-{uuid.uuid4().hex[:6]}", f"late-join-{uuid.uuid4().hex[:6]}"
    cluster.admin().create_topic(topic, 2)
    pid = ray.get(coordinator_for(cluster, group, 60).ping.remote(), timeout=60)
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        # Another group's join first, until it succeeds: the listener has then found
        # __consumer_offsets, and the paused coordinator is the only thing the late join waits on.
        wait_for(lambda: join(sock, f"warm-{group}", topic).error_code.value == 0, timeout_s=120, interval_s=0.5)
        pause(pid)
        try:
            answer = join(sock, group, topic)
        finally:
            os.kill(pid, signal.SIGCONT)
    assert answer.error_code.value == COORDINATOR_NOT_AVAILABLE, answer

    def described() -> dict | None:
        try:
            return cluster.admin().describe_consumer_groups([group])[0]
        except GroupIdNotFoundError:
            return None  # the late join not carried out yet

    # The join makes the group (epoch 1, one member); only a leave empties it before the member's
    # 45 s session ends.
    wait_for(lambda: (d := described()) is not None and d["group_epoch"] >= 2 and not d["members"],
             timeout_s=30, describe=described)


def test_offset_fetch_answers_each_group_of_a_batch_and_checks_the_epoch_of_a_kip848_member_asking(cluster):
    """OffsetFetch v8 asks for several groups at once and gets an answer (and error code) for each,
    up to 1,000 groups (the rest are refused, not waited on); v9 names the member asking, which a
    KIP-848 group checks as Kafka's does: a member at its current epoch reads, a stale or future
    epoch or an unknown member is refused, and a request naming no member (an admin's) always
    reads."""
    from kio.schema.offset_fetch.v8 import request as v8, response as v8_answer
    from kio.schema.offset_fetch.v9 import request as v9, response as v9_answer

    topic = f"fetch-groups-{uuid.uuid4().hex[:6]}"
    committed, empty, joined = (f"{kind}-{uuid.uuid4().hex[:6]}" for kind in ("committed", "empty", "joined"))
    admin = cluster.admin()
    admin.create_topic(topic, 2)
    admin.alter_group_offsets(committed, {TopicPartition(topic, 0): 7, TopicPartition(topic, 1): 3})
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        unknown = [f"unknown-{n}-{empty}" for n in range(999)]
        answer = call(sock, v8.OffsetFetchRequest(groups=(
            v8.OffsetFetchRequestGroup(group_id=committed, topics=None),
            v8.OffsetFetchRequestGroup(group_id=empty, topics=(
                v8.OffsetFetchRequestTopics(name=topic, partition_indexes=(1,)),)),
            *(v8.OffsetFetchRequestGroup(group_id=g, topics=None) for g in unknown),
        )), v8_answer.OffsetFetchResponse)
        assert [g.group_id for g in answer.groups] == [committed, empty, *unknown]
        by_group = {g.group_id: g for g in answer.groups}
        assert {g.error_code.value for g in answer.groups[:1000]} == {0}
        assert [(g.error_code.value, g.topics) for g in answer.groups[1000:]] == [(INVALID_REQUEST, ())]
        assert all(g.topics == () for g in answer.groups[2:1000])  # nothing committed, nothing named
        assert {(t.name, p.partition_index, p.committed_offset) for t in by_group[committed].topics
                for p in t.partitions} == {(topic, 0, 7), (topic, 1, 3)}
        assert [(t.name, p.partition_index, p.committed_offset) for t in by_group[empty].topics
                for p in t.partitions] == [(topic, 1, -1)]

        member = wait_for(lambda: (a := join(sock, joined, topic)).error_code.value == 0 and a,
                          timeout_s=120, interval_s=0.5)

        def fetch(member_id: str | None, epoch: int):
            answer = call(sock, v9.OffsetFetchRequest(groups=(v9.OffsetFetchRequestGroup(
                group_id=joined, member_id=member_id, member_epoch=epoch, topics=(
                    v9.OffsetFetchRequestTopics(name=topic, partition_indexes=(0, 1)),)),)),
                v9_answer.OffsetFetchResponse)
            (group,) = answer.groups
            return group.error_code.value, [(p.partition_index, p.committed_offset, p.error_code.value)
                                            for t in group.topics for p in t.partitions]

        nothing_committed = [(0, -1, 0), (1, -1, 0)]
        assert fetch(member.member_id, member.member_epoch) == (0, nothing_committed)
        assert fetch(None, -1) == (0, nothing_committed)
        assert fetch(member.member_id, member.member_epoch - 1) == (STALE_MEMBER_EPOCH, [])
        assert fetch(member.member_id, member.member_epoch + 1) == (FENCED_MEMBER_EPOCH, [])
        assert fetch("no-such-member", member.member_epoch) == (UNKNOWN_MEMBER_ID, [])
