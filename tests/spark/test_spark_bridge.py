"""Spark through RayDP on a real local Ray, reading and writing raylog topics (issues 15, 20).

Spark starts once for the module (about 15 s): a RayDP app master and one executor on the
same Ray as raylog's replicas; every read and write goes through the connector
(format "raylog"), which calls the replicas' actors from Spark's JVMs.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time
import uuid

import pytest
import ray
from pyspark.errors import StreamingQueryException

import spark_bridge
from raylog.errors import (IllegalStateError, InvalidConfigError, InvalidRecordError, OffsetOutOfRangeError,
                           UnknownTopicOrPartitionError)
from raylog.consumer.group_member import coordinator_for
from raylog.records import TopicPartition
from tests.integration.conftest import wait_for
from tests.spark.conftest import SPARK_APP
from tests.support.spark_rows import NOW, as_rows, produce_numbered, read_everything, rows
from tests.support.topics import end_offsets, fresh_topic

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]


def offsets_of(df) -> set[tuple[int, int]]:
    return {(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()}


# --- round trip ---------------------------------------------------------------------------------


def test_a_100k_record_round_trip_keeps_keys_values_headers_timestamps_and_partitions(cluster, spark, seed):
    rng = random.Random(seed)
    n = 100_000
    source, copy = fresh_topic(cluster, 4), fresh_topic(cluster, 4)
    values = [rng.randbytes(rng.randint(0, 120)) for _ in range(n)]
    keys = [None if i % 10 == 0 else b"key-%d" % rng.randrange(5000) for i in range(n)]
    headers = [[("trace", b"%d" % i), ("src", b"")] if i % 3 == 0 else None for i in range(n)]
    stamps = [NOW - rng.randrange(3_600_000) for _ in range(n)]
    producer = cluster.producer(linger_ms=5)
    producer.send_batch(source, values, keys=keys, headers=headers, timestamps_ms=stamps).get(60)
    producer.close()
    expected = as_rows(read_everything(cluster, source, n))

    df = spark_bridge.read(spark, source, include_headers=True)
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int,"
                                        "headers:array<struct<key:string,value:binary>>>")
    assert rows(df) == expected

    written = spark_bridge.write(df.select("key", "value", "headers", "partition", "timestamp"), topic=copy)
    assert written == n
    back = spark_bridge.read(spark, copy, include_headers=True)
    assert rows(back) == expected
    assert {r["topic"] for r in back.select("topic").distinct().collect()} == {copy}


# --- options --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def numbered(cluster):
    """3 partitions x 20 records; record i of each partition at NOW + 10 * i ms."""
    topic = fresh_topic(cluster, 3)
    produce_numbered(cluster, topic, [20] * 3)
    return topic


def expect(**per_partition) -> set[tuple[int, int]]:
    return {(int(p[1:]), o) for p, r in per_partition.items() for o in r}


def test_json_offset_ranges_give_exactly_those_rows(spark, numbered):
    t = numbered
    df = spark_bridge.read(spark, t, starting_offsets=json.dumps({t: {"0": 5, "1": -2, "2": -2}}),
                           ending_offsets=json.dumps({t: {"0": 12, "2": -1}}))
    assert offsets_of(df) == expect(p0=range(5, 12), p1=range(20), p2=range(20))
    # Spark's own camelCase names, and -1 for latest in the end JSON.
    df = spark_bridge.read(spark, t, startingOffsets=json.dumps({t: {"0": -2, "1": -2, "2": 18}}),
                           endingOffsets=json.dumps({t: {"0": 1, "1": 0, "2": -1}}))
    assert offsets_of(df) == expect(p0=range(0, 1), p2=range(18, 20))
    # Starting JSON must name every partition, as Spark's Kafka source requires.
    with pytest.raises(InvalidConfigError, match=f"leaves out {t}-0, {t}-1"):
        spark_bridge.read(spark, t, startingOffsets=json.dumps({t: {"2": 18}})).count()


def test_assign_and_subscribe_pattern_choose_partitions_and_topics(spark, numbered):
    t = numbered
    assert offsets_of(spark_bridge.read(spark, assign=json.dumps({t: [1]}))) == expect(p1=range(20))
    pattern = spark_bridge.read(spark, subscribe_pattern=t.replace("-", "."))
    assert {r["topic"] for r in pattern.select("topic").distinct().collect()} == {t}
    with pytest.raises(UnknownTopicOrPartitionError, match="has partitions 0..2, not \\[7\\]"):
        spark_bridge.read(spark, assign=json.dumps({t: [7]}))
    with pytest.raises(UnknownTopicOrPartitionError, match="'no-such-topic': it does not exist"):
        spark_bridge.read(spark, "no-such-topic")


def test_timestamps_choose_the_first_record_at_or_after_them(spark, numbered):
    t = numbered
    df = spark_bridge.read(spark, t, starting_timestamp=NOW + 55, ending_timestamp=NOW + 150)
    assert offsets_of(df) == expect(p0=range(6, 15), p1=range(6, 15), p2=range(6, 15))
    df = spark_bridge.read(spark, t, starting_offsets_by_timestamp=json.dumps({t: {"1": NOW + 100}}),
                           ending_offsets_by_timestamp=json.dumps({t: {"0": NOW + 30}}))
    assert offsets_of(df) == expect(p0=range(0, 3), p1=range(10, 20), p2=range(20))
    with pytest.raises(OffsetOutOfRangeError, match="no record at or after starting timestamp"):
        spark_bridge.read(spark, t, starting_timestamp=NOW + 10**9)
    late = spark_bridge.read(spark, t, starting_timestamp=NOW + 10**9, starting_offsets_by_timestamp_strategy="latest")
    assert late.count() == 0


def test_min_partitions_splits_ranges_over_more_tasks_with_the_same_rows(spark, numbered):
    whole = spark_bridge.read(spark, numbered)
    split = spark_bridge.read(spark, numbered, min_partitions=9)
    assert whole.rdd.getNumPartitions() == 3
    assert split.rdd.getNumPartitions() >= 9
    assert rows(split) == rows(whole)
    assert split.count() == 60


def test_options_spark_refuses_are_refused(spark, numbered):
    with pytest.raises(InvalidConfigError, match="'latest' is not allowed for a batch read"):
        spark_bridge.read(spark, numbered, starting_offsets="latest")
    with pytest.raises(InvalidConfigError, match="-2 \\(earliest\\) is not allowed"):
        spark_bridge.read(spark, numbered, ending_offsets=json.dumps({numbered: {"0": -2}}))
    with pytest.raises(InvalidConfigError, match="unknown read options: startingoffset"):
        spark_bridge.read(spark, numbered, startingoffset="earliest")


# --- the high watermark -----------------------------------------------------------------------------


def test_a_read_while_a_producer_writes_returns_a_committed_prefix_fixed_at_planning(cluster, spark):
    topic = fresh_topic(cluster, 2)
    stop = threading.Event()

    def write():
        producer = cluster.producer(linger_ms=2)
        i = 0
        while not stop.is_set():
            producer.send_batch(topic, [b"%d" % (i + j) for j in range(200)], keys=[b"k%d" % j for j in range(200)])
            i += 200
            time.sleep(0.01)
        producer.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        time.sleep(2)
        before = end_offsets(cluster, topic)
        df = spark_bridge.read(spark, topic)
        after = end_offsets(cluster, topic)
        first = rows(df)
        time.sleep(1)
        again = rows(df)
    finally:
        stop.set()
        writer.join(30)
    assert first == again  # planned once: later writes do not appear in the same DataFrame
    per_partition: dict[int, list[int]] = {}
    for p, offset, *_ in first:
        per_partition.setdefault(p, []).append(offset)
    for p, offsets in per_partition.items():
        tp = TopicPartition(topic, p)
        assert offsets == list(range(len(offsets)))  # no gap, from the start
        assert before[tp] <= len(offsets) <= after[tp]  # the high watermark at planning
    final = as_rows(read_everything(cluster, topic, sum(end_offsets(cluster, topic).values())), with_headers=False)
    prefix = [r for r in final if r[1] < len(per_partition.get(r[0], []))]
    assert [r[:6] for r in first] == [r[:6] for r in prefix]


# --- data loss ----------------------------------------------------------------------------------


def test_fail_on_data_loss_errors_or_skips_ahead_when_the_start_was_deleted(cluster, spark, caplog):
    topic = fresh_topic(cluster, 1)
    produce_numbered(cluster, topic, [100])
    cluster.admin().delete_records({TopicPartition(topic, 0): 40})
    start = json.dumps({topic: {"0": 10}})
    with pytest.raises(OffsetOutOfRangeError, match=f"{topic}-0: records 10..39 are gone \\(offset 10 is below the log start offset 40"):
        spark_bridge.read(spark, topic, starting_offsets=start)
    with caplog.at_level(logging.WARNING, logger="raylog.spark_bridge.read"):
        df = spark_bridge.read(spark, topic, starting_offsets=start, fail_on_data_loss=False)
    assert offsets_of(df) == expect(p0=range(40, 100))
    assert f"{topic}-0: records 10..39 are gone" in caplog.text


def test_records_deleted_after_planning_fail_the_job_unless_told_to_skip(cluster, spark):
    topic = fresh_topic(cluster, 1)
    produce_numbered(cluster, topic, [100])
    strict = spark_bridge.read(spark, topic)
    lenient = spark_bridge.read(spark, topic, fail_on_data_loss=False)
    cluster.admin().delete_records({TopicPartition(topic, 0): 30})
    with pytest.raises(Exception, match="records 0..29 are gone \\(offset 0 is below the log start offset 30"):
        strict.count()
    assert offsets_of(lenient) == expect(p0=range(30, 100))
    assert lenient.count() == 70, "COUNT(*) from offsets skips the deleted records too"


# --- writes -------------------------------------------------------------------------------------


def test_a_wrong_column_type_fails_naming_the_column_and_writes_nothing(cluster, spark):
    topic = fresh_topic(cluster, 2)
    bad_value = spark.createDataFrame([(1, b"k")], "value int, key binary")
    with pytest.raises(InvalidRecordError, match="column 'value' must be binary or string, got int"):
        spark_bridge.write(bad_value, topic=topic)
    bad_key = spark.createDataFrame([(b"v", 1.5)], "value binary, key double")
    with pytest.raises(InvalidRecordError, match="column 'key' must be binary or string, got double"):
        spark_bridge.write(bad_key, topic=topic)
    bad_partition = spark.createDataFrame([(b"v", "0")], "value binary, partition string")
    with pytest.raises(InvalidRecordError, match="column 'partition' must be int, got string"):
        spark_bridge.write(bad_partition, topic=topic)
    with pytest.raises(InvalidRecordError, match="no 'value' column"):
        spark_bridge.write(spark.createDataFrame([(b"k",)], "key binary"), topic=topic)
    with pytest.raises(InvalidConfigError, match="acks"):
        spark_bridge.write(spark.createDataFrame([(b"v",)], "value binary"), topic=topic, acks=7)
    assert sum(end_offsets(cluster, topic).values()) == 0


def test_topic_and_partition_columns_route_rows_and_a_topic_option_wins(cluster, spark):
    a, b = fresh_topic(cluster, 3), fresh_topic(cluster, 3)
    data = [(f"v{i}", a if i % 2 else b, i % 3) for i in range(60)]
    df = spark.createDataFrame(data, "value string, topic string, partition int")
    assert spark_bridge.write(df) == 60
    got_a = rows(spark_bridge.read(spark, a))
    assert sorted(r[3] for r in got_a) == sorted(f"v{i}".encode() for i in range(60) if i % 2)
    assert all(int(r[3][1:]) % 3 == r[0] for r in got_a)
    assert spark_bridge.write(df, topic=b) == 60  # the option wins over the column
    assert spark_bridge.read(spark, b).count() == 30 + 60
    with pytest.raises(UnknownTopicOrPartitionError):
        spark_bridge.write(df, topic="no-such-topic")


def test_a_retried_write_task_appends_again_and_the_count_is_the_committed_attempts(cluster, spark, tmp_path):
    """Finding 6: each task attempt is its own idempotent producer, so an attempt that fails after
    some of its batches were acknowledged leaves them in the log and Spark's retry appends them
    again: at-least-once, as Spark's Kafka sink. write() counts what the attempts Spark committed
    acknowledged. The first attempt fails only once some of its records are in the log: a thread
    here watches the log's end offset and leaves a file the Python worker waits on."""
    from pyspark import TaskContext

    topic = fresh_topic(cluster, 1)
    landed, done = str(tmp_path / "landed"), threading.Event()

    def watch():
        while not done.is_set():
            if end_offsets(cluster, topic)[TopicPartition(topic, 0)] > 0:
                open(landed, "w").close()
                return
            done.wait(0.05)

    def fail_first_attempt(rows):
        for i, row in enumerate(rows):
            if TaskContext.get().attemptNumber() == 0 and i == 600:
                # Python's output to the JVM is buffered by 64 KiB: 1 KiB rows have flushed most of
                # the 600 before; the cap only keeps a broken sink from hanging the suite.
                deadline = time.monotonic() + 300
                while not os.path.exists(landed) and time.monotonic() < deadline:
                    time.sleep(0.05)
                raise RuntimeError("the first attempt fails after some of its records landed")
            yield row

    values = spark.createDataFrame([(b"%04d" % i + bytes(1020),) for i in range(1000)], "value binary").coalesce(1)
    df = spark.createDataFrame(values.rdd.mapPartitions(fail_first_attempt), values.schema)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert spark_bridge.write(df, topic=topic, batch_size=16 * 1024) == 1000
    finally:
        done.set()
        watcher.join()
    got = [bytes(r["value"])[:4] for r in spark_bridge.read(spark, topic).select("value").collect()]
    assert set(got) == {b"%04d" % i for i in range(1000)}
    assert len(got) > 1000, "the failed attempt's acknowledged records stay: at-least-once"


