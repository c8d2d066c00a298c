"""make demo: the whole pipeline on a local Ray, with each step's throughput.

1. raylog starts on a local Ray (loopback only) and creates a 4-partition topic;
2. a Spark job through RayDP writes a DataFrame of events into it with
   ``df.write.format("raylog")`` (the connector's executors send record batches to the
   partition leaders' actors);
3. a consumer group of two Ray actors reads every event, committing as it goes;
4. ``spark.read.format("raylog")`` aggregates the events per key (printed as a table);
5. a streaming query, ``spark.readStream.format("raylog")`` with Trigger.AvailableNow and
   maxOffsetsPerTrigger, copies the topic into parquet in micro-batches, checkpointed;
6. the group's lag and the partitions' offsets are printed from the admin API.

    python -m bench.demo [--records 1000000]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import tempfile
import time

TOPIC = "demo-events"
GROUP = "demo-readers"
PARTITIONS = 4
USERS = 1000


def member_class():
    import ray

    @ray.remote(num_cpus=0)
    class Reader:
        """One member of the demo's consumer group: polls columns, counts, commits."""

        def __init__(self, namespace: str):
            import raylog

            self.consumer = raylog.connect(namespace=namespace).consumer(
                group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False)
            self.consumer.subscribe([TOPIC])

        def read(self, stop_when_group_has: int, counter) -> int:
            import ray as _ray

            mine = 0
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 10:
                chunks = self.consumer.poll_batch(timeout_ms=200)
                got = sum(len(c) for c in chunks)
                if got:
                    mine += got
                    self.consumer.commit_async()
                    idle_since = time.monotonic()
                    if _ray.get(counter.add.remote(got)) >= stop_when_group_has:
                        break
                elif _ray.get(counter.total.remote()) >= stop_when_group_has:
                    break
            self.consumer.close()
            return mine

    @ray.remote(num_cpus=0)
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k: int) -> int:
            self.n += k
            return self.n

        def total(self) -> int:
            return self.n

    return Reader, Counter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    import raylog
    import spark_bridge
    from raylog.records import TopicPartition

    began = time.monotonic()
    data_root = tempfile.mkdtemp(prefix="raylog-demo-")
    # Ray's INFO start-up lines and its workers' output (RayDP's JVMs print Ray's native INFO lines)
    # stay in Ray's log files, printed below; raylog's own events are in raylog.log there.
    cluster = raylog.connect(data_root=data_root, num_cpus=2, cluster_config={"offsets_topic_num_partitions": 2},
                             logging_level=logging.WARNING, log_to_driver=False)
    try:
        admin = cluster.admin()
        admin.create_topic(TOPIC, PARTITIONS)
        print(f"raylog on a local Ray: topic {TOPIC!r} with {PARTITIONS} partitions under {data_root}")
        node = ray._private.worker.global_worker.node
        if getattr(node, "webui_url", None):
            print(f"Ray's dashboard: http://{node.webui_url}; metrics: http://127.0.0.1:{node.metrics_export_port}"
                  f"/metrics (docs/metrics.md); logs: {node.get_logs_dir_path()}")
        # The group's members join now, while Spark starts: the coordinator has split the partitions
        # between them by the time they read. Joining as the reads began, the first member's process
        # (a second or so to start here) read everything before the second had joined.
        Reader, Counter = member_class()
        counter = Counter.remote()
        readers = [Reader.remote(cluster.config.namespace) for _ in range(2)]
        with spark_bridge.session(app_name="raylog-demo") as spark:
            print(f"Spark through RayDP up after {time.monotonic() - began:.0f}s")
            spark.sparkContext.setLogLevel("ERROR")
            events = spark.range(args.records).selectExpr(
                f"cast(concat('user-', cast(id % {USERS} as string)) as binary) AS key",
                # 100 bytes: the event number, then padding (Kafka's benchmarks use 100-byte records)
                "cast(rpad(concat('event-', cast(id as string), ':'), 100, 'x') as binary) AS value")
            t = time.monotonic()
            events.write.format("raylog").option("topic", TOPIC).save()
            elapsed = time.monotonic() - t
            written = sum(admin.end_offsets([TopicPartition(TOPIC, p) for p in range(PARTITIONS)]).values())
            print(f"1. Spark wrote {written:,} events of 100 bytes: {written / elapsed:,.0f} records/s "
                  f"({elapsed:.1f}s, acks=all; Spark's first job in a cold JVM: python -m bench.spark_bench "
                  "measures it warm)")

            t = time.monotonic()
            counts = ray.get([r.read.remote(written, counter) for r in readers])
            elapsed = time.monotonic() - t
            print(f"2. consumer group {GROUP!r} of {len(readers)} Ray actors read {sum(counts):,} events "
                  f"({' + '.join(f'{c:,}' for c in counts)}): {sum(counts) / elapsed:,.0f} records/s")

            t = time.monotonic()
            topic = spark.read.format("raylog").option("subscribe", TOPIC).load()
            per_user = (topic.groupBy("key").count()
                        .selectExpr("cast(key as string) AS user", "count AS events"))
            top = per_user.orderBy("events", "user", ascending=[False, True]).limit(5).collect()
            users = per_user.count()
            elapsed = time.monotonic() - t
            print(f"3. Spark read the topic and counted events per user: {written / elapsed:,.0f} records/s "
                  f"({elapsed:.1f}s, {users:,} users); the top 5:")
            print(f"     {'user':<12}{'events':>8}")
            for row in top:
                print(f"     {row['user']:<12}{row['events']:>8,}")

            t = time.monotonic()
            copy = os.path.join(data_root, "stream-copy")
            query = (spark.readStream.format("raylog").option("subscribe", TOPIC)
                     .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", max(1, written // 4))
                     .load().selectExpr("partition", "offset", "key", "value")
                     .writeStream.format("parquet").option("path", copy)
                     .option("checkpointLocation", os.path.join(data_root, "stream-checkpoint"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            batches = [p for p in query.recentProgress if p["numInputRows"]]
            copied = spark.read.parquet(copy).count()
            elapsed = time.monotonic() - t
            print(f"4. a streaming query (Trigger.AvailableNow) copied {copied:,} events into parquet in "
                  f"{len(batches)} micro-batches: {copied / elapsed:,.0f} records/s ({elapsed:.1f}s)")

        lag = admin.consumer_group_lag(GROUP)
        print(f"5. group {GROUP!r}: total lag {lag['total_lag']} over {len(lag['partitions'])} partitions")
        for info in admin.describe_partitions(TOPIC):
            print(f"     partition {info['partition']}: offsets [{info['log_start_offset']}, "
                  f"{info['log_end_offset']}) {info['size_bytes'] / 1e6:.1f} MB in {info['segments']} segment(s)")
        kafka_clients(cluster.bootstrap_servers)
        print(f"demo done in {time.monotonic() - began:.0f}s")
    finally:
        ray.shutdown()
        shutil.rmtree(data_root, ignore_errors=True)


def kafka_clients(bootstrap: str) -> None:
    """Step 6: the topic through Kafka's wire protocol, as any Kafka client or tool reads it."""
    line = ["kcat", "-b", bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e"]
    print(f"6. Kafka clients reach raylog at {bootstrap}; read the demo topic with:  {' '.join(line)}")
    kcat = shutil.which("kcat")
    if kcat is None:
        print("     (kcat is not installed here: `apt-get install kcat`)")
        return
    try:
        done = subprocess.run([kcat, *line[1:], "-c", "3", "-f", "%p/%o %k: %s\n"], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        print("     (kcat did not finish within 120 s)")
        return
    for row in (done.stdout.splitlines() if done.returncode == 0 else done.stderr.strip().splitlines()[-1:]):
        print(f"     {row[:100]}")


if __name__ == "__main__":
    main()
