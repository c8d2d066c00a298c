"""Topic configs as Kafka has them: values parsed as Kafka's ConfigDef parses them, unknown keys
named with the nearest known one, Kafka-only keys accepted and ignored, describe and alteration."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from raylog import topic_configs
from raylog.config import KAFKA_ONLY_TOPIC_CONFIGS, NEVER, TOPIC_CONFIG_TYPES, TopicConfig
from raylog.errors import InvalidConfigError, InvalidRequestError
from raylog.topic_configs import AlterConfigOp, ConfigResource, ConfigResourceType


def test_every_topic_config_field_has_a_kafka_type_and_documentation():
    fields = {f.name for f in dataclasses.fields(TopicConfig)}
    assert set(TOPIC_CONFIG_TYPES) == fields
    for field in fields:
        assert topic_configs.documentation(field.replace("_", ".")), field


@pytest.mark.parametrize("values,field,expected", [
    ({"retention.ms": "60000"}, "retention_ms", 60_000),
    ({"retention.ms": " -1 "}, "retention_ms", -1),
    ({"retention_ms": "+5"}, "retention_ms", 5),
    ({"segment.bytes": 4096}, "segment_bytes", 4096),
    ({"flush.ms": str(NEVER)}, "flush_ms", NEVER),
    ({"unclean.leader.election.enable": "true"}, "unclean_leader_election_enable", True),
    ({"unclean.leader.election.enable": "TRUE"}, "unclean_leader_election_enable", True),
    ({"unclean.leader.election.enable": " False "}, "unclean_leader_election_enable", False),
    ({"unclean.leader.election.enable": True}, "unclean_leader_election_enable", True),
    ({"cleanup.policy": " compact"}, "cleanup_policy", "compact"),
    ({"message.timestamp.type": "LogAppendTime"}, "message_timestamp_type", "LogAppendTime"),
])
def test_string_values_are_parsed_as_kafkas_configdef_parses_them(values, field, expected):
    assert getattr(TopicConfig.from_mapping(values), field) == expected


@pytest.mark.parametrize("values,shown", [
    ({"retention.ms": "1e3"}, "retention.ms: '1e3' is not of type LONG"),
    ({"retention.ms": "1000.0"}, "retention.ms: '1000.0' is not of type LONG"),
    ({"retention.ms": 1000.0}, "retention.ms: 1000.0 is not of type LONG"),
    ({"retention.ms": ""}, "retention.ms: '' is not of type LONG"),
    ({"retention.ms": True}, "retention.ms: True is not of type LONG"),
    ({"segment.bytes": 2**31}, "segment.bytes: 2147483648 is not of type INT"),
    ({"flush.ms": str(2**63)}, "flush.ms: '9223372036854775808' is not of type LONG"),
    ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable: 'yes' is not of type BOOLEAN"),
    ({"unclean.leader.election.enable": 1}, "unclean.leader.election.enable: 1 is not of type BOOLEAN"),
    ({"cleanup.policy": 1}, "cleanup.policy: 1 is not of type LIST"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_key_value_and_type(values, shown):
    with pytest.raises(InvalidConfigError) as raised:
        TopicConfig.from_mapping(values)
    assert shown in str(raised.value)


def test_values_in_range_of_their_type_are_still_checked_by_the_config():
    with pytest.raises(InvalidConfigError, match="cleanup_policy"):
        TopicConfig.from_mapping({"cleanup.policy": "compact,delete"})
    with pytest.raises(InvalidConfigError, match="min_insync_replicas"):
        TopicConfig.from_mapping({"min.insync.replicas": "0"})


@pytest.mark.parametrize("key,suggestion", [
    ("retention.mss", "retention.ms"),
    ("retention_mss", "retention.ms"),
    ("retension.ms", "retention.ms"),
    ("min.insync.replica", "min.insync.replicas"),
    ("unclean.leader.elections.enable", "unclean.leader.election.enable"),
    ("compresion.type", "compression.type"),
])
def test_an_unknown_key_is_refused_with_the_nearest_known_name(key, suggestion):
    with pytest.raises(InvalidConfigError, match=f"did you mean '{suggestion}'"):
        TopicConfig.from_mapping({key: "1"})


def test_an_unknown_key_with_nothing_close_is_refused_without_a_guess():
    with pytest.raises(InvalidConfigError) as raised:
        TopicConfig.from_mapping({"zzzz": 1})
    assert "unknown topic config 'zzzz'" in str(raised.value) and "did you mean" not in str(raised.value)


def test_kafka_keys_raylog_does_not_implement_are_accepted_and_ignored_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="raylog.config"):
        config = TopicConfig.from_mapping({"compression.type": "zstd", "min.cleanable.dirty.ratio": "0.1",
                                           "preallocate": "true", "retention.ms": "1000"})
    assert config == TopicConfig(retention_ms=1000)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "compression.type, min.cleanable.dirty.ratio, preallocate" in warnings[0]


def test_describe_gives_kafkas_string_forms_sources_and_read_only_ignored_keys():
    config = TopicConfig(retention_ms=60_000, unclean_leader_election_enable=True).to_dict()
    entries = {e.name: e for e in topic_configs.describe(config, ["retention_ms", "unclean_leader_election_enable"])}
    assert set(entries) == {f.replace("_", ".") for f in TOPIC_CONFIG_TYPES} | set(KAFKA_ONLY_TOPIC_CONFIGS)
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG" and not entries["retention.ms"].is_default
    assert entries["unclean.leader.election.enable"].value == "true"
    assert entries["segment.bytes"].source == "DEFAULT_CONFIG" and entries["segment.bytes"].is_default
    assert not any(entries[f.replace("_", ".")].read_only for f in TOPIC_CONFIG_TYPES)
    assert entries["compression.type"].read_only and entries["compression.type"].value == "producer"
    assert "Delete segments whose newest record is older" in entries["retention.ms"].documentation


def test_an_alteration_sets_deletes_and_keeps_the_rest():
    config = TopicConfig(retention_ms=1000, segment_bytes=4096, min_insync_replicas=2).to_dict()
    altered = topic_configs.alter(config, ["retention_ms", "segment_bytes", "min_insync_replicas"], 3,
                                  {"max.message.bytes": "2048"}, ["segment.bytes", "min.insync.replicas"])
    assert altered.config.retention_ms == 1000, "kept"
    assert altered.config.max_message_bytes == 2048, "set"
    assert altered.config.segment_bytes == TopicConfig().segment_bytes, "deleted: back to the default"
    assert altered.config.min_insync_replicas == 2, "deleted: the default for replication factor 3"
    assert altered.overrides == ("max_message_bytes", "retention_ms")


def test_a_replacing_alteration_returns_every_config_not_given_to_its_default():
    config = TopicConfig(retention_ms=1000, segment_bytes=4096).to_dict()
    altered = topic_configs.alter(config, ["retention_ms", "segment_bytes"], 1, {"flush.ms": 10}, replace=True)
    assert altered.config == TopicConfig(flush_ms=10)
    assert altered.overrides == ("flush_ms",)


def test_an_invalid_alteration_is_refused_whole():
    config = TopicConfig().to_dict()
    with pytest.raises(InvalidConfigError, match="nothing was changed"):
        topic_configs.alter(config, [], 1, {"retention.ms": "1000", "segment.bytes": "1"})
    with pytest.raises(InvalidConfigError, match="did you mean 'segment.ms'"):
        topic_configs.alter(config, [], 1, {}, ["segment.mss"])
    with pytest.raises(InvalidConfigError, match="both set and deleted"):
        topic_configs.alter(config, [], 1, {"retention.ms": 1}, ["retention.ms"])


def test_kafka_python_incremental_operations_resolve_to_set_and_delete():
    current = TopicConfig().to_dict()
    set_values, delete = topic_configs.incremental_ops(
        {"retention.ms": "1000", "segment.bytes": (AlterConfigOp.DELETE, None), "flush.ms": ("SET", 5),
         "cleanup.policy": (AlterConfigOp.APPEND, "compact")}, current)
    assert set_values == {"retention.ms": "1000", "flush.ms": 5, "cleanup.policy": "delete,compact"}
    assert delete == ["segment.bytes"]
    assert topic_configs.incremental_ops({"cleanup.policy": ("SUBTRACT", "delete")},
                                         {"cleanup_policy": "compact,delete"})[0] == {"cleanup.policy": "compact"}
    with pytest.raises(InvalidConfigError, match="list configs only"):
        topic_configs.incremental_ops({"retention.ms": (AlterConfigOp.APPEND, "1")}, current)
    with pytest.raises(InvalidRequestError):
        topic_configs.incremental_ops({"retention.ms": ("MULTIPLY", "1")}, current)


def test_config_resources_take_kafka_pythons_shapes():
    assert ConfigResource("topic", "t").resource_type is ConfigResourceType.TOPIC
    assert ConfigResource(ConfigResourceType.TOPIC, "t", {"retention.ms": "1"}).topic() == "t"
    with pytest.raises(InvalidRequestError, match="topic configs only"):
        ConfigResource(ConfigResourceType.BROKER, "0").topic()
    with pytest.raises(InvalidRequestError):
        ConfigResource("galaxy", "t")
