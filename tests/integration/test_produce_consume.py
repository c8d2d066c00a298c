"""Producing and consuming through real replica actors on a local Ray."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import ray

import raylog
from raylog.errors import (
    InvalidPartitionError, InvalidRecordError, InvalidTopicError, NoOffsetForPartitionError, OffsetOutOfRangeError,
    RecordTooLargeError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)
from raylog.records import TopicPartition
from tests.integration.conftest import wait_for
from tests.support.topics import consume_all, end_offsets, fresh_topic

pytestmark = pytest.mark.ray


def test_topics_are_created_described_listed_and_deleted(cluster, data_root):
    admin = cluster.admin()
    name = fresh_topic(cluster, 3, retention_ms=60_000)
    (desc,) = admin.describe_topics([name])
    assert [p.partition for p in desc.partitions] == [0, 1, 2]
    assert desc.config["retention_ms"] == 60_000
    assert name in admin.list_topics()
    dirs = [p.leader.directory for p in desc.partitions]
    assert all(str(data_root) in d for d in dirs)
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topic(name, 1)
    admin.delete_topics([name])
    assert name not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics([name])


def test_records_keep_keys_headers_timestamps_and_per_partition_order(cluster):
    topic = fresh_topic(cluster, 3)
    producer = cluster.producer(linger_ms=2)
    sent = []
    for i in range(300):
        key = f"key-{i % 7}".encode()
        meta = producer.send(topic, f"value-{i}".encode(), key=key, headers=[("h", str(i).encode())],
                             timestamp_ms=1_700_000_000_000 + i)
        sent.append((key, f"value-{i}".encode(), 1_700_000_000_000 + i, meta))
    producer.flush(timeout=30)
    metas = [m.get(timeout=10) for *_, m in sent]
    assert all(m.offset >= 0 for m in metas)
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    records = consume_all(consumer, 300)
    assert len(records) == 300
    by_value = {r.value: r for r in records}
    for (key, value, ts, _), meta in zip(sent, metas):
        r = by_value[value]
        assert (r.key, r.timestamp, r.partition, r.offset) == (key, ts, meta.partition, meta.offset)
        assert r.headers == [("h", value.split(b"-")[1])]
    assert {r.partition for r in records} == {0, 1, 2}
    for p in range(3):
        values = [int(r.value.split(b"-")[1]) for r in records if r.partition == p]
        assert values == sorted(values), "a partition must keep send order"
    producer.close()
    consumer.close()


def test_plain_serialized_partitioned_and_overridden_sends_all_arrive(cluster):
    """A producer with no serializer or partitioner takes plain bytes in one Python call per record
    (issue 33); serializers, a partitioner, tombstones and a subclass's own send() go around it."""
    topic = fresh_topic(cluster, 2)

    class Counting(raylog.Producer):
        calls = 0

        def send(self, *args, **kwargs):
            Counting.calls += 1
            return super().send(*args, **kwargs)

    plain = cluster.producer()
    serialized = cluster.producer(value_serializer=lambda v: json.dumps(v).encode(), key_serializer=str.encode)
    partitioned = cluster.producer(partitioner=lambda key, partitions, available: partitions[-1])
    counting = Counting(cluster)
    futures = [plain.send(topic, b"plain"), plain.send(topic, b"keyed", key=b"k"),
               plain.send(topic, None, key=b"tombstone"), serialized.send(topic, {"n": 1}, key="json"),
               partitioned.send(topic, b"pinned", key=b"p"), counting.send(topic, b"counted")]
    metas = [f.get(timeout=30) for f in futures]
    assert Counting.calls == 1, "the subclass's send() was called, not bypassed"
    assert metas[4].partition == 1, "the partitioner chose"
    records = consume_all(cluster.consumer(topic, auto_offset_reset="earliest"), 6)
    assert sorted((r.key or b"", r.value or b"") for r in records) == sorted(
        [(b"", b"plain"), (b"k", b"keyed"), (b"tombstone", b""), (b"json", b'{"n": 1}'), (b"p", b"pinned"),
         (b"", b"counted")])
    assert (plain.send.__name__, plain.send.__doc__) == ("send", raylog.Producer.send.__doc__)
    for producer in (plain, serialized, partitioned, counting):
        producer.close()


