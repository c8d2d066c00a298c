"""Topic configs on a real local Ray: created from Kafka's string values, described with their
sources, altered on a running topic and applied by its replicas at once, kept by the controller's
metadata log across its restart and by a replica across its restart."""

from __future__ import annotations

import io
import os
import signal
import time

import pytest
import ray

from raylog import cli
from raylog.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
from raylog.errors import InvalidConfigError, NotEnoughReplicasError, RecordTooLargeError
from raylog.naming import CONTROLLER_ACTOR_NAME
from raylog.records import TopicPartition
from raylog.storage import batch as rb
from tests.support.topics import consume_all

from .conftest import wait_for

pytestmark = pytest.mark.ray


def entries(admin, topic: str) -> dict:
    return {e.name: e for e in admin.describe_topic_config(topic)}


def produce(cluster, topic: str, values: list[bytes], acks: int = 1) -> tuple:
    """One non-idempotent batch straight at the partition's leader replica."""
    cluster.metadata.invalidate(topic)
    leader = cluster.metadata.leader(topic, 0)
    return ray.get(leader.produce.remote(rb.build(values, compression="none"), acks), timeout=60)


def produce_error(cluster, topic: str, values: list[bytes], acks: int = 1) -> type:
    from raylog.ray_calls import translate

    try:
        produce(cluster, topic, values, acks)
    except ray.exceptions.RayError as exc:
        return type(translate(exc))
    return type(None)