# --- streaming -------------------------------------------------------------------------------------


def test_a_stream_redelivers_a_batch_whose_process_raised_and_loses_nothing(cluster, spark):
    topic = fresh_topic(cluster, 3)
    produce_numbered(cluster, topic, [100] * 3)
    group = f"stream-{uuid.uuid4().hex[:6]}"
    seen: list[tuple[int, list]] = []
    failed = []

    def process(df, batch_id):
        keys = [bytes(r["key"]) for r in df.select("key").collect()]
        if batch_id == 1 and not failed:
            failed.append(keys)
            raise RuntimeError("the sink is down")
        seen.append((batch_id, keys))

    query = spark_bridge.stream(spark, topic, group, process, starting_offsets="earliest",
                                max_offsets_per_trigger=100, trigger_interval_s=0.2, retry_backoff_s=0.1)
    try:
        deadline = time.monotonic() + 120
        while sum(len(k) for _, k in seen) < 300 and time.monotonic() < deadline and query.isActive:
            time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None
    batch_ids = [b for b, _ in seen]
    assert batch_ids == list(range(len(seen))) and len(seen) >= 3
    assert seen[1][1] == failed[0]  # the same records again, under the same batch id
    delivered = [k for _, keys in seen for k in keys]
    assert sorted(delivered) == sorted(b"%d:%d" % (p, i) for p in range(3) for i in range(100))
    sizes = [len(k) for _, k in seen]
    assert all(s <= 100 for s in sizes)
    committed = cluster.admin().list_consumer_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 100, 1: 100, 2: 100}
    assert json.loads(committed[TopicPartition(topic, 0)].metadata) == {"batch_id": len(seen) - 1}


