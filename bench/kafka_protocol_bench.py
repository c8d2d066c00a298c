"""Kafka's wire protocol: confluent-kafka (librdkafka) through raylog's listener, beside raylog's
own client in the same run and Kafka's published figures.

Rows, 100-byte records (random uppercase letters, as Kafka's ProducerPerformance fills them),
RF=1, on a local Ray, each the median of --runs runs:

- confluent-kafka producer through the listener: acks=all, lz4, linger.ms=5, then flush; delivery
  reports for failed records only (REPORT_ONLY_ERRORS), and again with a report per record
- confluent-kafka consumer through the listener, assign() from offset 0 to the end, timed from
  its first records: with librdkafka's defaults, and tuned (CONSUMER_TUNING: its fetch queue
  never backs off)
- the same producer's produce() loop with no broker at all: the client's own ceiling here
- kcat (librdkafka driven from C, Debian's package) producing the same records from a file with
  the same settings, and consuming them from offset 0 to the end: a client that is not held back
  by Python, the rows a Java or C producer would see; each with the cores kcat and the listener
  used (the producer's rate includes kcat's process start; the consumer's is timed from kcat's
  first output to its exit)
- the cores the client (this process) and the listener used during the producer and consumer
  rows: which of the two a row waits on
- end-to-end latency p50/p99 in ms: one record produced, consumed, the next (--latency-samples)
- raylog's producer (``send_batch``, acks=all, lz4) and consumer (``poll_batch``) on the same
  records: the native rate each listener row is given as a ratio of
- Kafka's published single-producer (821,557 records/s) and single-consumer (940,521 records/s)
  figures (Jay Kreps, "Benchmarking Apache Kafka", 2014), for scale
- what keeping Kafka's batches as they came would take off the listener (conversion_costs): the
  fetch path's leader fetch (over the same-node channel, and by Ray call) and conversion to Kafka
  v2, each alone, and the produce conversion beside the listener's CPU per record in the kcat
  producer row

    python -m bench kafka-protocol [--records 300000] [--partitions 2] [--runs 3]

Results go to bench/results/kafka_protocol.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from bench.client_bench import make_values

KAFKA_PRODUCER = 821_557
KAFKA_CONSUMER = 940_521
RESULTS = Path(__file__).parent / "results" / "kafka_protocol.json"


PRODUCER_CONFIG = {"acks": "all", "compression.type": "lz4", "linger.ms": 5, "batch.size": 1_000_000,
                   "queue.buffering.max.messages": 2_000_000}
REPORT_ONLY_ERRORS = {"delivery.report.only.error": True}
"""librdkafka's own setting for a producer that only needs to hear of failures: a failed record
still gets its delivery report (and flush() still waits for every record), a delivered one gets
none. With a report per record, the Python client calls back into Python once per record while it
flushes: 288-337 K records/s through the listener against 696-751 K with this (300,000 records,
three runs each, the same session)."""


def _produce_all(producer, topic: str, values: list[bytes], partitions: int, failed: list,
                 callback_per_record: bool = False) -> None:
    def report(err, _msg) -> None:
        if err:
            failed.append(err)

    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions,
                                 on_delivery=(lambda err, _m: err and failed.append(err)) if callback_per_record
                                 else report)
                break
            except BufferError:
                producer.poll(0.01)


def produce_confluent(bootstrap: str, topic: str, values: list[bytes], partitions: int,
                      reports: bool = False) -> float:
    """confluent-kafka's produce() per record, then flush(): with a delivery report for failed
    records only, or (``reports``) a new callback and a report for every record."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG,
                                         **({} if reports else REPORT_ONLY_ERRORS)})
    failed: list = []
    started = time.perf_counter()
    _produce_all(producer, topic, values, partitions, failed, callback_per_record=reports)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"confluent-kafka: {left} records undelivered, errors {failed[:3]}")
    return len(values) / elapsed


