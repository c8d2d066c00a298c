"""ControllerState: handlers return records; replaying them rebuilds an equal state."""

import pytest

from actors.controller_state import ControllerState
from raylog.errors import (
    InvalidConfigError, InvalidPartitionError, InvalidTopicError, TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


def place(count, first):
    return [[(f"node-{(first + p) % 2}", "/data/node")] for p in range(count)]


def apply(state, result):
    records, response = result
    for r in records:
        state.replay(r)
    return records, response


def test_replaying_the_emitted_records_rebuilds_an_equal_state():
    state = ControllerState()
    log = []
    log += apply(state, state.create_topic("a", 2, {"retention.ms": 1000}, place))[0]
    log += apply(state, state.create_partitions("a", 4, place))[0]
    log += apply(state, state.create_topic("b", 1, {}, place))[0]
    log += apply(state, state.delete_topic("b"))[0]
    rebuilt = ControllerState()
    for r in log:
        rebuilt.replay(r)
    assert rebuilt.topics == state.topics
    assert len(rebuilt.topic("a").partitions) == 4
    assert rebuilt.topic("a").config["retention_ms"] == 1000


def test_handlers_refuse_bad_requests_without_emitting_records():
    state = ControllerState()
    apply(state, state.create_topic("a", 1, {}, place))
    calls = []

    def spy(count, first):
        calls.append(count)
        return place(count, first)

    with pytest.raises(TopicAlreadyExistsError):
        state.create_topic("a", 1, {}, spy)
    with pytest.raises(InvalidTopicError):
        state.create_topic("bad name", 1, {}, spy)
    with pytest.raises(InvalidPartitionError):
        state.create_topic("c", 0, {}, spy)
    with pytest.raises(InvalidConfigError):
        state.create_topic("c", 1, {"no.such.config": 1}, spy)
    with pytest.raises(InvalidPartitionError):
        state.create_partitions("a", 1, spy)
    with pytest.raises(UnknownTopicOrPartitionError):
        state.delete_topic("missing")
    assert calls == [], "placement must not be consulted for an invalid request"


def test_partition_directories_are_named_topic_dash_partition_under_the_node_root():
    state = ControllerState()
    apply(state, state.create_topic("events", 2, {}, place))
    dirs = [reps[0]["directory"] for reps in state.topic("events").partitions]
    assert dirs == ["/data/node/events-0", "/data/node/events-1"]