def test_send_batch_spreads_unkeyed_records_and_consumer_reads_columns(cluster):
    topic = fresh_topic(cluster, 2)
    producer = cluster.producer(batch_size=64 * 1024)
    values = [b"%08d" % i + b"x" * 92 for i in range(20_000)]
    offsets = producer.send_batch(topic, values).offsets(timeout=60)
    assert (offsets >= 0).all()
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        for chunk in consumer.poll_batch(timeout_ms=500):
            assert list(chunk.offsets) == sorted(chunk.offsets)
            got.extend(chunk.value_list())
    assert sorted(got) == values
    producer.close()


def test_send_batch_of_arrow_arrays_equals_the_same_lists_and_pins_partitions_per_record(cluster):
    import pyarrow as pa

    from raylog.producer.partitioner import partition_for_key

    listed, arrowed = fresh_topic(cluster, 3), fresh_topic(cluster, 3)
    n = 3000
    values = [None if i % 97 == 0 else b"value-%d" % i for i in range(n)]
    keys = [None if i % 5 == 0 else b"key-%d" % (i % 40) for i in range(n)]
    pinned = [None if i % 3 else i % 3 for i in range(n)]  # every third record pinned to partition 0
    producer = cluster.producer()
    producer.send_batch(listed, values, keys=keys, partition=pinned, timestamps_ms=1_700_000_000_000).get(30)
    producer.send_batch(arrowed, pa.array(values, pa.binary()), keys=pa.array([k and k.decode() for k in keys]),
                        partition=pinned, timestamps_ms=1_700_000_000_000).get(30)
    by_topic = {}
    for topic in (listed, arrowed):
        consumer = cluster.consumer(topic, auto_offset_reset="earliest")
        records = consume_all(consumer, n)
        consumer.close()
        by_topic[topic] = sorted(((r.partition, r.offset, r.key, r.value) for r in records), key=lambda r: r[:2])
    # Unkeyed, unpinned records go to a sticky partition chosen at random, so offsets may differ
    # between the topics; what must match is the records, their routing and per-partition order.
    assert len(by_topic[listed]) == len(by_topic[arrowed]) == n
    assert sorted(map(repr, (r[2:] for r in by_topic[listed]))) == sorted(map(repr, (r[2:] for r in by_topic[arrowed])))
    for topic in (listed, arrowed):
        indexes = [(p, int(v[6:])) for p, _, _, v in by_topic[topic] if v]
        for part in range(3):
            in_partition = [i for p, i in indexes if p == part]
            assert in_partition == sorted(in_partition)
    for p, _, key, value in by_topic[arrowed] + by_topic[listed]:
        if value is None:
            continue  # a null value hides which record this is, so not whether it was pinned
        i = int(value[6:])
        if pinned[i] is not None:
            assert p == 0
        elif key is not None:
            assert p == partition_for_key(key, 3)
    with pytest.raises(InvalidPartitionError, match="has partitions 0..2, not 5"):
        producer.send_batch(listed, values[:2], partition=[5, None])
    with pytest.raises(InvalidRecordError, match="2 partitions for 3 values"):
        producer.send_batch(listed, values[:3], partition=[0, 1])
    with pytest.raises(InvalidRecordError, match="values must be a binary or string array, got int64"):
        producer.send_batch(listed, pa.array([1, 2]))
    producer.close()


def test_long_poll_returns_when_data_arrives_and_times_out_otherwise(cluster):
    topic = fresh_topic(cluster, 1)
    # A fetch parked longer than poll()'s timeout: "late" is returned only if its arrival wakes it.
    consumer = cluster.consumer(topic, auto_offset_reset="latest", fetch_max_wait_ms=120_000)
    start = time.monotonic()
    assert consumer.poll(timeout_ms=300) == {}
    assert time.monotonic() - start >= 0.3
    producer = cluster.producer(linger_ms=0)
    timer = threading.Timer(0.5, lambda: producer.send(topic, b"late").get(timeout=10))
    timer.start()
    records = consumer.poll(timeout_ms=60_000)
    timer.join()
    assert [r.value for recs in records.values() for r in recs] == [b"late"], (
        "the fetch must return when data arrives, not at fetch_max_wait_ms")
    producer.close()