def produce_ceiling(values: list[bytes], partitions: int) -> float:
    """The same produce() loop into librdkafka's queue with no broker to send to (nothing listens
    on 127.0.0.1:9): what the Python client alone hands over per second on this machine, before
    any network, compression or broker. A bound on the listener row whatever the broker does."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0, **PRODUCER_CONFIG,
                                         **REPORT_ONLY_ERRORS})
    started = time.perf_counter()
    _produce_all(producer, "ceiling", values, partitions, [])
    elapsed = time.perf_counter() - started
    producer.purge()
    return len(values) / elapsed


KCAT_PRODUCER = ["-X", "acks=all", "-z", "lz4", "-X", "linger.ms=5", "-X", "batch.size=1000000",
                 "-X", "queue.buffering.max.messages=2000000"]
"""PRODUCER_CONFIG in kcat's words."""
KCAT_CONSUMER = ["-X", "queued.min.messages=1000000", "-X", "max.partition.fetch.bytes=2097152"]
"""CONSUMER_TUNING as far as kcat's librdkafka (2.0 in Debian 12) has it: fetch.queue.backoff.ms came later."""


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def kcat_produce(args: list[str], count: int) -> tuple[float, float]:
    """kcat -P over its whole run, process start and metadata included: (records/s, its cores)."""
    cpu, started = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(["kcat", "-P", *args], capture_output=True, timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or done.stderr.strip():
        raise RuntimeError(f"kcat -P failed: {done.stderr.decode(errors='replace')[-500:]}")
    return count / elapsed, (_children_cpu_s() - cpu) / elapsed


def kcat_consume(args: list[str], count: int) -> tuple[float, float]:
    """kcat -C printing each record's offset until it has ``count`` (-c, then it exits), timed
    from the first output it writes to its exit, not from its process start: (records/s counted
    after that first output, its cores over its whole run). Its stdout to a pipe is written a
    buffer at a time, so -e (exit at the log's end) would time the last fetch's wait too."""
    cpu, started = _children_cpu_s(), time.perf_counter()
    proc = subprocess.Popen(["kcat", "-C", *args, "-c", str(count), "-f", "%o\n"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    first = proc.stdout.read1(1 << 20).count(b"\n")
    first_at, seen = time.perf_counter(), first
    while chunk := proc.stdout.read1(1 << 20):
        seen += chunk.count(b"\n")
    _, err = proc.communicate(timeout=600)
    ended = time.perf_counter()
    if proc.returncode != 0 or seen != count:
        raise RuntimeError(f"kcat -C read {seen} records of {count}: {err.decode(errors='replace')[-500:]}")
    return (count - first) / (ended - first_at), (_children_cpu_s() - cpu) / (ended - started)


CONSUMER_TUNING = {"fetch.queue.backoff.ms": 0, "queued.min.messages": 1_000_000,
                   "max.partition.fetch.bytes": 2_097_152}
"""librdkafka waits fetch.queue.backoff.ms (1 s) before fetching a partition again whenever its local
queue holds queued.min.messages (100,000) or more: a consumer that reads faster than that refills
its queue in bursts and then idles. Measured on this machine (300,000 records, 2 partitions): 57-60 K
records/s with the defaults, 76-112 K with 8 MiB partition fetches, 430-450 K tuned so."""


def consume_confluent(bootstrap: str, topic: str, count: int, partitions: int, tuned: bool = True) -> float:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False, **(CONSUMER_TUNING if tuned else {})})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got, started = 0, None
    try:
        # Timed from the first record, as kcat's row is: the connection, ApiVersions and Metadata
        # before it are a client's start, which Kafka's published figure (50 M records) amortizes.
        first = 0
        while got < count:
            batch = consumer.consume(10_000, 1.0)
            got += sum(1 for m in batch if m.error() is None)
            if started is None and got:
                started, first = time.perf_counter(), got
        return (got - first) / (time.perf_counter() - started)
    finally:
        consumer.close()


def latency_confluent(bootstrap: str, topic: str, samples: int) -> tuple[float, float]:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex}",
                                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    # A new topic read from offset 0: every record sent is the next one read.
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    times = []
    try:
        for i in range(samples):
            started = time.perf_counter()
            producer.produce(topic, b"%d" % i, partition=0)
            producer.poll(0)
            while not any(m.error() is None and m.value() == b"%d" % i for m in consumer.consume(1, 5.0)):
                if time.perf_counter() - started > 60:
                    raise RuntimeError(f"record {i} was not read back within 60 s")
            times.append((time.perf_counter() - started) * 1000)
    finally:
        producer.flush(30)
        consumer.close()
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99) - 1]


