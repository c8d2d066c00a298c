"""Client benchmark: the producer's and consumer's paths, 100-byte records, RF=1, on a local Ray.

Rows (records/s unless noted), each the median of --runs runs:

- producer ``send_batch`` (the vectorized path)
- producer ``send()`` of unkeyed records, then ``flush()``
- producer ``send(key=...)`` of keyed records (random 1-24-byte keys) and ``get()`` of every future
- the same three rows on issue 33's workload: 200,000 records with random 1-24-byte keys and
  random (incompressible) 100-byte values into 6 partitions, default producer
- consumer ``poll_batch`` (column views, no object per record)
- consumer ``poll()`` iterating every ConsumerRecord
- end-to-end latency p50/p99/p99.9 in ms at 1,000 records/s (one record sent every ms, each
  consumed before the next), quiet and with a second process keeping one core busy; and with the
  producer and the consumer as two threads of one process
- each consumer row twice: reading the leader's files on its node (the default) and through
  fetch calls (local_reads=False), in the same run; the latency rows likewise with the producer
  on the same-node channel (the default) and on Ray calls (local_produce=False)

Issue 33's two send rows are also timed with a no-op producer in the same loop (the
interpreter's floor, measured in the same run), and printed as a fraction of it: a yardstick
for comparing VMs of different speeds, where the absolute rates differ by 2-3x.

In the same run, Ray's own ``ray.util.queue.Queue`` moves the same records with
put_nowait_batch/get_nowait_batch: the Ray-native baseline, printed as a ratio. Records
are random uppercase letters, as Kafka's ProducerPerformance fills them. Each row also
prints the CPU the driver process spent per record (the producer and consumer live
there; the rest of the machine's two cores go to replicas and Ray), and how much of it
CPython's cyclic collector took (gc.callbacks): a row that keeps a future per record sets
off full collections.

    python -m bench.client_bench [--records 1000000] [--partitions 2] [--runs 3] [--random-only]

The defaults are issue 22's rows: 500,000 records per partition, as its targets were set.
``--random-only`` runs issue 33's three rows alone (no other row before them in a run, whose
replicas and driver heap they would share; bench/results/client_random.json).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

RECORD_BYTES = 100
SIX_RECORDS = 200_000
"""Issue 33's workload: this many records into 6 partitions, random keys and values."""


def make_values(n: int, seed: int = 0) -> list[bytes]:
    """Random uppercase letters, as Kafka's ProducerPerformance fills its records."""
    buf = np.random.default_rng(seed).integers(65, 91, n * RECORD_BYTES, dtype=np.uint8).tobytes()
    return [buf[i * RECORD_BYTES:(i + 1) * RECORD_BYTES] for i in range(n)]


def make_random_values(n: int, seed: int = 2) -> list[bytes]:
    """Random bytes (issue 33's workload): nothing for lz4 to squeeze."""
    buf = np.random.default_rng(seed).integers(0, 256, n * RECORD_BYTES, dtype=np.uint8).tobytes()
    return [buf[i * RECORD_BYTES:(i + 1) * RECORD_BYTES] for i in range(n)]


def make_keys(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(1, 24)) for _ in range(n)]


