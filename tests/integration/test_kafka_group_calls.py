"""The Kafka listener's calls to raylog's group coordinator that a client stops waiting for.

The listener answers COORDINATOR_NOT_AVAILABLE after offsets_commit_timeout_ms (Kafka's
offsets.commit.timeout.ms), but the call still runs at the coordinator. Its own cluster: a
short wait, one coordinator, and replica sessions long enough that the paused coordinator is
never restarted meanwhile.
"""

from __future__ import annotations

import datetime
import io
import os
import signal
import socket
import struct
import uuid

import pytest
import ray

import raylog
from raylog.consumer.group_member import coordinator_for
from raylog.errors import GroupIdNotFoundError
from tests.integration.conftest import wait_for
from tests.support.kafka_wire import recv_exactly

COORDINATOR_NOT_AVAILABLE = 15


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
    from kio.serial import entity_reader, entity_writer

    body = io.BytesIO()
    entity_writer(ConsumerGroupHeartbeatRequest)(body, ConsumerGroupHeartbeatRequest(
        group_id=group, member_id="", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,), server_assignor=None,
        topic_partitions=()))
    # Request header v2: api key 68, version 0, correlation id, client id, no tagged fields.
    payload = struct.pack(">hhih", 68, 0, 7, 4) + b"test" + b"\x00" + body.getvalue()
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    answer = recv_exactly(sock, size)
    assert struct.unpack_from(">i", answer)[0] == 7
    response, _ = entity_reader(ConsumerGroupHeartbeatResponse)(answer, 5)  # header v1: + tagged fields
    return response


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
        os.kill(pid, signal.SIGSTOP)
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