def test_a_topic_created_with_kafkas_string_values_describes_them_as_set(cluster):
    admin = cluster.admin()
    admin.create_topics([NewTopic("strings", 1, 1, {"retention.ms": "60000", "unclean.leader.election.enable": "true",
                                                     "compression.type": "gzip"})])
    described = entries(admin, "strings")
    assert (described["retention.ms"].value, described["retention.ms"].source) == ("60000", "DYNAMIC_TOPIC_CONFIG")
    assert described["unclean.leader.election.enable"].value == "true"
    assert described["unclean.leader.election.enable"].source == "DYNAMIC_TOPIC_CONFIG"
    assert described["segment.bytes"].source == "DEFAULT_CONFIG" and described["segment.bytes"].is_default
    assert described["compression.type"].read_only and described["compression.type"].value == "producer"
    kafka_python = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "strings")])
    assert set(kafka_python["topic"]["strings"]) == {"retention.ms", "unclean.leader.election.enable"}
    assert kafka_python["topic"]["strings"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert kafka_python["topic"]["strings"]["retention.ms"]["config_type"] == "LONG"
    every = admin.describe_configs([ConfigResource("topic", "strings", ["segment.bytes"])], config_filter="all")
    assert every["topic"]["strings"]["segment.bytes"]["value"] == str(1 << 30)


def test_the_cli_creates_a_topic_with_a_boolean_config(cluster, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["topics", "create", "cli-unclean", "--config", "unclean.leader.election.enable=true",
                     "--config", "retention.ms=60000"]) == 0
    described = entries(cluster.admin(), "cli-unclean")
    assert described["unclean.leader.election.enable"].value == "true"
    assert described["retention.ms"].value == "60000"


def test_lowering_retention_on_a_running_topic_deletes_its_old_segments_at_once(cluster):
    admin = cluster.admin()
    admin.create_topic("retained", 1, 1, segment_bytes=1024)
    producer = cluster.producer(compression_type="none")
    hour_ago = int(time.time() * 1000) - 3600_000
    for i in range(6):
        for j in range(4):
            producer.send("retained", os.urandom(300), timestamp_ms=hour_ago + i * 10 + j)
        producer.flush()
    for j in range(4):
        producer.send("retained", b"fresh-%d" % j)
    producer.flush()
    producer.close()
    tp = TopicPartition("retained", 0)
    assert admin.beginning_offsets([tp])[tp] == 0 and admin.end_offsets([tp])[tp] == 28
    time.sleep(1)  # nothing is due under the default retention of 7 days
    assert admin.beginning_offsets([tp])[tp] == 0

    new = {e.name: e for e in admin.alter_topic_config("retained", set={"retention.ms": "600000"})}
    assert new["retention.ms"].value == "600000" and new["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
    wait_for(lambda: admin.beginning_offsets([tp])[tp] == 24, timeout_s=30,
             describe=lambda: admin.describe_partitions("retained")[0])
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([tp])
    values = [r.value for r in consume_all(consumer, 4)]
    assert consumer.position(tp) == 28, "the 4 records were the whole log from its new start"
    consumer.close()
    assert values == [b"fresh-%d" % j for j in range(4)]


def test_min_insync_replicas_altered_live_decides_the_next_acks_all_produce(cluster):
    admin = cluster.admin()
    admin.create_topic("isr", 1, 1)
    assert produce(cluster, "isr", [b"a"], acks=-1)[0] == 0
    admin.alter_topic_config("isr", set={"min.insync.replicas": "2"})
    assert produce_error(cluster, "isr", [b"b"], acks=-1) is NotEnoughReplicasError
    assert produce(cluster, "isr", [b"c"], acks=1)[0] == 1, "acks=1 does not ask for in-sync replicas"
    described = admin.alter_topic_config("isr", delete=["min.insync.replicas"])
    assert {e.name: e for e in described}["min.insync.replicas"].source == "DEFAULT_CONFIG"
    assert produce(cluster, "isr", [b"d"], acks=-1)[0] == 2


def test_a_lowered_max_message_bytes_refuses_a_bigger_batch_and_a_killed_replica_keeps_it(cluster):
    admin = cluster.admin()
    admin.create_topic("sized", 1, 1)
    big = [os.urandom(4000)]
    assert produce(cluster, "sized", big)[0] == 0
    admin.alter_topic_config("sized", set={"max.message.bytes": 2048, "min.insync.replicas": 2})
    assert produce_error(cluster, "sized", big) is RecordTooLargeError
    assert produce(cluster, "sized", [b"small"])[0] == 1

    before = admin.describe_partitions("sized")[0]
    os.kill(before["pid"], signal.SIGKILL)
    wait_for(lambda: admin.describe_partitions("sized")[0].get("pid") not in (None, before["pid"]), timeout_s=60)
    wait_for(lambda: produce(cluster, "sized", [b"after"])[0] == 2, timeout_s=60)
    assert produce_error(cluster, "sized", big) is RecordTooLargeError
    assert produce_error(cluster, "sized", [b"x"], acks=-1) is NotEnoughReplicasError
    (replica,) = admin.describe_replicas("sized", 0)
    assert replica["config_version"] == 1


def test_an_invalid_alteration_changes_nothing(cluster):
    admin = cluster.admin()
    admin.create_topic("unchanged", 1, 1, retention_ms=60_000)
    before = admin.describe_topic_config("unchanged")
    with pytest.raises(InvalidConfigError, match="segment_bytes"):
        admin.alter_topic_config("unchanged", set={"retention.ms": "1000", "segment.bytes": "1"})
    with pytest.raises(InvalidConfigError, match="did you mean 'retention.ms'"):
        admin.alter_topic_config("unchanged", set={"retention.mss": "1000"})
    with pytest.raises(InvalidConfigError, match="not of type LONG"):
        admin.alter_topic_config("unchanged", set={"retention.ms": "1e3"})
    checked = admin.alter_topic_config("unchanged", set={"retention.ms": "1000"}, validate_only=True)
    assert {e.name: e for e in checked}["retention.ms"].value == "1000"
    assert admin.describe_topic_config("unchanged") == before
    result = admin.alter_configs([ConfigResource("topic", "unchanged", {"segment.bytes": "1"})])
    assert result["topic"]["unchanged"].startswith("InvalidConfigError")
    assert admin.describe_topic_config("unchanged") == before


def test_kafka_pythons_incremental_and_legacy_alterations(cluster):
    admin = cluster.admin()
    admin.create_topic("kp", 1, 1, retention_ms=60_000, segment_bytes=4096)
    result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp", {
        "flush.ms": "1000", "segment.bytes": (AlterConfigOp.DELETE, None)})])
    assert result == {"topic": {"kp": "OK"}}
    described = entries(admin, "kp")
    assert described["retention.ms"].value == "60000", "incremental: kept"
    assert described["flush.ms"].value == "1000"
    assert described["segment.bytes"].source == "DEFAULT_CONFIG"
    assert admin.alter_configs([ConfigResource("topic", "kp", {"max.message.bytes": "4096"})],
                               incremental=False) == {"topic": {"kp": "OK"}}
    modified = admin.describe_configs([ConfigResource("topic", "kp")])["topic"]["kp"]
    assert set(modified) == {"max.message.bytes"}, "legacy AlterConfigs replaced every set config"
    assert admin.reset_configs([ConfigResource("topic", "kp")]) == {"topic": {"kp": "OK"}}
    assert admin.describe_configs([ConfigResource("topic", "kp")])["topic"]["kp"] == {}


def test_a_restarted_controller_keeps_the_altered_config(cluster):
    admin = cluster.admin()
    admin.create_topic("durable-config", 1, 1)
    admin.alter_topic_config("durable-config", set={"retention.ms": "123456", "unclean.leader.election.enable": True})
    controller = ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog")
    pid = ray.get(controller.ping.remote())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: ray.get(controller.ping.remote(), timeout=5) != pid, timeout_s=60)
    described = entries(admin, "durable-config")
    assert (described["retention.ms"].value, described["retention.ms"].source) == ("123456", "DYNAMIC_TOPIC_CONFIG")
    assert described["unclean.leader.election.enable"].value == "true"
    admin.alter_topic_config("durable-config", set={"max.message.bytes": 2048})
    assert produce_error(cluster, "durable-config", [os.urandom(4000)]) is RecordTooLargeError