def native_rates(cluster, topic: str, values: list[bytes], partitions: int) -> tuple[float, float]:
    from raylog.records import TopicPartition

    producer = cluster.producer(acks="all", compression_type="lz4")
    per = len(values) // partitions
    started = time.perf_counter()
    for p in range(partitions):
        producer.send_batch(topic, values[p * per:(p + 1) * per], partition=p)
    producer.flush()
    produce = partitions * per / (time.perf_counter() - started)
    producer.close()
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    while got < partitions * per:
        got += sum(len(b) for b in consumer.poll_batch(timeout_ms=1000))
    consume = got / (time.perf_counter() - started)
    consumer.close()
    return produce, consume


class CpuShare:
    """Cores each process used over a stretch of wall time (user + system CPU / elapsed): tells
    whether the client (this process: its Python loop and librdkafka's threads) or the listener
    is what a row waits on. ``client_python`` is the thread that runs the row alone: a Python
    client's loop near a full core is the client's own limit, whatever the broker answers."""

    def __init__(self, pids: dict[str, int]):
        import psutil

        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.shares: dict[str, list[float]] = {}

    def measure(self, row: str, work: Callable[[], float], python_client: bool = True) -> float:
        before = {name: sum(p.cpu_times()[:2]) for name, p in self.procs.items()}
        thread_before = time.thread_time()
        started = time.perf_counter()
        result = work()
        elapsed = time.perf_counter() - started
        for name, p in self.procs.items():
            self.shares.setdefault(f"{row}_{name}", []).append((sum(p.cpu_times()[:2]) - before[name]) / elapsed)
        if python_client:
            self.shares.setdefault(f"{row}_client_python", []).append((time.thread_time() - thread_before) / elapsed)
        return result


FETCH_BYTES = 2_097_152
"""The partition fetch size of the consumer rows (CONSUMER_TUNING's max.partition.fetch.bytes)."""


def conversion_costs(cluster, topic: str, partitions: int, values: list[bytes]) -> dict[str, float]:
    """What storing Kafka's batches as they came (not built) would take off the listener's paths,
    measured on ``topic`` (written by confluent-kafka through the listener), from this process on
    the listener's node:

    - fetch: every partition read from offset 0 in FETCH_BYTES fetches from its leader, by Ray
      call and over its same-node channel (the listener's two ways of fetching a partition), then
      each answer converted to Kafka v2 as the listener converts it; records/s of each step alone;
    - produce: the first 10,000 ``values`` as an lz4 Kafka batch (written by kafka-python, as a
      client sends it) decoded and converted to raylog batches, as the listener does with
      every produced batch; records/s."""
    import ray
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from raylog.kafka import record_batch as kafka_batches
    from raylog.produce_channel import ProduceChannel
    from raylog.storage import batch as raylog_batch
    from raylog.storage.payload import CODEC_LZ4

    fetch_s = channel_s = convert_s = 0.0
    fetched = 0
    for p in range(partitions):
        leader = cluster.metadata.leader(topic, p)
        _, _, name, secret = ray.get(leader.read_location.remote())
        channel = ProduceChannel(name, bytes.fromhex(secret))
        offset, end = 0, len(values) // partitions
        try:
            while offset < end:
                started = time.perf_counter()
                data = ray.get(leader.fetch.remote(offset, FETCH_BYTES, 0, 1, -1, -1))[0]
                fetch_s += time.perf_counter() - started
                started = time.perf_counter()
                over_channel = channel.fetch(offset, FETCH_BYTES, 0, 1, None).result(60)[0]
                channel_s += time.perf_counter() - started
                assert bytes(over_channel) == bytes(data)
                started = time.perf_counter()
                kafka_batches.from_raylog_log(data)
                convert_s += time.perf_counter() - started
                batches = list(raylog_batch.iter_batches(data))
                fetched += batches[-1].next_offset - offset
                offset = batches[-1].next_offset
        finally:
            channel.close()
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=CODEC_LZ4, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    sample = values[:10_000]
    for i, value in enumerate(sample):
        builder.append(i, timestamp=0, key=None, value=value, headers=[])
    produced = bytes(builder.build())
    rounds, started = 0, time.perf_counter()
    while rounds < 20 or time.perf_counter() - started < 1.0:
        kafka_batches.to_raylog(kafka_batches.decode(produced)[0])
        rounds += 1
    produce_convert = rounds * len(sample) / (time.perf_counter() - started)
    return {"fetch_call": fetched / fetch_s, "fetch_channel": fetched / channel_s, "fetch_convert": fetched / convert_s,
            "produce_convert": produce_convert}


