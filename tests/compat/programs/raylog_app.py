"""A kafka-python 3.x program as its users write it: an admin creating, describing and altering
a topic, a producer with callbacks, and a consumer group committing what it processed.

tests/compat/programs/raylog_app.py is the same program ported to raylog: only the imports differ
(tests/compat/test_kafka_python_program.py checks that, then runs the port).
"""

import json
import logging

from raylog import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from raylog import ConfigResource, ConfigResourceType, NewTopic
from raylog.errors import KafkaError, TopicAlreadyExistsError

log = logging.getLogger("orders-app")
BOOTSTRAP = "localhost:9092"


def setup_topic(topic):
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="orders-admin", request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name=topic, num_partitions=3, replication_factor=1,
                                      topic_configs={"retention.ms": "3600000", "cleanup.policy": "delete"})])
    except TopicAlreadyExistsError:
        pass
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    retention_before = described["topic"][topic]["retention.ms"]["value"]
    admin.incremental_alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                    configs={"retention.ms": "7200000"})])
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    retention_after = described["topic"][topic]["retention.ms"]["value"]
    partitions = admin.describe_topics([topic])
    admin.close()
    return retention_before, retention_after, partitions


def produce(topic, count):
    delivered, failed = [], []

    def on_send_success(record_metadata):
        topic_, partition, _tp, offset, _timestamp, _checksum, key_size, value_size, _header_size = record_metadata
        delivered.append((topic_, partition, offset, key_size, value_size))

    def on_send_error(excp):
        log.error("I am an errback", exc_info=excp)
        failed.append(excp)

    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, client_id="orders-producer", acks="all",
                             compression_type="gzip", linger_ms=5, retries=5,
                             key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode("utf-8"),
                             security_protocol="PLAINTEXT", api_version=(3, 6))
    for i in range(count):
        producer.send(topic, key=f"customer-{i % 7}", value={"order": i, "amount": i * 10},
                      headers=[("source", b"compat")]).add_callback(on_send_success).add_errback(on_send_error)
    producer.flush()
    metrics = producer.metrics()
    producer.close()
    return delivered, failed, metrics


def consume(topic, group, count):
    consumer = KafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id=group, client_id="orders-consumer",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             value_deserializer=lambda m: json.loads(m.decode("utf-8")),
                             consumer_timeout_ms=20000, max_poll_records=50)
    seen = []
    try:
        for message in consumer:
            (topic_, partition, _leader_epoch, offset, _timestamp, _timestamp_type, key, value, headers,
             _checksum, _key_size, _value_size, _header_size) = message
            seen.append((partition, offset, key.decode(), value["order"], headers))
            consumer.commit()
            if len(seen) >= count:
                break
    except KafkaError as exc:
        log.error("consuming failed: %s", exc)
        raise
    committed = {p: consumer.committed(TopicPartition(topic, p)) for p in consumer.partitions_for_topic(topic)}
    consumer.close()
    return seen, committed


def main(topic="orders", group="orders-billing", count=200):
    retention = setup_topic(topic)
    delivered, failed, metrics = produce(topic, count)
    seen, committed = consume(topic, group, count)
    return {"retention": retention[:2], "partitions": retention[2], "delivered": delivered, "failed": failed,
            "producer_metrics": metrics, "seen": seen, "committed": committed}
