"""Client configs refuse what Kafka refuses, with raylog's own error naming the setting."""

from __future__ import annotations

import pytest

from raylog.config import ConsumerConfig, ProducerConfig, TopicConfig
from raylog.errors import InvalidConfigError


@pytest.mark.parametrize("settings,name", [
    ({"max_in_flight_requests_per_connection": 6}, "max_in_flight_requests_per_connection"),
    ({"retries": 0}, "retries"),
    ({"acks": 2}, "acks"),
    ({"acks": "leader"}, "acks"),
    ({"compression_type": "brotli"}, "compression_type"),
    ({"batch_size": 0}, "batch_size"),
    ({"linger_ms": -1}, "linger_ms"),
    ({"metadata_max_age_ms": -5}, "metadata_max_age_ms"),
])
def test_producer_config_refuses_bad_values_naming_the_setting(settings, name):
    with pytest.raises(InvalidConfigError, match=name):
        ProducerConfig(**settings)


def test_idempotence_off_allows_more_in_flight_and_no_retries():
    config = ProducerConfig(enable_idempotence=False, max_in_flight_requests_per_connection=10, retries=0)
    assert config.max_in_flight_requests_per_connection == 10


@pytest.mark.parametrize("acks,required", [(0, 0), (1, 1), ("all", -1), (-1, -1), ("1", 1)])
def test_acks_map_to_kafkas_required_acks(acks, required):
    assert ProducerConfig(acks=acks).required_acks == required


@pytest.mark.parametrize("settings", [{"fetch_max_bytes": 0}, {"consumer_timeout_ms": -1},
                                      {"auto_offset_reset": "smallest"}])
def test_consumer_config_refuses_bad_values(settings):
    with pytest.raises(InvalidConfigError):
        ConsumerConfig(**settings)


def test_topic_config_takes_kafka_dotted_names_and_refuses_unknown_ones():
    assert TopicConfig.from_mapping({"retention.ms": 1000}).retention_ms == 1000
    with pytest.raises(InvalidConfigError, match="retention.mss|retention_mss"):
        TopicConfig.from_mapping({"retention.mss": 1000})