def run(records: int, partitions: int, runs: int, latency_samples: int) -> dict:
    import ray

    import raylog

    values = make_values(records)
    data_root = tempfile.mkdtemp(prefix="raylog-kafka-bench-")
    cluster = raylog.connect("local", data_root=data_root, num_cpus=2, include_dashboard=False)
    bootstrap = cluster.bootstrap_servers
    admin = cluster.admin()
    rows: dict[str, list[float]] = {"listener_produce": [], "listener_produce_reports": [], "listener_consume": [],
                                    "listener_consume_defaults": [],
                                    "native_produce": [], "native_consume": [], "client_produce_ceiling": []}
    has_kcat = shutil.which("kcat") is not None
    if has_kcat:
        rows.update({"kcat_produce": [], "kcat_consume": []})
        lines = os.path.join(data_root, "values.txt")
        with open(lines, "wb") as f:
            f.write(b"\n".join(values) + b"\n")
    else:
        print("kcat not installed (make venv installs it): its rows are left out", flush=True)
    from raylog.naming import kafka_listener_actor_name

    listener = ray.get_actor(kafka_listener_actor_name(ray.get_runtime_context().get_node_id()),
                             namespace=cluster.config.namespace)
    cpu = CpuShare({"client": os.getpid(), "listener": ray.get(listener.ping.remote())})
    try:
        for run_index in range(runs):
            wire, native = f"wire-{run_index}", f"native-{run_index}"
            admin.create_topic(wire, partitions)
            admin.create_topic(native, partitions)
            rows["listener_produce"].append(cpu.measure(
                "produce", lambda: produce_confluent(bootstrap, wire, values, partitions)))
            admin.create_topic(f"{wire}-reports", partitions)
            rows["listener_produce_reports"].append(produce_confluent(bootstrap, f"{wire}-reports", values, partitions,
                                                                      reports=True))
            rows["listener_consume"].append(cpu.measure(
                "consume", lambda: consume_confluent(bootstrap, wire, records, partitions)))
            rows["listener_consume_defaults"].append(consume_confluent(bootstrap, wire, records, partitions, False))
            for name, rate in conversion_costs(cluster, wire, partitions, values).items():
                rows.setdefault(name, []).append(rate)
            produce, consume = native_rates(cluster, native, values, partitions)
            rows["native_produce"].append(produce)
            rows["native_consume"].append(consume)
            rows["client_produce_ceiling"].append(produce_ceiling(values, partitions))
            if has_kcat:  # "client" is this process, idle meanwhile: kcat's own cores are kept apart
                by_kcat = f"kcat-{run_index}"
                admin.create_topic(by_kcat, partitions)
                rate, cores = cpu.measure("kcat_produce", lambda: kcat_produce(
                    ["-b", bootstrap, "-t", by_kcat, *KCAT_PRODUCER, "-l", lines], records), python_client=False)
                rows["kcat_produce"].append(rate)
                cpu.shares.setdefault("kcat_produce_kcat", []).append(cores)
                rate, cores = cpu.measure("kcat_consume", lambda: kcat_consume(
                    ["-b", bootstrap, "-t", by_kcat, "-o", "beginning", "-q", *KCAT_CONSUMER], records), python_client=False)
                rows["kcat_consume"].append(rate)
                cpu.shares.setdefault("kcat_consume_kcat", []).append(cores)
            print(f"run {run_index + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rows.items()), flush=True)
        admin.create_topic("latency", 1)
        p50, p99 = latency_confluent(bootstrap, "latency", latency_samples)
    finally:
        ray.shutdown()
    med = {k: statistics.median(v) for k, v in rows.items()}
    result = {
        "records": records, "partitions": partitions, "runs": runs, "bootstrap": bootstrap,
        "median_records_per_s": med, "all_runs": rows,
        "producer_vs_native": med["listener_produce"] / med["native_produce"],
        "producer_vs_client_ceiling": med["listener_produce"] / med["client_produce_ceiling"],
        "consumer_vs_native": med["listener_consume"] / med["native_consume"],
        "producer_vs_kafka_published": med["listener_produce"] / KAFKA_PRODUCER,
        "consumer_vs_kafka_published": med["listener_consume"] / KAFKA_CONSUMER,
        "e2e_latency_ms": {"p50": p50, "p99": p99, "samples": latency_samples},
        "cores_used_median": {k: statistics.median(v) for k, v in cpu.shares.items()},
    }
    print(f"confluent-kafka producer via the listener: {med['listener_produce']:>12,.0f} records/s "
          f"({result['producer_vs_native']:.2f}x raylog's producer {med['native_produce']:,.0f}; "
          f"{result['producer_vs_kafka_published']:.2f}x Kafka's published {KAFKA_PRODUCER:,}; "
          f"{result['producer_vs_client_ceiling']:.2f}x the client's own produce() loop with no broker, "
          f"{med['client_produce_ceiling']:,.0f}; with a delivery report per record "
          f"{med['listener_produce_reports']:,.0f})")
    print(f"confluent-kafka consumer via the listener: {med['listener_consume']:>12,.0f} records/s "
          f"({result['consumer_vs_native']:.2f}x raylog's consumer {med['native_consume']:,.0f}; "
          f"{result['consumer_vs_kafka_published']:.2f}x Kafka's published {KAFKA_CONSUMER:,}; "
          f"librdkafka's defaults {med['listener_consume_defaults']:,.0f})")
    if has_kcat:
        result["kcat_producer_vs_kafka_published"] = med["kcat_produce"] / KAFKA_PRODUCER
        result["kcat_consumer_vs_kafka_published"] = med["kcat_consume"] / KAFKA_CONSUMER
        print(f"kcat producer via the listener:            {med['kcat_produce']:>12,.0f} records/s "
              f"({med['kcat_produce'] / med['native_produce']:.2f}x raylog's producer; "
              f"{result['kcat_producer_vs_kafka_published']:.2f}x Kafka's published {KAFKA_PRODUCER:,})")
        print(f"kcat consumer via the listener:            {med['kcat_consume']:>12,.0f} records/s "
              f"({med['kcat_consume'] / med['native_consume']:.2f}x raylog's consumer; "
              f"{result['kcat_consumer_vs_kafka_published']:.2f}x Kafka's published {KAFKA_CONSUMER:,})")
    cores = result["cores_used_median"]
    call, channel, convert = med["fetch_call"], med["fetch_channel"], med["fetch_convert"]
    result["kafka_batches_as_they_came"] = as_came = {
        "fetch_path_records_per_s": 1 / (1 / channel + 1 / convert), "fetch_path_without_conversion": channel,
        "fetch_conversion_share": channel / (channel + convert),
        "fetch_path_by_ray_call_records_per_s": 1 / (1 / call + 1 / convert),
        "produce_conversion_us_per_record": 1e6 / med["produce_convert"]}
    print(f"fetch path, {FETCH_BYTES >> 20} MiB partition fetches: the leader's fetch over its same-node channel "
          f"{channel:,.0f} records/s (by Ray call {call:,.0f}), the conversion to Kafka v2 {convert:,.0f}; both "
          f"{as_came['fetch_path_records_per_s']:,.0f} (by Ray call "
          f"{as_came['fetch_path_by_ray_call_records_per_s']:,.0f}), {as_came['fetch_conversion_share']:.0%} of it "
          "the conversion")
    print(f"produce path: the conversion of lz4 Kafka batches {med['produce_convert']:,.0f} records/s "
          f"({as_came['produce_conversion_us_per_record']:.2f} us a record)", end="")
    if has_kcat:
        listener_us = 1e6 * cores["kcat_produce_listener"] / med["kcat_produce"]
        as_came["kcat_produce_listener_us_per_record"] = listener_us
        print(f", against the listener's {listener_us:.2f} us of CPU a record in the kcat producer row", end="")
    print()
    print(f"end-to-end latency through the listener: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({latency_samples} samples)")
    print("cores used (median): " + ", ".join(f"{k} {v:.2f}" for k, v in result["cores_used_median"].items()))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench kafka-protocol", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=2000)
    args = parser.parse_args(argv)
    result = run(args.records, args.partitions, args.runs, args.latency_samples)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