def process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class Timed:
    """Wall time, this process's CPU time and the cyclic collector's time (gc, seconds) of a block."""

    def __enter__(self) -> "Timed":
        self.gc, self._gc_start = 0.0, 0.0
        gc.callbacks.append(self._collection)
        self.cpu, self.wall = process_cpu_s(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = process_cpu_s() - self.cpu
        gc.callbacks.remove(self._collection)

    def _collection(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc += time.perf_counter() - self._gc_start


def produce_batch(cluster, topic: str, values: list[bytes], chunk: int = 100_000, local: bool = True) -> Timed:
    producer = cluster.producer(local_produce=local)
    with Timed() as t:
        futures = [producer.send_batch(topic, values[i:i + chunk]) for i in range(0, len(values), chunk)]
        for f in futures:
            f.wait(timeout=300)
    producer.close()
    return t


def produce_per_record(cluster, topic: str, values: list[bytes]) -> Timed:
    producer = cluster.producer()
    send = producer.send
    with Timed() as t:
        for v in values:
            send(topic, v)
        producer.flush(timeout=300)
    producer.close()
    return t


def produce_keyed_and_get(cluster, topic: str, values: list[bytes], keys: list[bytes], local: bool = True) -> Timed:
    producer = cluster.producer(local_produce=local)
    send = producer.send
    with Timed() as t:
        futures = [send(topic, v, key=k) for v, k in zip(values, keys)]
        for f in futures:
            f.get(timeout=300)
    producer.close()
    return t


def consume_columns(cluster, topic: str, expected: int, local: bool = True) -> Timed:
    consumer = cluster.consumer(topic, auto_offset_reset="earliest", local_reads=local)
    n = 0
    with Timed() as t:
        while n < expected:
            for chunk in consumer.poll_batch(timeout_ms=5000):
                n += len(chunk)
    consumer.close()
    return t


def consume_records(cluster, topic: str, expected: int, local: bool = True) -> Timed:
    consumer = cluster.consumer(topic, auto_offset_reset="earliest", local_reads=local)
    n = 0
    with Timed() as t:
        while n < expected:
            for records in consumer.poll(timeout_ms=5000).values():
                for _record in records:
                    n += 1
    consumer.close()
    return t


def e2e_latency_ms(cluster, topic: str, samples: int, rate_per_s: int = 1000, local: bool = True) -> list[float]:
    """Send one record, wait until the consumer has it, pace to ``rate_per_s``."""
    producer = cluster.producer(acks=1, linger_ms=0, local_produce=local)
    consumer = cluster.consumer(topic, auto_offset_reset="latest", fetch_max_wait_ms=1000, local_reads=local)
    consumer.poll(timeout_ms=100)
    value = b"x" * RECORD_BYTES
    latencies = []
    period = 1 / rate_per_s
    next_send = time.perf_counter()
    for _ in range(samples + samples // 10):
        start = time.perf_counter()
        producer.send(topic, value, partition=0)
        got = 0
        while not got:
            got = sum(len(c) for c in consumer.poll_batch(timeout_ms=1000))
        latencies.append((time.perf_counter() - start) * 1000)
        next_send += period
        pause = next_send - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            next_send = time.perf_counter()
    producer.close()
    consumer.close()
    return latencies[samples // 10:]  # the first tenth warms up


def e2e_latency_threads_ms(cluster, topic: str, samples: int, rate_per_s: int = 1000,
                           local: bool = True) -> list[float]:
    """The producer and the consumer as two threads of one process: the producer sends one record
    every 1/rate_per_s with its send time in it, the consumer polls and notes when each arrives."""
    import struct
    import threading

    producer = cluster.producer(acks=1, linger_ms=0, local_produce=local)
    consumer = cluster.consumer(topic, auto_offset_reset="latest", fetch_max_wait_ms=1000, local_reads=local)
    consumer.poll(timeout_ms=100)
    total = samples + samples // 10
    latencies: list[float] = []
    pad = b"x" * (RECORD_BYTES - 8)

    def produce():
        period = 1 / rate_per_s
        next_send = time.perf_counter()
        for _ in range(total):
            producer.send(topic, struct.pack("<d", time.perf_counter()) + pad, partition=0)
            next_send += period
            pause = next_send - time.perf_counter()
            if pause > 0:
                time.sleep(pause)

    sender = threading.Thread(target=produce)
    sender.start()
    deadline = time.monotonic() + total / rate_per_s + 60
    while len(latencies) < total and time.monotonic() < deadline:
        for chunk in consumer.poll_batch(timeout_ms=1000):
            now = time.perf_counter()
            latencies += [(now - struct.unpack_from("<d", v)[0]) * 1000 for v in chunk.value_list()]
    sender.join()
    producer.close()
    consumer.close()
    return latencies[samples // 10:]


class _NoopProducer:
    """send()'s signature and a future whose get() does nothing: the interpreter's floor."""

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        return self

    def get(self, timeout=None):
        return None


def interpreter_floor(values: list[bytes], keys: list[bytes]) -> tuple[float, float]:
    """Records/s of the two send rows' loops with a no-op producer: what this machine's interpreter
    allows before raylog does anything."""
    send = _NoopProducer().send
    start = time.perf_counter()
    for v in values:
        send("t", v)
    unkeyed = len(values) / (time.perf_counter() - start)
    start = time.perf_counter()
    futures = [send("t", v, key=k) for v, k in zip(values, keys)]
    for f in futures:
        f.get(timeout=300)
    return unkeyed, len(values) / (time.perf_counter() - start)


def ray_queue_baseline(values: list[bytes], chunk: int = 100_000) -> tuple[float, float]:
    from ray.util.queue import Queue

    q = Queue(maxsize=0)
    q.size()  # the queue's actor has started: raylog's rows do not count starting its replicas either
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


ROWS = [
    ("send_batch", "producer send_batch"),
    ("send_batch_call", "  the same through Ray calls"),
    ("send", "producer send() unkeyed"),
    ("send_keyed_get", "producer send(key) + get() each"),
    ("send_keyed_get_call", "  the same through Ray calls"),
    ("send_6p", "send() unkeyed, random, 6 partitions"),
    ("send_keyed_get_6p", "send(key) + get(), random, 6 partitions"),
    ("poll_records_6p", "poll() each record, random, 6 partitions"),
    ("poll_batch", "consumer poll_batch columns"),
    ("poll_batch_call", "  the same through fetch calls"),
    ("poll_records", "consumer poll() each record"),
    ("poll_records_call", "  the same through fetch calls"),
]
"""Consumers read the leader's segment files on its node (local_reads, the default); the
'through fetch calls' rows are the same consumers with local_reads=False, in the same run.
Producers send over the same-node channel (local_produce, the default); the 'through Ray calls'
rows are the same producers with local_produce=False."""


def run(records: int, runs: int, partitions: int, latency_samples: int, baseline: bool = True,
        random_only: bool = False) -> dict:
    import ray

    import raylog

    data_root = tempfile.mkdtemp(prefix="raylog-bench-")
    cluster = raylog.connect(data_root=data_root, num_cpus=2)
    if random_only:
        records, latency_samples, baseline = 0, 0, False
    values = make_values(records)
    keys = make_keys(records)
    random_values, random_keys = make_random_values(SIX_RECORDS), make_keys(SIX_RECORDS, seed=3)
    rates: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    cpu: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    collector: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    queue_rates: dict[str, list[float]] = {"put": [], "get": []}
    floor_rates: dict[str, list[float]] = {"send_6p": [], "send_keyed_get_6p": []}
    latency: dict[str, list[list[float]]] = {}
    try:
        def record(name: str, t: Timed, count: int = records) -> None:
            rates[name].append(count / t.wall)
            cpu[name].append(t.cpu / count * 1e6)
            collector[name].append(t.gc / count * 1e6)

        def random_rows() -> None:
            """Issue 33's rows, on two 6-partition topics made for them and deleted after."""
            six_send, six_keyed = f"bench6-{uuid.uuid4().hex[:6]}", f"bench6-{uuid.uuid4().hex[:6]}"
            for t in (six_send, six_keyed):
                cluster.admin().create_topic(t, 6)
            time.sleep(3)
            unkeyed, keyed = interpreter_floor(random_values, random_keys)
            floor_rates["send_6p"].append(unkeyed)
            floor_rates["send_keyed_get_6p"].append(keyed)
            record("send_6p", produce_per_record(cluster, six_send, random_values), SIX_RECORDS)
            record("send_keyed_get_6p", produce_keyed_and_get(cluster, six_keyed, random_values, random_keys),
                   SIX_RECORDS)
            record("poll_records_6p", consume_records(cluster, six_keyed, SIX_RECORDS), SIX_RECORDS)
            cluster.admin().delete_topics([six_send, six_keyed])

        for r in range(runs):
            if random_only:
                random_rows()
                continue
            # Each run's topics are made just before it and deleted after: idle replica processes
            # cost CPU (issue 16), and the raylet keeps starting spare workers for a few seconds
            # after a burst of actors, so the run waits that out before timing anything.
            batch_topic, send_topic, keyed_topic, call_topic = (f"bench-{uuid.uuid4().hex[:6]}" for _ in range(4))
            for t in (batch_topic, send_topic, keyed_topic, call_topic):
                cluster.admin().create_topic(t, partitions)
            time.sleep(3)
            record("send_batch", produce_batch(cluster, batch_topic, values))
            record("send_batch_call", produce_batch(cluster, call_topic, values, local=False))
            record("send", produce_per_record(cluster, send_topic, values))
            record("send_keyed_get", produce_keyed_and_get(cluster, keyed_topic, values, keys))
            record("send_keyed_get_call", produce_keyed_and_get(cluster, call_topic, values, keys, local=False))
            random_rows()
            record("poll_batch", consume_columns(cluster, batch_topic, records))
            record("poll_batch_call", consume_columns(cluster, batch_topic, records, local=False))
            record("poll_records", consume_records(cluster, keyed_topic, records))
            record("poll_records_call", consume_records(cluster, keyed_topic, records, local=False))
            if baseline:
                put, get = ray_queue_baseline(values)
                queue_rates["put"].append(put)
                queue_rates["get"].append(get)
            cluster.admin().delete_topics([batch_topic, send_topic, keyed_topic, call_topic])
        if latency_samples:
            topic = f"bench-lat-{uuid.uuid4().hex[:6]}"
            cluster.admin().create_topic(topic, 1)
            for _ in range(runs):
                for mode, sample in (
                        ("quiet", lambda: e2e_latency_ms(cluster, topic, latency_samples)),
                        ("quiet, calls", lambda: e2e_latency_ms(cluster, topic, latency_samples, local=False)),
                        ("threads", lambda: e2e_latency_threads_ms(cluster, topic, latency_samples)),
                        ("threads, calls",
                         lambda: e2e_latency_threads_ms(cluster, topic, latency_samples, local=False))):
                    latency.setdefault(mode, []).append(sample())
                busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                try:
                    latency.setdefault("busy", []).append(e2e_latency_ms(cluster, topic, latency_samples))
                finally:
                    busy.kill()
                    busy.wait()
    finally:
        ray.shutdown()
        shutil.rmtree(data_root, ignore_errors=True)

    rates = {name: v for name, v in rates.items() if v}
    med = {name: statistics.median(v) for name, v in rates.items()}
    shape = (f"issue 33's rows alone: {SIX_RECORDS:,} x {RECORD_BYTES}-byte records, 6" if random_only
             else f"{records:,} x {RECORD_BYTES}-byte records, {partitions}")
    print(f"client bench: {shape} partitions, RF=1, median of {runs} runs (driver CPU per record in brackets, "
          "and the part of it in the cyclic collector)")
    for name, label in [(name, label) for name, label in ROWS if name in rates]:
        print(f"  {label:34s} {med[name]:>12,.0f} records/s  [{statistics.median(cpu[name]):.2f} us, "
              f"collector {statistics.median(collector[name]):.2f} us]")
    for name, label in (("send_6p", "the same loop, no-op send()"),
                        ("send_keyed_get_6p", "the same loop, no-op send + get")):
        if floor_rates[name]:
            floor = med[f"floor_{name}"] = statistics.median(floor_rates[name])
            print(f"  {label:34s} {floor:>12,.0f} records/s  (raylog = {med[name] / floor:.3f}x this floor)")
    if baseline:
        qput, qget = statistics.median(queue_rates["put"]), statistics.median(queue_rates["get"])
        print(f"  ray Queue put_nowait_batch         {qput:>12,.0f} records/s  "
              f"(raylog send_batch = {med['send_batch'] / qput:.2f}x)")
        print(f"  ray Queue get_nowait_batch         {qget:>12,.0f} records/s  "
              f"(raylog poll_batch = {med['poll_batch'] / qget:.2f}x)")
        med.update(queue_put=qput, queue_get=qget)
    latency_runs = {}
    for mode, per_run in latency.items():
        # Each run's percentiles, then the median of each across runs (with its min and max).
        cuts = [np.percentile(samples, [50, 99, 99.9]).tolist() for samples in per_run]
        p50, p99, p999 = (statistics.median(c[i] for c in cuts) for i in range(3))
        key = f"e2e_{mode.replace(', ', '_')}_ms"
        med[key] = [p50, p99, p999]
        latency_runs[key] = cuts
        spread = "  ".join(f"{min(c[i] for c in cuts):.2f}-{max(c[i] for c in cuts):.2f}" for i in range(3))
        print(f"  end-to-end at 1,000 rec/s, {mode:14s} p50 {p50:.2f} ms  p99 {p99:.2f} ms  p99.9 {p999:.2f} ms "
              f"(median of {len(cuts)} runs of {len(per_run[0])} samples; ranges {spread})")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / ("client_random.json" if random_only else "client.json")).write_text(json.dumps(
        {"median": med, "runs": rates, "driver_cpu_us_per_record": {name: cpu[name] for name in rates},
         "collector_us_per_record": {name: collector[name] for name in rates},
         "queue": queue_rates, "interpreter_floor": floor_rates,
         "latency_runs_ms": latency_runs}, indent=2))
    return med


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--latency-samples", type=int, default=3000)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--random-only", action="store_true", help="only issue 33's three random-key rows")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    return run(args.records, args.runs, args.partitions, args.latency_samples, not args.no_baseline,
               args.random_only)


if __name__ == "__main__":
    main()