def test_offsets_for_times_finds_first_record_at_or_after_timestamp(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"a", b"b", b"c"], timestamps_ms=[1000, 2000, 3000]).wait(timeout=30)
    consumer = cluster.consumer(topic)
    tp = TopicPartition(topic, 0)
    found = consumer.offsets_for_times({tp: 1500})[tp]
    assert (found.offset, found.timestamp) == (1, 2000)
    assert consumer.offsets_for_times({tp: 3000})[tp].offset == 2
    assert consumer.offsets_for_times({tp: 3001})[tp] is None
    producer.close()


def test_a_second_producer_process_writes_the_same_topic_and_its_connect_freezes_the_startup_heap(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"parent-%d" % i for i in range(100)]).wait(timeout=30)
    address = ray.get_runtime_context().gcs_address
    script = (
        "import gc, raylog, sys\n"
        "assert gc.get_freeze_count() == 0\n"
        f"c = raylog.connect(address={address!r})\n"
        "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()  # Ray's and raylog's modules\n"
        "p = c.producer()\n"
        f"p.send_batch({topic!r}, [b'child-%d' % i for i in range(100)]).wait(timeout=60)\n"
        "p.close()\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    values = [r.value for r in consume_all(consumer, 200)]
    assert sorted(values) == sorted([b"parent-%d" % i for i in range(100)] + [b"child-%d" % i for i in range(100)])
    producer.close()


# --- bad input: a clear raylog error, and nothing written ------------------------------------


def test_invalid_topic_names_never_reach_the_filesystem(cluster, data_root):
    # A topic reaches the disk as its partitions' directories (<name>-<partition>). Files inside the
    # module's other topics' directories change on their own meanwhile (a segment roll and its
    # producer snapshot, a checkpoint's temporary file), so the directories are compared, and no
    # entry anywhere may carry a refused name.
    def directories() -> list[str]:
        return sorted(str(p.relative_to(data_root)) for p in data_root.rglob("*") if p.is_dir())

    admin = cluster.admin()
    refused = ["", ".", "..", "a" * 250, "has space", "slash/../x", "ünïcode"]
    valid = fresh_topic(cluster, 1)
    before = directories()
    assert any(d.endswith(f"/{valid}-0") for d in before), "the listing sees a topic's directory"
    for bad in refused:
        with pytest.raises(InvalidTopicError):
            admin.create_topic(bad, 1)
        with pytest.raises(InvalidTopicError):
            cluster.producer().send(bad, b"x")
    assert directories() == before
    marks = ("a" * 250, "has space", "ünïcode", "slash", "x-")
    assert [p for p in data_root.rglob("*") if p.name.startswith(marks)] == []


def test_unknown_topic_and_partition_are_refused(cluster):
    producer = cluster.producer()
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("no-such-topic", b"x")
    topic = fresh_topic(cluster, 2)
    with pytest.raises(InvalidPartitionError):
        producer.send(topic, b"x", partition=2)
    with pytest.raises(InvalidPartitionError):
        producer.send(topic, b"x", partition=-1)
    producer.flush(timeout=10)
    assert end_offsets(cluster, topic) == {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0}
    producer.close()


def test_record_too_large_is_refused_by_producer_and_by_broker(cluster):
    topic = fresh_topic(cluster, 1, max_message_bytes=10_000)
    producer = cluster.producer(max_request_size=5_000)
    with pytest.raises(RecordTooLargeError):
        producer.send(topic, b"x" * 6_000)
    with pytest.raises(RecordTooLargeError):
        producer.send_batch(topic, [b"ok", b"x" * 6_000])
    big = cluster.producer(max_request_size=1_000_000, compression_type="none")
    future = big.send(topic, b"y" * 50_000)
    with pytest.raises(RecordTooLargeError):
        future.get(timeout=30)
    assert end_offsets(cluster, topic) == {TopicPartition(topic, 0): 0}
    producer.close()
    big.close()


def test_offset_out_of_range_follows_auto_offset_reset(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"a", b"b", b"c"]).wait(timeout=30)
    tp = TopicPartition(topic, 0)

    strict = cluster.consumer(auto_offset_reset="none")
    strict.assign([tp])
    with pytest.raises(NoOffsetForPartitionError):
        strict.poll(timeout_ms=100)
    strict.seek(tp, 50)
    with pytest.raises(OffsetOutOfRangeError):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            strict.poll(timeout_ms=200)

    earliest = cluster.consumer(auto_offset_reset="earliest")
    earliest.assign([tp])
    earliest.seek(tp, 50)
    assert [r.value for r in consume_all(earliest, 3)] == [b"a", b"b", b"c"]

    latest = cluster.consumer(auto_offset_reset="latest")
    latest.assign([tp])
    latest.seek(tp, 50)
    polled = []

    def reset_to_latest() -> bool:  # the out-of-range answer can take longer than one poll to come
        polled.append(latest.poll(timeout_ms=100))
        return latest.position(tp) == 3

    wait_for(reset_to_latest, timeout_s=60)
    assert all(p == {} for p in polled), "nothing is read past the reset to the log end"
    producer.close()


