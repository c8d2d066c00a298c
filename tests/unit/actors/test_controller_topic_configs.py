"""ControllerState keeps each topic's config, the configs it sets, and their alterations as records."""

from __future__ import annotations

import pytest

from actors.controller_state import ControllerState
from raylog.config import TopicConfig
from raylog.errors import InvalidConfigError, UnknownTopicOrPartitionError
from tests.unit.actors.test_controller_state import apply, place


def test_a_topic_created_with_string_configs_records_them_parsed_and_as_set():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {"retention.ms": "60000", "unclean.leader.election.enable": "true",
                                                "compression.type": "gzip"}, "id", place))
    topic = state.topic("t")
    assert topic.config["retention_ms"] == 60_000 and topic.config["unclean_leader_election_enable"] is True
    assert topic.config["min_insync_replicas"] == 2, "not set: the default for replication factor 3"
    assert topic.overrides == ["retention_ms", "unclean_leader_election_enable"]
    assert "compression.type" not in str(topic.config)


def test_an_alteration_is_a_record_that_replays_to_the_same_config_and_version():
    state, log = ControllerState(), []
    log += apply(state, state.create_topic("t", 2, 1, {"retention.ms": 1000}, "id", place))[0]
    log += apply(state, state.alter_topic_config("t", {"segment.bytes": "4096"}, ["retention.ms"]))[0]
    log += apply(state, state.alter_topic_config("t", {"min.insync.replicas": 2}, []))[0]
    topic = state.topic("t")
    assert [r["type"] for r in log] == ["topic_created", "topic_config_altered", "topic_config_altered"]
    assert topic.config == TopicConfig(segment_bytes=4096, min_insync_replicas=2).to_dict()
    assert topic.overrides == ["min_insync_replicas", "segment_bytes"] and topic.config_version == 2
    rebuilt = ControllerState()
    for r in log:
        rebuilt.replay(r)
    assert rebuilt.topics == state.topics


def test_an_alteration_that_changes_nothing_writes_no_record():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 1, {"retention.ms": 1000}, "id", place))
    records, _ = state.alter_topic_config("t", {"retention.ms": "1000"}, [])
    assert records == []


def test_an_invalid_alteration_writes_no_record_and_changes_nothing():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 1, {"retention.ms": 1000}, "id", place))
    before = state.topic("t").config
    for set_values, delete in (({"retention.ms": "soon"}, []), ({"segment.bytes": 1}, []), ({}, ["retention.mss"])):
        with pytest.raises(InvalidConfigError):
            state.alter_topic_config("t", set_values, delete)
    assert state.topic("t").config == before and state.topic("t").config_version == 0
    with pytest.raises(UnknownTopicOrPartitionError):
        state.alter_topic_config("nope", {"retention.ms": 1}, [])


def test_a_topic_recorded_before_overrides_were_kept_counts_its_non_default_configs_as_set():
    state = ControllerState()
    records, _ = state.create_topic("t", 1, 3, {"retention.ms": 1000}, "id", place)
    del records[0]["overrides"]
    state.replay(records[0])
    assert state.topic("t").overrides == ["retention_ms"]