def test_a_stream_rides_out_its_group_coordinator_being_killed(cluster, spark):
    """The first 30-minute chaos run found the stream ended by a coordinator restart (a retriable
    error while planning or committing a batch): it must retry, as Spark's Kafka source rides out
    a broker failover, and deliver every record."""
    topic = fresh_topic(cluster, 3)
    produce_numbered(cluster, topic, [100] * 3)
    group = f"stream-{uuid.uuid4().hex[:6]}"
    seen: list[tuple[int, list]] = []

    def process(df, batch_id):
        seen.append((batch_id, [bytes(r["key"]) for r in df.select("key").collect()]))
        time.sleep(0.3)  # the batches stay small and many while the coordinator is gone

    coordinator = coordinator_for(cluster, group, 30)
    query = spark_bridge.stream(spark, topic, group, process, starting_offsets="earliest",
                                max_offsets_per_trigger=15, trigger_interval_s=0.1, retry_backoff_s=0.2)
    try:
        wait_for(lambda: seen or not query.isActive, timeout_s=120)
        for _ in range(2):
            pid = ray.get(coordinator.ping.remote(), timeout=60)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: ray.get(coordinator.ping.remote(), timeout=10) != pid, timeout_s=60)
        deadline = time.monotonic() + 180
        while len({k for _, keys in seen for k in keys}) < 300 and time.monotonic() < deadline and query.isActive:
            time.sleep(0.2)
        assert query.isActive, f"the stream ended: {query.exception()!r}"
    finally:
        query.stop()
    delivered = {k for _, keys in seen for k in keys}
    assert delivered == {b"%d:%d" % (p, i) for p in range(3) for i in range(100)}
    by_id: dict[int, list] = {}
    for batch_id, keys in seen:
        assert by_id.setdefault(batch_id, keys) == keys, "a batch run again has the same records"
    assert sorted(by_id) == list(range(len(by_id))), "batch ids without a gap"
    committed = cluster.admin().list_consumer_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 100, 1: 100, 2: 100}


