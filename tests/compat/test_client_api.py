"""kafka-python 3.x's client surface on a real local Ray: config keys, shapes, metrics, timeouts,
auto-creation, assign-mode auto-commit and the 3.x admin names."""

from __future__ import annotations

import logging
import threading

import pytest

import raylog
from raylog import (
    ConsumerRecord, KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata, OffsetSpec, OffsetTimestamp,
    RecordMetadata, TopicPartition,
)
from raylog.errors import (
    InvalidConfigError, KafkaError, KafkaTimeoutError, NonEmptyGroupError, UnknownTopicOrPartitionError,
)
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.ray]


@pytest.fixture(scope="module")
def admin(cluster):
    return KafkaAdminClient(bootstrap_servers="localhost:9092", client_id="compat-admin")


@pytest.fixture(scope="module")
def topic(admin):
    admin.create_topics({"api-topic": {"num_partitions": 2, "configs": {"retention.ms": "600000"}}})
    producer = KafkaProducer(linger_ms=0)
    for i in range(20):
        producer.send("api-topic", value=b"v%d" % i, key=None if i % 2 else b"k%d" % i, partition=i % 2,
                      headers=[("h", b"x")] if i == 3 else None)
    producer.close()
    return "api-topic"


def test_every_kafka_python_key_is_accepted_and_the_meaningless_ones_are_named_once(cluster, caplog):
    with caplog.at_level(logging.WARNING, logger="raylog"):
        producer = KafkaProducer(bootstrap_servers=["a:9092", "b:9092"], security_protocol="SASL_SSL",
                                 sasl_mechanism="PLAIN", sasl_plain_username="u", sasl_plain_password="p",
                                 ssl_cafile="/nowhere", api_version=(3, 6), connections_max_idle_ms=1,
                                 client_id="billing", retries=float("inf"), metric_reporters=[],
                                 transaction_timeout_ms=60000)
        consumer = KafkaConsumer(bootstrap_servers="x:1", partition_assignment_strategy=(object,), client_rack="r1",
                                 consumer_timeout_ms=float("inf"), isolation_level="read_uncommitted",
                                 enable_incremental_fetch_sessions=True, metric_group_prefix="c")
    warnings = [r.getMessage() for r in caplog.records if "ignoring kafka-python settings" in r.getMessage()]
    assert len(warnings) == 2
    assert all(k in warnings[0] for k in ("bootstrap_servers", "sasl_plain_password", "ssl_cafile", "api_version"))
    assert "partition_assignment_strategy" in warnings[1] and "client_rack" in warnings[1]
    assert producer.client_id == "billing" and producer.config.retries == 2**31 - 1
    assert consumer.config.consumer_timeout_ms is None
    producer.close()
    consumer.close()


@pytest.mark.parametrize("configs, message", [
    ({"lingerms": 5}, "did you mean 'linger_ms'"),
    ({"transactional_id": "tx-1"}, "no transactions"),
    ({"compression_type": "brotli"}, "compression_type"),
    ({"partitioner": 42}, "partitioner"),
])
def test_producer_settings_that_cannot_work_are_refused_before_anything_starts(cluster, configs, message):
    with pytest.raises(InvalidConfigError, match=message):
        KafkaProducer(**configs)


def test_read_committed_is_refused_until_transactions_exist(cluster):
    with pytest.raises(InvalidConfigError, match="read_uncommitted"):
        KafkaConsumer(isolation_level="read_committed")


