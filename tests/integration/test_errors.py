"""Every public admin, producer and consumer call with a bad argument raises raylog's own error
class, with a plain message that names the bad value (no Ray wrapper, stack or colour codes), and
an actor's bug reaches the caller as ActorCallError naming the actor and the call."""

from __future__ import annotations

import re

import pytest

import raylog
from raylog import TopicPartition
from raylog.errors import (
    ActorCallError, ClusterNotAvailableError, IllegalStateError, InvalidConfigError, InvalidGroupIdError,
    InvalidOffsetError, InvalidPartitionError, InvalidRecordError, InvalidReplicationFactorError, InvalidTopicError,
    RaylogError, RecordTooLargeError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)
from tests.support.topics import fresh_topic

ANSI = re.compile(r"\x1b\[")


@pytest.fixture(scope="module")
def topic(cluster):
    return fresh_topic(cluster, 2)


@pytest.fixture(scope="module")
def admin(cluster):
    return cluster.admin()


@pytest.fixture(scope="module")
def producer(cluster):
    p = cluster.producer(max_block_ms=5_000)
    yield p
    p.close()


@pytest.fixture(scope="module")
def consumer(cluster, topic):
    c = cluster.consumer(topic)
    yield c
    c.close()


def expect(call, error: type, *named: str):
    """``call()`` raises exactly ``error`` whose message names each of ``named``, plainly."""
    with pytest.raises(RaylogError) as info:
        call()
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert not ANSI.search(message) and "Traceback" not in message and "ray::" not in message, message
    for value in named:
        assert value in message, f"{value!r} not in {message!r}"
    return info.value


ADMIN_CASES = [
    ("create_topic zero partitions", lambda a, t: a.create_topic("fine-name", 0), InvalidPartitionError, ["0"]),
    ("create_topic rf 3 on one node", lambda a, t: a.create_topic("fine-name", 1, 3), InvalidReplicationFactorError,
     ["3"]),
    ("create_topic rf 0", lambda a, t: a.create_topic("fine-name", 1, 0), InvalidReplicationFactorError, ["0"]),
    ("create_topic bad name", lambda a, t: a.create_topic("bad/name"), InvalidTopicError, ["bad/name"]),
    ("create_topic existing", lambda a, t: a.create_topic(t, 2), TopicAlreadyExistsError, ["{t}"]),
    ("create_topic bad config", lambda a, t: a.create_topic("fine-name", retention_ms="soon"), InvalidConfigError,
     ["retention_ms", "soon"]),
    ("create_topic unknown config", lambda a, t: a.create_topic("fine-name", colour="red"), InvalidConfigError,
     ["colour"]),
    ("delete_topics missing", lambda a, t: a.delete_topics(["no-such-topic"]), UnknownTopicOrPartitionError,
     ["no-such-topic"]),
    ("describe_topics missing", lambda a, t: a.describe_topics(["no-such-topic"]), UnknownTopicOrPartitionError,
     ["no-such-topic"]),
    ("create_partitions fewer", lambda a, t: a.create_partitions({t: 1}), InvalidPartitionError, ["1"]),
    ("create_partitions missing", lambda a, t: a.create_partitions({"no-such-topic": 4}),
     UnknownTopicOrPartitionError, ["no-such-topic"]),
    ("describe_partitions missing", lambda a, t: a.describe_partitions("no-such-topic"),
     UnknownTopicOrPartitionError, ["no-such-topic"]),
    ("describe_replicas bad partition", lambda a, t: a.describe_replicas(t, 7), InvalidPartitionError, ["7"]),
    ("elect_leaders bad partition", lambda a, t: a.elect_leaders([TopicPartition(t, 9)]), InvalidPartitionError,
     ["9"]),
    ("reassign to unknown node", lambda a, t: a.alter_partition_reassignments({TopicPartition(t, 0): [99]}),
     InvalidReplicationFactorError, ["99"]),
    ("reassign to a node that is not an id",
     lambda a, t: a.alter_partition_reassignments({TopicPartition(t, 0): ["nowhere"]}), InvalidConfigError,
     ["nowhere"]),
    ("list_offsets bad partition", lambda a, t: a.list_offsets({TopicPartition(t, 5): -1}), InvalidPartitionError,
     ["5"]),
    ("end_offsets missing topic", lambda a, t: a.end_offsets([TopicPartition("no-such-topic", 0)]),
     UnknownTopicOrPartitionError, ["no-such-topic"]),
    ("delete_records negative", lambda a, t: a.delete_records({TopicPartition(t, 0): -5}), InvalidOffsetError,
     ["-5"]),
    ("describe_consumer_groups empty id", lambda a, t: a.describe_consumer_groups([""]), InvalidGroupIdError,
     ["''"]),
    ("list_consumer_group_offsets bad id", lambda a, t: a.list_consumer_group_offsets(42), InvalidGroupIdError,
     ["42"]),
    ("reset offsets without a target", lambda a, t: a.reset_consumer_group_offsets("g-errors", [t]),
     InvalidConfigError, ["to"]),
]


@pytest.mark.parametrize("case", ADMIN_CASES, ids=[c[0] for c in ADMIN_CASES])
def test_admin_calls_with_bad_arguments_raise_raylog_errors_naming_the_value(admin, topic, case):
    _, call, error, named = case
    expect(lambda: call(admin, topic), error, *(n.format(t=topic) for n in named))