def test_a_stream_restarted_after_a_crash_runs_the_planned_batch_again_then_continues(cluster, spark):
    topic = fresh_topic(cluster, 2)
    produce_numbered(cluster, topic, [50] * 2)
    group = f"stream-{uuid.uuid4().hex[:6]}"
    first: list[tuple[int, set]] = []

    def crashing(df, batch_id):
        if batch_id == 2:
            raise RuntimeError("crash")
        first.append((batch_id, offsets_of(df)))

    query = spark_bridge.stream(spark, topic, group, crashing, starting_offsets="earliest",
                                max_offsets_per_trigger=30, trigger_interval_s=0.1, max_batch_retries=0)
    with pytest.raises(StreamingQueryException, match="crash"):
        query.awaitTermination(120)
    assert [b for b, _ in first] == [0, 1]
    member = cluster.consumer(group_id=group, enable_auto_commit=False)
    member.subscribe([topic])
    try:
        # The group must have an active member before the stream is asked for: wait for its join.
        wait_for(lambda: member.poll(timeout_ms=200) is not None and member.assignment(), timeout_s=120)
        with pytest.raises(IllegalStateError, match="active members"):
            spark_bridge.stream(spark, topic, group, crashing)
    finally:
        member.close(autocommit=False)

    second: list[tuple[int, set]] = []
    query = spark_bridge.stream(spark, topic, group, lambda df, b: second.append((b, offsets_of(df))),
                                trigger_interval_s=0.1)
    try:
        deadline = time.monotonic() + 120
        while sum(len(o) for _, o in first + second) < 100 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    assert second[0][0] == 2
    everything = [o for _, offs in first + second for o in offs]
    assert sorted(everything) == sorted((p, i) for p in range(2) for i in range(50))