def test_pause_stops_records_until_resume(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"a", b"b"]).wait(timeout=30)
    tp = TopicPartition(topic, 0)
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    consumer.pause(tp)
    assert consumer.poll(timeout_ms=500) == {}
    assert consumer.paused() == {tp}
    consumer.resume(tp)
    assert [r.value for r in consume_all(consumer, 2)] == [b"a", b"b"]
    consumer.seek_to_beginning(tp)
    assert consumer.position(tp) == 0
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 2
    producer.close()


# --- faults: acknowledged records survive ------------------------------------------------------


def test_killed_replica_process_restarts_and_keeps_acknowledged_records(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer(linger_ms=0)
    acked = [producer.send(topic, b"before-%d" % i).get(timeout=30).offset for i in range(50)]
    info = cluster.admin().describe_partitions(topic)[0]
    import os
    import signal

    os.kill(info["pid"], signal.SIGKILL)
    futures = [producer.send(topic, b"after-%d" % i) for i in range(50)]
    acked += [f.get(timeout=60).offset for f in futures]
    after = cluster.admin().describe_partitions(topic)[0]
    assert after["pid"] != info["pid"] and after["ray_node_id"] == info["ray_node_id"]
    assert after["recovered_cleanly"] is False
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    records = consume_all(consumer, 100)
    assert [r.offset for r in records] == list(range(100)) == sorted(acked)
    assert [r.value for r in records] == [b"before-%d" % i for i in range(50)] + [b"after-%d" % i for i in range(50)]
    producer.close()


def test_controller_restart_keeps_metadata_and_traffic_goes_on(cluster):
    from raylog.naming import CONTROLLER_ACTOR_NAME

    topic = fresh_topic(cluster, 2)
    producer = cluster.producer()
    producer.send_batch(topic, [b"one", b"two"], partition=0).wait(timeout=30)
    topics_before = cluster.admin().list_topics()
    controller = ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog")
    old_pid = ray.get(controller.ping.remote())
    ray.kill(controller, no_restart=False)
    producer.send_batch(topic, [b"three"], partition=0).wait(timeout=30)

    def restarted():
        return ray.get(controller.ping.remote(), timeout=5) != old_pid

    wait_for(restarted, timeout_s=60)
    assert cluster.admin().list_topics() == topics_before
    assert len(cluster.admin().describe_topics([topic])[0].partitions) == 2
    fresh = raylog.connect()
    fresh.producer().send_batch(topic, [b"four"], partition=0).wait(timeout=30)
    consumer = fresh.consumer(topic, auto_offset_reset="earliest")
    assert sorted(r.value for r in consume_all(consumer, 4)) == sorted([b"one", b"two", b"three", b"four"])
    producer.close()


def test_delete_records_moves_the_beginning_and_refuses_offsets_past_the_high_watermark(cluster):
    topic = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(10)]).wait(timeout=30)
    admin = cluster.admin()
    tp = TopicPartition(topic, 0)
    assert admin.delete_records({tp: 4}) == {tp: 4}
    assert admin.beginning_offsets([tp]) == {tp: 4}
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp: 11})
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    assert [r.offset for r in consume_all(consumer, 6)] == list(range(4, 10))
    producer.close()


def test_a_producer_that_never_flushes_keeps_no_outcome_of_completed_sends(cluster):
    """Issue 19, finding 14: a long-running send loop without flush() must not hold one result per
    batch it ever sent."""
    import gc

    from raylog.producer.futures import ProduceResult

    topic = fresh_topic(cluster)
    producer = cluster.producer(linger_ms=0)
    for i in range(3000):
        producer.send(topic, b"%d" % i).get(timeout=30)
    gc.collect()
    kept = sum(1 for obj in gc.get_objects() if type(obj) is ProduceResult)
    assert kept < 50, f"{kept} results of completed sends are still held"
    producer.close()
