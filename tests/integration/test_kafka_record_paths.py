"""A record survives every path through the Kafka listener exactly (issue 34), as a property.

Hypothesis draws records (keys and values null, empty or bytes; headers with null, empty and
repeated keys; any CreateTime timestamp) and one of three producers: raylog's own, kafka-python
(the pinned 3.x) and confluent-kafka (librdkafka), the last two through the listener. Every
record is then read back by three consumers: raylog's own, kafka-python's and confluent-kafka's,
the last two through the listener. So every path is covered: raylog -> Kafka client, Kafka
client -> raylog, Kafka client -> Kafka client (and raylog -> raylog). Each read must give the
record's key, value, headers, timestamp and offset exactly as sent and acknowledged.

The clients are made once for the module and each example reads from the offset its records were
acknowledged at (a seek), so an example costs a produce and three fetches on a live cluster.
"""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.records import TopicPartition as RaylogTP

pytestmark = [pytest.mark.ray]

READ_TIMEOUT_S = 60.0
PRODUCERS = ("raylog", "kafka-python", "confluent-kafka")
EXAMPLES = 60

nullable_bytes = st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=64))
header_keys = st.sampled_from(["h", "trace-id", "", "ünïcode", "h"])


@st.composite
def records(draw, producer: str) -> list[tuple]:
    """(key, value, headers, timestamp) tuples a ``producer`` can send. kafka-python sends no null
    header value (its encoder takes bytes only) and no record with both key and value null (it
    refuses one); librdkafka takes a timestamp of 0 for "now"."""
    header_values = st.binary(max_size=16) if producer == "kafka-python" else st.one_of(st.none(), st.binary(max_size=16))
    record = st.tuples(nullable_bytes, nullable_bytes,
                       st.lists(st.tuples(header_keys, header_values), max_size=4),
                       st.integers(min_value=1, max_value=2**41))
    if producer == "kafka-python":
        record = record.filter(lambda r: r[0] is not None or r[1] is not None)
    return draw(st.lists(record, min_size=1, max_size=12))


@st.composite
def produced(draw) -> tuple[str, list[tuple]]:
    producer = draw(st.sampled_from(PRODUCERS))
    return producer, draw(records(producer))


class Paths:
    """The module's producers and consumers, one each per client, on one single-partition topic."""

    def __init__(self, cluster, bootstrap: str):
        import confluent_kafka
        from kafka import KafkaConsumer, KafkaProducer

        self.topic = f"paths-{uuid.uuid4().hex[:8]}"
        # Kept for good: the records' timestamps go back to 1970, and time-based retention would
        # delete them under the readers.
        cluster.admin().create_topic(self.topic, 1, retention_ms=-1)
        self.raylog_producer = cluster.producer(acks="all")
        self.kafka_producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        self.confluent_producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                                            "linger.ms": 0, "enable.idempotence": True})
        self.raylog_consumer = cluster.consumer()
        self.raylog_consumer.assign([RaylogTP(self.topic, 0)])
        self.kafka_consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                            fetch_max_wait_ms=100)
        from kafka import TopicPartition as KafkaTP

        self.kafka_tp = KafkaTP(self.topic, 0)
        self.kafka_consumer.assign([self.kafka_tp])
        self.confluent_consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"paths-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False, "fetch.wait.max.ms": 100})

    def close(self) -> None:
        self.raylog_producer.close()
        self.kafka_producer.close()
        self.confluent_producer.flush(10)
        self.confluent_producer = None  # librdkafka's threads end with their client, not with the cluster
        self.raylog_consumer.close()
        self.kafka_consumer.close()
        self.confluent_consumer.close()

    def send(self, producer: str, rows: list[tuple]) -> list[int]:
        """Sends ``rows`` in order through ``producer``; the offsets they were acknowledged at."""
        if producer == "raylog":
            futures = [self.raylog_producer.send(self.topic, value=v, key=k, headers=h or None, timestamp_ms=t,
                                                 partition=0) for k, v, h, t in rows]
            self.raylog_producer.flush()
            return [f.get(READ_TIMEOUT_S).offset for f in futures]
        if producer == "kafka-python":
            futures = [self.kafka_producer.send(self.topic, value=v, key=k, headers=h, timestamp_ms=t, partition=0)
                       for k, v, h, t in rows]
            self.kafka_producer.flush()
            return [f.get(READ_TIMEOUT_S).offset for f in futures]
        acked: list = []
        for k, v, h, t in rows:
            self.confluent_producer.produce(self.topic, value=v, key=k, headers=h, timestamp=t, partition=0,
                                            on_delivery=lambda err, msg: acked.append(err or msg.offset()))
        assert self.confluent_producer.flush(READ_TIMEOUT_S) == 0
        assert all(isinstance(o, int) for o in acked), acked
        return acked

    def read_raylog(self, offset: int, count: int) -> list[tuple]:
        self.raylog_consumer.seek(RaylogTP(self.topic, 0), offset)
        got = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for batch in self.raylog_consumer.poll(timeout_ms=200).values():
                got.extend((r.key, r.value, list(r.headers or []), r.timestamp, r.offset) for r in batch)
        return got[:count]

    def read_kafka_python(self, offset: int, count: int) -> list[tuple]:
        self.kafka_consumer.seek(self.kafka_tp, offset)
        got = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for batch in self.kafka_consumer.poll(timeout_ms=200).values():
                got.extend((r.key, r.value, [tuple(h) for h in r.headers], r.timestamp, r.offset) for r in batch)
        return got[:count]

    def read_confluent(self, offset: int, count: int) -> list[tuple]:
        import confluent_kafka

        self.confluent_consumer.assign([confluent_kafka.TopicPartition(self.topic, 0, offset)])
        got = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for m in self.confluent_consumer.consume(count - len(got), 0.2):
                assert m.error() is None, m.error()
                got.append((m.key(), m.value(), list(m.headers() or []), m.timestamp()[1], m.offset()))
        return got[:count]


@pytest.fixture(scope="module")
def paths(cluster):
    made = Paths(cluster, cluster.bootstrap_servers)
    yield made
    made.close()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=produced())
def test_every_record_survives_every_producer_and_consumer_exactly(paths, case):
    producer, rows = case
    offsets = paths.send(producer, rows)
    assert offsets == list(range(offsets[0], offsets[0] + len(rows))), offsets
    expected = [(k, v, [tuple(x) for x in h], t, o) for (k, v, h, t), o in zip(rows, offsets)]
    for reader in (paths.read_raylog, paths.read_kafka_python, paths.read_confluent):
        assert reader(offsets[0], len(rows)) == expected, (producer, reader.__name__)