def forge_first_batch_end(tmp_path, topic: str, end: int) -> None:
    """The checkpoint's batch 0 made to end at ``end`` (Kafka's plain JSON: no epoch to check it by)
    and left uncommitted, as after a crash."""
    log = tmp_path / "checkpoint" / "offsets" / "0"
    version, meta, _ = log.read_text().splitlines()
    log.write_text("\n".join([version, meta, json.dumps({topic: {"0": end}})]))
    for made in ("offsets/.0.crc", "commits/0", "commits/.0.crc"):  # Hadoop's checksums of what changed
        (tmp_path / "checkpoint" / made).unlink()


def test_a_planned_batch_ending_past_a_truncated_log_fails_at_once_or_reads_what_is_left(cluster, spark, tmp_path):
    """Issue 32, finding 2: a batch planned to end at 15 over a log its current leader ends at 10 is
    a log that lost records 10..14 (after a clean election the new leader holds every acknowledged
    record; a lagging high watermark is told apart by the batch's epochs, which Kafka's plain JSON
    lacks). Before, its tasks waited 120 s for them on every attempt and failed. Now: with
    failOnDataLoss the query fails at once naming them; without, the batch reads 0..9 with a warning.
    (That the next batch starts at 10, so records written later there are read once, is
    test_connector's test_a_stream_started_past_the_log_end_..., through the same decision.)"""
    topic = fresh_topic(cluster, 1)
    produce_numbered(cluster, topic, [10])
    group = f"stream-{uuid.uuid4().hex[:6]}"
    checkpoint = str(tmp_path / "checkpoint")
    first: list[tuple[int, set]] = []
    query = spark_bridge.stream(spark, topic, group, lambda df, b: first.append((b, offsets_of(df))),
                                checkpoint_location=checkpoint, starting_offsets="earliest", trigger_interval_s=0.1)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert first == [(0, {(0, i) for i in range(10)})]
    forge_first_batch_end(tmp_path, topic, 15)

    strict = spark_bridge.stream(spark, topic, group, lambda df, b: None, checkpoint_location=checkpoint,
                                 trigger_interval_s=0.1)
    try:
        with pytest.raises(StreamingQueryException, match="offset 15 is past the log's end 10"):
            strict.awaitTermination(60)
    finally:
        strict.stop()

    seen: list[tuple[int, set]] = []
    query = spark_bridge.stream(spark, topic, group, lambda df, b: seen.append((b, offsets_of(df))),
                                checkpoint_location=checkpoint, trigger_interval_s=0.1, fail_on_data_loss=False)
    try:
        wait_for(lambda: seen or not query.isActive, timeout_s=120)
    finally:
        query.stop()
    assert query.exception() is None
    assert seen[0] == (0, {(0, i) for i in range(10)}), "the recorded batch read what the log still holds"