def test_records_and_metadata_have_kafka_pythons_fields_in_its_order(cluster, topic):
    assert RecordMetadata._fields == ("topic", "partition", "topic_partition", "offset", "timestamp", "checksum",
                                      "serialized_key_size", "serialized_value_size", "serialized_header_size")
    assert ConsumerRecord._fields == ("topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type",
                                      "key", "value", "headers", "checksum", "serialized_key_size",
                                      "serialized_value_size", "serialized_header_size")
    assert OffsetAndMetadata(5) == (5, "", -1)

    producer = KafkaProducer()
    first = producer.send(topic, value=b"12345", key=b"kk", headers=[("name", b"abc")], partition=1).get(30)
    topic_, partition, tp, offset, timestamp, checksum, ks, vs, hs = first
    assert (topic_, partition, tp, checksum, ks, vs, hs) == (topic, 1, TopicPartition(topic, 1), None, 2, 5, 7)
    tombstone = producer.send(topic, value=None, key=None, partition=1).get(30)
    assert (tombstone.serialized_key_size, tombstone.serialized_value_size,
            tombstone.serialized_header_size) == (-1, -1, -1)
    producer.close()

    consumer = KafkaConsumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 1)])
    records = []
    while len(records) <= tombstone.offset:
        for batch in consumer.poll(timeout_ms=2000).values():
            records.extend(batch)
    by_offset = {r.offset: r for r in records}
    _, _, epoch, _, _, ts_type, key, value, headers, checksum, ks, vs, hs = by_offset[first.offset]
    assert (key, value, headers, checksum, ks, vs, hs) == (b"kk", b"12345", [("name", b"abc")], None, 2, 5, 7)
    assert epoch >= 0 and ts_type == 0
    unkeyed = by_offset[0]  # the fixture's i=1: no key, value b"v1", no headers
    assert (unkeyed.key, unkeyed.serialized_key_size, unkeyed.serialized_value_size,
            unkeyed.serialized_header_size) == (None, -1, 2, -1)
    assert by_offset[1].headers == [("h", b"x")] and by_offset[1].serialized_header_size == 2
    assert by_offset[tombstone.offset].value is None and by_offset[tombstone.offset].serialized_value_size == -1
    consumer.close()


def test_a_kafka_python_partitioner_and_a_legacy_callable_choose_the_partition(cluster, topic):
    class Last:
        def partition(self, topic, key, serialized_key, value, serialized_value, cluster):
            assert cluster.partitions_for_topic(topic) == {0, 1}
            return max(cluster.available_partitions_for_topic(topic))

    producer = KafkaProducer(partitioner=Last(), key_serializer=str.encode)
    assert {producer.send(topic, b"v", key=f"k{i}").get(30).partition for i in range(10)} == {1}
    producer.close()
    legacy = KafkaProducer(partitioner=lambda key, all_partitions, available: all_partitions[0])
    assert {legacy.send(topic, b"v", key=b"k%d" % i).get(30).partition for i in range(10)} == {0}
    assert {m.partition for m in legacy.send_batch(topic, [b"a", b"b"], keys=[b"x", b"y"]).get(30)} == {0}
    legacy.close()


def test_a_missing_topic_is_created_only_when_the_client_asks(cluster):
    with pytest.raises(UnknownTopicOrPartitionError):
        KafkaProducer().send("auto-never", b"v")
    with pytest.raises(UnknownTopicOrPartitionError):
        KafkaProducer(allow_auto_create_topics=False).send("auto-never", b"v")
    producer = KafkaProducer(allow_auto_create_topics=True)
    assert producer.send("auto-created", b"v").get(60).offset == 0
    producer.close()
    consumer = KafkaConsumer("auto-by-consumer", allow_auto_create_topics=True)
    assert consumer.partitions_for_topic("auto-by-consumer") == {0}
    assert {"auto-created", "auto-by-consumer"} <= consumer.topics()
    assert "__consumer_offsets" not in consumer.topics()
    assert consumer.partitions_for_topic("auto-never") is None
    consumer.close()


def test_metrics_use_kafka_pythons_names_and_count_what_happened(cluster, topic):
    producer = KafkaProducer()
    producer.send_batch(topic, [b"x" * 10] * 1000, partition=0).get(30)
    metrics = producer.metrics()["producer-metrics"]
    assert metrics["record-send-total"] == 1000
    assert metrics["record-send-rate"] > 0 and metrics["request-latency-avg"] > 0
    assert metrics["outgoing-byte-total"] > 0 and metrics["record-error-total"] == 0
    producer.close()
    assert KafkaProducer(metrics_enabled=False).metrics() is None

    consumer = KafkaConsumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    got = 0
    while got < 1000:
        got += sum(map(len, consumer.poll(timeout_ms=2000).values()))
    fetch = consumer.metrics()["consumer-fetch-manager-metrics"]
    assert fetch["records-consumed-total"] == got
    assert fetch["fetch-total"] >= 1 and fetch["bytes-consumed-total"] > 0
    assert consumer.metrics()["consumer-coordinator-metrics"]["assigned-partitions"] == 1
    consumer.close()


def test_poll_returns_max_poll_records_by_default_and_poll_batch_more(cluster, topic):
    producer = KafkaProducer()
    producer.send_batch(topic, [b"y"] * 3000, partition=0).get(30)
    producer.close()
    consumer = KafkaConsumer(auto_offset_reset="earliest", fetch_min_bytes=1)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    first = wait_for(lambda: consumer.poll(timeout_ms=1000).get(tp))
    assert len(first) == 500
    batches = wait_for(lambda: consumer.poll_batch(timeout_ms=1000))
    assert sum(map(len, batches)) > 500
    consumer.close()