PRODUCER_CASES = [
    ("send to missing topic", lambda p, t: p.send("no-such-topic", b"v"), UnknownTopicOrPartitionError,
     ["no-such-topic"]),
    ("send to bad topic name", lambda p, t: p.send("bad topic", b"v"), InvalidTopicError, ["bad topic"]),
    ("send bad partition", lambda p, t: p.send(t, b"v", partition=5), InvalidPartitionError, ["5"]),
    ("send int value", lambda p, t: p.send(t, 12345), InvalidRecordError, ["int"]),
    ("send bad headers", lambda p, t: p.send(t, b"v", headers=[("h", 7)]), InvalidRecordError, ["7"]),
    ("send negative timestamp", lambda p, t: p.send(t, b"v", timestamp_ms=-3), InvalidRecordError, ["-3"]),
    ("send too large", lambda p, t: p.send(t, b"x" * (9 << 20)), RecordTooLargeError, ["max_request_size"]),
    ("send_batch empty", lambda p, t: p.send_batch(t, []), InvalidRecordError, ["at least one"]),
    ("send_batch keys mismatch", lambda p, t: p.send_batch(t, [b"a", b"b"], keys=[b"k"]), InvalidRecordError,
     ["1 keys", "2 values"]),
    ("send_batch bad partition", lambda p, t: p.send_batch(t, [b"a"], partition=9), InvalidPartitionError, ["9"]),
    ("send_batch missing topic", lambda p, t: p.send_batch("no-such-topic", [b"a"]), UnknownTopicOrPartitionError,
     ["no-such-topic"]),
    ("partitions_for missing topic", lambda p, t: p.partitions_for("no-such-topic"), UnknownTopicOrPartitionError,
     ["no-such-topic"]),
]


@pytest.mark.parametrize("case", PRODUCER_CASES, ids=[c[0] for c in PRODUCER_CASES])
def test_producer_calls_with_bad_arguments_raise_raylog_errors_naming_the_value(producer, topic, case):
    _, call, error, named = case
    expect(lambda: call(producer, topic), error, *named)


CONSUMER_CASES = [
    ("assign missing topic", lambda c, t: c.assign([TopicPartition("no-such-topic", 0)]),
     UnknownTopicOrPartitionError, ["no-such-topic"]),
    ("assign bad partition", lambda c, t: c.assign([TopicPartition(t, 8)]), InvalidPartitionError, ["8"]),
    ("subscribe without group", lambda c, t: c.subscribe([t]), IllegalStateError, ["group_id"]),
    ("seek negative", lambda c, t: c.seek(TopicPartition(t, 0), -2), InvalidOffsetError, ["-2"]),
    ("seek unassigned", lambda c, t: c.seek(TopicPartition(t, 7), 0), IllegalStateError, ["7"]),
    ("position unassigned", lambda c, t: c.position(TopicPartition(t, 7)), IllegalStateError, ["7"]),
    ("pause unassigned", lambda c, t: c.pause(TopicPartition(t, 7)), IllegalStateError, ["7"]),
    ("offsets_for_times negative", lambda c, t: c.offsets_for_times({TopicPartition(t, 0): -9}),
     InvalidOffsetError, ["-9"]),
    ("end_offsets missing topic", lambda c, t: c.end_offsets([TopicPartition("no-such-topic", 0)]),
     UnknownTopicOrPartitionError, ["no-such-topic"]),
    ("commit without group", lambda c, t: c.commit({TopicPartition(t, 0): 1}), IllegalStateError, ["group_id"]),
    ("poll negative timeout", lambda c, t: c.poll(timeout_ms=-1), InvalidConfigError, ["-1"]),
]


@pytest.mark.parametrize("case", CONSUMER_CASES, ids=[c[0] for c in CONSUMER_CASES])
def test_consumer_calls_with_bad_arguments_raise_raylog_errors_naming_the_value(consumer, topic, case):
    _, call, error, named = case
    expect(lambda: call(consumer, topic), error, *named)


def test_bad_client_configs_name_the_setting(cluster):
    expect(lambda: cluster.producer(acks=2), InvalidConfigError, "acks", "2")
    expect(lambda: cluster.producer(linger_ms=-1), InvalidConfigError, "linger_ms", "-1")
    expect(lambda: cluster.consumer(auto_offset_reset="soonest"), InvalidConfigError, "soonest")
    expect(lambda: cluster.consumer(fetch_max_bytes=0), InvalidConfigError, "fetch_max_bytes", "0")
    expect(lambda: cluster.producer(colour="red"), InvalidConfigError, "colour")


def test_a_bug_inside_an_actor_becomes_actor_call_error_naming_actor_and_call(cluster, topic):
    import ray

    handle = cluster.metadata.leader(topic, 0)
    # Every public method checks its arguments (InvalidRequestError); an internal one called with a
    # wrong type, as no path does, fails with a Python TypeError: a bug, as any other would be.
    with pytest.raises(ActorCallError) as info:
        raylog.ray_calls.get(handle._check_leader.remote("not-an-epoch"), 30)
    message = str(info.value)
    assert "PartitionReplica" in message and "_check_leader" in message and "TypeError" in message, message
    assert not ANSI.search(message) and "ray::" not in message
    assert "_check_leader" in info.value.remote_traceback
    assert ray.get(handle.ping.remote()) is True, "the replica survives its own bug"


def test_connect_to_an_address_where_no_ray_answers_fails_fast_naming_it(cluster):
    import time

    start = time.monotonic()
    with pytest.raises(ClusterNotAvailableError) as info:
        raylog.cluster._ray_address("127.0.0.1:1", 2.0)
    assert time.monotonic() - start < 10
    assert "127.0.0.1:1" in str(info.value) and "ray start" in str(info.value)
