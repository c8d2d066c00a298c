"""Client benchmark: one producer and one consumer, 100-byte records, RF=1, on a local Ray.

Rows: producer records/s with send_batch and with per-record send(); consumer
records/s through the column view (poll_batch); end-to-end latency p50/p99/p99.9
at low load (one record at a time, linger_ms=0). In the same run, Ray's own
ray.util.queue.Queue with put_nowait_batch/get_nowait_batch moves the same
records as the Ray-native baseline; raylog/queue ratios are printed. Medians
of --runs runs.

    python -m bench.client_bench [--records 1000000] [--runs 3] [--partitions 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

RECORD_BYTES = 100


def make_values(n: int, seed: int = 0) -> list[bytes]:
    """Random uppercase letters, as Kafka's ProducerPerformance fills its records."""
    buf = np.random.default_rng(seed).integers(65, 91, n * RECORD_BYTES, dtype=np.uint8).tobytes()
    return [buf[i * RECORD_BYTES:(i + 1) * RECORD_BYTES] for i in range(n)]


def produce_batch(cluster, topic: str, values: list[bytes], chunk: int = 100_000) -> float:
    producer = cluster.producer(acks=1)
    start = time.perf_counter()
    futures = [producer.send_batch(topic, values[i:i + chunk]) for i in range(0, len(values), chunk)]
    for f in futures:
        f.wait(timeout=300)
    elapsed = time.perf_counter() - start
    producer.close()
    return len(values) / elapsed


def produce_per_record(cluster, topic: str, values: list[bytes]) -> float:
    producer = cluster.producer(acks=1, linger_ms=5)
    send = producer.send
    start = time.perf_counter()
    for v in values:
        send(topic, v)
    producer.flush(timeout=300)
    elapsed = time.perf_counter() - start
    producer.close()
    return len(values) / elapsed


def consume_columns(cluster, topic: str, expected: int) -> float:
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    n = 0
    start = time.perf_counter()
    while n < expected:
        for chunk in consumer.poll_batch(timeout_ms=5000):
            n += len(chunk)
    elapsed = time.perf_counter() - start
    consumer.close()
    return n / elapsed


def e2e_latency_ms(cluster, topic: str, samples: int) -> list[float]:
    producer = cluster.producer(acks=1, linger_ms=0)
    consumer = cluster.consumer(topic, auto_offset_reset="latest", fetch_max_wait_ms=1000)
    consumer.poll(timeout_ms=100)
    latencies = []
    for _ in range(samples):
        start = time.perf_counter()
        producer.send(topic, b"x" * RECORD_BYTES, partition=0)
        got = 0
        while not got:
            got = sum(len(c) for c in consumer.poll_batch(timeout_ms=1000))
        latencies.append((time.perf_counter() - start) * 1000)
    producer.close()
    consumer.close()
    return latencies


def ray_queue_baseline(values: list[bytes], chunk: int = 100_000) -> tuple[float, float]:
    from ray.util.queue import Queue

    q = Queue(maxsize=0)
    start = time.perf_counter()
    for i in range(0, len(values), chunk):
        q.put_nowait_batch(values[i:i + chunk])
    put_rate = len(values) / (time.perf_counter() - start)
    n = 0
    start = time.perf_counter()
    while n < len(values):
        n += len(q.get_nowait_batch(min(chunk, len(values) - n)))
    get_rate = n / (time.perf_counter() - start)
    q.shutdown()
    return put_rate, get_rate


def run(records: int, runs: int, partitions: int, latency_samples: int, baseline: bool = True) -> dict:
    import ray

    import raylog

    data_root = tempfile.mkdtemp(prefix="raylog-bench-")
    cluster = raylog.connect(data_root=data_root, num_cpus=2)
    values = make_values(records)
    rows: dict[str, list[float]] = {k: [] for k in (
        "send_batch_records_per_s", "send_records_per_s", "consume_records_per_s",
        "queue_put_records_per_s", "queue_get_records_per_s")}
    latencies: list[float] = []
    try:
        for _ in range(runs):
            topic = f"bench-{uuid.uuid4().hex[:6]}"
            cluster.admin().create_topic(topic, partitions)
            rows["send_batch_records_per_s"].append(produce_batch(cluster, topic, values))
            rows["consume_records_per_s"].append(consume_columns(cluster, topic, records))
            per_record = values[: max(1, records // 4)]
            topic2 = f"bench-{uuid.uuid4().hex[:6]}"
            cluster.admin().create_topic(topic2, partitions)
            rows["send_records_per_s"].append(produce_per_record(cluster, topic2, per_record))
            if baseline:
                put, get = ray_queue_baseline(values)
                rows["queue_put_records_per_s"].append(put)
                rows["queue_get_records_per_s"].append(get)
            cluster.admin().delete_topics([topic, topic2])
        if latency_samples:
            topic = f"bench-lat-{uuid.uuid4().hex[:6]}"
            cluster.admin().create_topic(topic, 1)
            latencies = e2e_latency_ms(cluster, topic, latency_samples)
    finally:
        ray.shutdown()
        shutil.rmtree(data_root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    mb = RECORD_BYTES / 1e6
    print(f"client bench: {records:,} x {RECORD_BYTES}-byte records, {partitions} partitions, RF=1, "
          f"median of {runs} runs")
    print(f"  producer send_batch  {med['send_batch_records_per_s']:>12,.0f} records/s "
          f"{med['send_batch_records_per_s'] * mb:7.1f} MB/s")
    print(f"  producer send()      {med['send_records_per_s']:>12,.0f} records/s "
          f"{med['send_records_per_s'] * mb:7.1f} MB/s")
    print(f"  consumer poll_batch  {med['consume_records_per_s']:>12,.0f} records/s "
          f"{med['consume_records_per_s'] * mb:7.1f} MB/s")
    if baseline:
        print(f"  ray Queue put_nowait_batch {med['queue_put_records_per_s']:>12,.0f} records/s  "
              f"(raylog send_batch = {med['send_batch_records_per_s'] / med['queue_put_records_per_s']:.2f}x)")
        print(f"  ray Queue get_nowait_batch {med['queue_get_records_per_s']:>12,.0f} records/s  "
              f"(raylog consumer = {med['consume_records_per_s'] / med['queue_get_records_per_s']:.2f}x)")
    if latencies:
        p50, p99, p999 = np.percentile(latencies, [50, 99, 99.9])
        med.update(e2e_p50_ms=p50, e2e_p99_ms=p99, e2e_p999_ms=p999)
        print(f"  end-to-end latency   p50 {p50:.2f} ms  p99 {p99:.2f} ms  p99.9 {p999:.2f} ms "
              f"({len(latencies)} samples)")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "client.json").write_text(json.dumps({"median": med, "runs": rows}, indent=2))
    return med


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--latency-samples", type=int, default=2000)
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    return run(args.records, args.runs, args.partitions, args.latency_samples)


if __name__ == "__main__":
    main()