def test_blocking_calls_take_timeout_ms(cluster, topic):
    consumer = KafkaConsumer(group_id="timeouts")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    assert consumer.end_offsets([tp], timeout_ms=10_000)[tp] > 0
    assert consumer.beginning_offsets([tp], timeout_ms=10_000)[tp] == 0
    assert consumer.position(tp, timeout_ms=10_000) == consumer.end_offsets([tp])[tp]
    assert consumer.committed(tp, timeout_ms=10_000) is None
    consumer.commit({tp: 3}, timeout_ms=10_000)
    assert consumer.committed(tp, metadata=True, timeout_ms=10_000).offset == 3
    with pytest.raises(KafkaTimeoutError):
        consumer.end_offsets([tp], timeout_ms=0)
    with pytest.raises(InvalidConfigError):
        consumer.offsets_for_times({tp: 0}, timeout_ms=-1)
    consumer.close()


def test_assign_mode_auto_commits_under_a_group_id_and_calls_the_default_callback(cluster, topic):
    called = []
    done = threading.Event()

    tp = TopicPartition(topic, 1)
    end = KafkaConsumer().end_offsets([tp])[tp]

    def on_commit(offsets, response):
        called.append((offsets, response))
        if tp in offsets and offsets[tp].offset == end:  # an earlier commit may cover part of it
            done.set()

    consumer = KafkaConsumer(group_id="assign-auto", auto_offset_reset="earliest", auto_commit_interval_ms=100,
                             default_offset_commit_callback=on_commit)
    consumer.assign([tp])
    seen = 0
    while not done.is_set():
        seen += len(consumer.poll(timeout_ms=300).get(tp, []))
    assert all(response is None and tp in offsets for offsets, response in called)
    consumer.close()
    reader = KafkaAdminClient().list_group_offsets("assign-auto")["assign-auto"]
    assert reader[tp].offset == seen == end


def test_the_3x_admin_names_manage_groups_and_offsets(cluster, admin, topic):
    group = "admin-3x"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    assert admin.alter_group_offsets(group, {tp0: OffsetAndMetadata(2), tp1: 1}) == {tp0: None, tp1: None}
    assert admin.list_group_offsets(group)[group] == {tp0: OffsetAndMetadata(2, ""), tp1: OffsetAndMetadata(1, "")}
    assert any(g["group_id"] == group for g in admin.list_groups())
    assert admin.describe_groups([group])[group]["group_id"] == group

    ends = admin.list_partition_offsets({tp0: OffsetSpec.LATEST, tp1: OffsetSpec.EARLIEST})
    assert ends[tp1].offset == 0 and ends[tp0].offset > 2
    reset = admin.reset_group_offsets(group, {tp0: OffsetSpec.EARLIEST, tp1: OffsetTimestamp(2**41)})
    assert reset == {tp0: {"error": None, "offset": 0},
                     tp1: {"error": None, "offset": admin.end_offsets([tp1])[tp1]}}
    assert admin.delete_group_offsets(group, [tp1]) == {tp1: None}
    assert set(admin.list_group_offsets([group])[group]) == {tp0}

    member = KafkaConsumer(topic, group_id=group)
    wait_for(lambda: member.poll(timeout_ms=200) is not None and member.assignment())
    with pytest.raises(NonEmptyGroupError):
        admin.alter_group_offsets(group, {tp0: 1})
    member.close()
    assert admin.delete_groups([group]) == {group: None}


def test_create_topics_takes_what_kafka_python_3x_takes(cluster, admin):
    assert admin.create_topics(["names-only"], validate_only=True) == []
    assert "names-only" not in admin.list_topics()
    admin.create_topics(["names-only"])
    admin.create_topics({"dict-form": {"num_partitions": 2, "replication_factor": 1,
                                       "configs": {"unclean.leader.election.enable": "true"}}})
    described = {d.name: d for d in admin.describe_topics(["names-only", "dict-form"])}
    assert len(described["names-only"].partitions) == 1 and len(described["dict-form"].partitions) == 2
    admin.create_topics(["names-only"], raise_errors=False)  # exists: skipped, not raised
    with pytest.raises(KafkaError):  # kafka-python's base error catches raylog's
        admin.create_topics(["names-only"])
    with pytest.raises(InvalidConfigError, match="did you mean"):
        admin.create_topics({"bad-config": {"configs": {"retention.msec": "1"}}})
    assert raylog.KafkaAdminClient is raylog.AdminClient