# --- the session ------------------------------------------------------------------------------------


def test_stop_returns_by_force_when_raydp_hangs_and_a_new_session_starts(cluster, spark, monkeypatch):
    """Runs last (tests/spark/conftest.py puts it there): it ends the package's session the hard
    way, with RayDP's own stop hung. The stop must return without it (no clock: a stop that waited
    for RayDP would wait for the hang's end, which comes only after), its JVM and RayDP's app
    master gone."""
    import raydp
    import raydp.spark.ray_cluster_master as master

    topic = fresh_topic(cluster, 1)
    produce_numbered(cluster, topic, [10])
    hung = threading.Event()
    monkeypatch.setattr(raydp, "stop_spark", lambda *args, **kwargs: hung.wait())
    jvm = spark.sparkContext._gateway.proc
    stopper = threading.Thread(target=spark.stop, kwargs={"timeout_s": 0}, daemon=True)
    try:
        stopper.start()
        stopper.join(120)  # bounds a hang only
        assert not stopper.is_alive(), "stop() waited for RayDP's hung stop_spark"
    finally:
        hung.set()
    assert jvm.poll() is not None, "the driver's JVM outlived a forced stop"
    wait_for(lambda: _gone(SPARK_APP + master.RAYDP_SPARK_MASTER_SUFFIX), timeout_s=120,
             describe=lambda: "RayDP's app master outlived a forced stop")
    monkeypatch.undo()
    again = spark_bridge.session(app_name="raylog-tests-2")
    try:
        assert again is not spark
        assert spark_bridge.read(again, topic).count() == 10
    finally:
        again.stop(timeout_s=60)


def _gone(actor_name: str) -> bool:
    try:
        ray.get_actor(actor_name)
    except ValueError:
        return True
    return False
