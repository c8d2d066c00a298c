"""Kafka's reference table, row by row, on this machine, with Kafka's published figures beside.

The reference is Kafka's "2 million writes per second (on three cheap machines)" post: 100-byte
records, 6 partitions, each row below the same measurement on raylog. Rows 2-4 need three nodes:
they run on a simulated 3-node Ray cluster on this one machine (every node shares its 2 cores) and
say so. Row 10 (throughput while stored data grows) is bench/stored_data.py.

  1. one producer, 6 partitions, RF=1              5. one consumer
  2. RF=3, acks=1 (Kafka: "3x async replication")  6. three consumers in one group
  3. RF=3, acks="all" ("3x sync replication")      7. one producer and one consumer at once
  4. three producer processes, RF=3, acks=1         8. record size 10 B to 100 KB
  9. end-to-end latency p50/p99/p99.9 at 1,000 records/s, quiet and with a busy process beside it

Producers use send_batch (the batching a Kafka producer does for its caller), consumers
poll_batch; every rate is the median of --runs runs with its min and max.

    python -m bench kafka [--records 2000000] [--runs 3] [--quick]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np
import ray

from bench.client_bench import RECORD_BYTES, consume_columns, e2e_latency_ms, make_values, produce_batch

PARTITIONS = 6
CHUNK = 100_000

# Kafka's published figures (records/s; latency in ms), same row numbers.
KAFKA = {
    "1": 821_557, "2": 786_980, "3": 421_823, "4": 2_024_032,
    "5": 940_521, "6": 2_615_968, "7": 795_064, "9": [2.0, 3.0, 14.0],
}
SIZES = [10, 100, 1_000, 10_000, 100_000]


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def say(line: str) -> None:
    print(line, flush=True)


@ray.remote(num_cpus=0, max_restarts=0)
class ProducerProcess:
    """A producer in its own process (Kafka's row 4 runs three on three machines)."""

    def __init__(self, records: int, seed: int, acks):
        import raylog

        self.cluster = raylog.connect(address="auto")
        self.values = make_values(records, seed)
        self.acks = acks

    def produce(self, topic: str) -> tuple[float, float]:
        producer = self.cluster.producer(acks=self.acks)
        start = time.time()
        futures = [producer.send_batch(topic, self.values[i:i + CHUNK]) for i in range(0, len(self.values), CHUNK)]
        for f in futures:
            f.wait(timeout=600)
        end = time.time()
        producer.close()
        return start, end


@ray.remote(num_cpus=0, max_restarts=0)
class ConsumerProcess:
    """A consumer in its own process, reading a topic from the start until it has ``expected``."""

    def __init__(self):
        import raylog

        self.cluster = raylog.connect(address="auto")

    def consume(self, topic: str, expected: int) -> tuple[float, float]:
        consumer = self.cluster.consumer(topic, auto_offset_reset="earliest")
        n = 0
        start = time.time()
        while n < expected:
            for chunk in consumer.poll_batch(timeout_ms=5000):
                n += len(chunk)
        end = time.time()
        consumer.close()
        return start, end


@ray.remote(num_cpus=0, max_restarts=0)
class GroupMember:
    """One member of a consumer group, in its own process."""

    def __init__(self, topic: str, group: str):
        import raylog

        self.consumer = raylog.connect(address="auto").consumer(
            group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
        self.consumer.subscribe([topic])

    def join(self) -> list[int]:
        """Poll once (joining, or heartbeating) and say which partitions this member owns."""
        self.consumer.poll_batch(timeout_ms=200, max_records=1)
        return sorted(tp.partition for tp in self.consumer.assignment())

    def consume(self) -> tuple[float, float, int]:
        """From the start of what it owns to the end offsets as of now: (start, end, records), or
        records -1 if the group moved a partition meanwhile (the caller measures again)."""
        owned = set(self.consumer.assignment())
        self.consumer.seek_to_beginning(*owned)
        ends = self.consumer.end_offsets(list(owned))
        n = 0
        start = time.time()
        while any(self.consumer.position(tp) < ends[tp] for tp in owned):
            for chunk in self.consumer.poll_batch(timeout_ms=1000):
                n += len(chunk)
            if self.consumer.assignment() != owned:
                return start, time.time(), -1
        return start, time.time(), n

    def close(self) -> None:
        self.consumer.close()


def group_rate(topic: str, members: int, records: int) -> float:
    """Records/s of ``members`` consumers in one group reading ``topic`` from its start, timed
    once the group has settled (every partition owned, by every member)."""
    group = f"kt-group-{uuid.uuid4().hex[:6]}"
    actors = [GroupMember.remote(topic, group) for _ in range(members)]
    try:
        deadline = time.monotonic() + 120
        for _attempt in range(3):
            # Settled: every partition owned, as evenly as the assignor spreads them, twice in a row
            # (a group between two assignments can cover every partition unevenly for a moment).
            previous = None
            while True:
                owned = ray.get([a.join.remote() for a in actors])
                sizes = [len(ps) for ps in owned]
                if (sorted(p for ps in owned for p in ps) == list(range(PARTITIONS))
                        and max(sizes) - min(sizes) <= 1 and owned == previous):
                    break
                previous = owned
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the group did not settle: {owned}")
            spans = ray.get([a.consume.remote() for a in actors])
            if all(n >= 0 for _, _, n in spans):
                break
        else:
            raise RuntimeError("the group moved partitions during each of 3 measurements")
        if sum(n for _, _, n in spans) < records:
            raise RuntimeError(f"the group read {sum(n for _, _, n in spans):,} of {records:,} records")
        return records / (max(e for _, e, _ in spans) - min(s for s, _, _ in spans))
    finally:
        for a in actors:
            ray.get(a.close.remote())
            ray.kill(a)


def fresh_topic(cluster, partitions: int = PARTITIONS, **kwargs) -> str:
    topic = f"kt-{uuid.uuid4().hex[:8]}"
    cluster.admin().create_topic(topic, partitions, **kwargs)
    time.sleep(1)  # the raylet's spare workers after a burst of replica actors
    return topic


def single_node_rows(records: int, runs: int, latency_samples: int, sizes: list[int]) -> dict:
    import raylog

    cluster = raylog.connect(data_root=tempfile.mkdtemp(prefix="raylog-kafka-table-"), num_cpus=2)
    values = make_values(records)
    rows: dict = {}
    try:
        one, consume, group, both_p, both_c = [], [], [], [], []
        for r in range(runs):
            topic = fresh_topic(cluster)
            one.append(records / produce_batch(cluster, topic, values).wall)
            consume.append(records / consume_columns(cluster, topic, records).wall)
            group.append(group_rate(topic, 3, records))
            cluster.admin().delete_topics([topic])
            topic = fresh_topic(cluster)
            reader = ConsumerProcess.remote()
            ray.get(reader.__ray_ready__.remote())
            reading = reader.consume.remote(topic, records)
            with_consumer = produce_batch(cluster, topic, values)
            c_start, c_end = ray.get(reading)
            both_p.append(records / with_consumer.wall)
            both_c.append(records / (c_end - c_start))
            ray.kill(reader)
            cluster.admin().delete_topics([topic])
            say(f"  run {r + 1}/{runs}: row 1 {one[-1]:,.0f}, row 5 {consume[-1]:,.0f}, row 6 {group[-1]:,.0f}, "
                f"row 7 {both_p[-1]:,.0f} / {both_c[-1]:,.0f} records/s")
        rows["1"] = spread(one)
        rows["5"] = spread(consume)
        rows["6"] = spread(group)
        rows["7"] = {"producer": spread(both_p), "consumer": spread(both_c)}
        del values

        by_size = {}
        for size in sizes:
            # The same bytes per run for every size (at least 2,000 records), so big records do not take minutes.
            n = max(2_000, min(records, 200_000_000 // size))
            block = np.random.default_rng(size).integers(65, 91, n * size, dtype=np.uint8).tobytes()
            sized = [block[i * size:(i + 1) * size] for i in range(n)]
            rates = []
            for _ in range(runs):
                topic = fresh_topic(cluster)
                rates.append(n / produce_batch(cluster, topic, sized, chunk=max(1, min(CHUNK, 8_000_000 // size))).wall)
                cluster.admin().delete_topics([topic])
            row = spread(rates)
            row.update(records=n, mb_per_s=row["median"] * size / 1e6)
            by_size[str(size)] = row
            say(f"  row 8, {size:>6,} B: {row['median']:>11,.0f} records/s, {row['mb_per_s']:7.1f} MB/s")
        rows["8"] = by_size

        topic = fresh_topic(cluster, 1)
        latency: dict[str, list] = {"quiet": [], "busy": []}
        samples_kept: dict[str, list[float]] = {"quiet": [], "busy": []}
        for _ in range(runs):
            quiet = e2e_latency_ms(cluster, topic, latency_samples)
            busy_proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                busy = e2e_latency_ms(cluster, topic, latency_samples)
            finally:
                busy_proc.kill()
                busy_proc.wait()
            for mode, samples in (("quiet", quiet), ("busy", busy)):
                latency[mode].append(np.percentile(samples, [50, 99, 99.9]).tolist())
                samples_kept[mode] += samples
        rows["9"] = {mode: {"p50_p99_p999_ms": [statistics.median(c[i] for c in cuts) for i in range(3)],
                            "runs": cuts, "samples_ms": sorted(round(s, 4) for s in samples_kept[mode])}
                     for mode, cuts in latency.items()}
    finally:
        ray.shutdown()
    return rows


def replicated_rows(records: int, runs: int) -> dict:
    from tests.support.cluster import simulated_cluster

    values = make_values(records)
    rates: dict[str, list[float]] = {"2": [], "3": [], "4": []}
    with simulated_cluster(tempfile.mkdtemp(prefix="raylog-kafka-table-rf3-"), workers=3) as sim:
        cluster = sim.cluster
        share = records // 3
        producers = [ProducerProcess.remote(share, seed, 1) for seed in range(3)]
        ray.get([p.__ray_ready__.remote() for p in producers])
        for r in range(runs):
            for row, acks in (("2", 1), ("3", "all")):
                topic = fresh_topic(cluster, replication_factor=3, min_insync_replicas=2)
                producer = cluster.producer(acks=acks)
                start = time.perf_counter()
                futures = [producer.send_batch(topic, values[i:i + CHUNK]) for i in range(0, len(values), CHUNK)]
                for f in futures:
                    f.wait(timeout=600)
                rates[row].append(records / (time.perf_counter() - start))
                producer.close()
                cluster.admin().delete_topics([topic])
            topic = fresh_topic(cluster, replication_factor=3, min_insync_replicas=2)
            spans = ray.get([p.produce.remote(topic) for p in producers])
            rates["4"].append(share * 3 / (max(e for _, e in spans) - min(s for s, _ in spans)))
            cluster.admin().delete_topics([topic])
            say(f"  run {r + 1}/{runs}: row 2 {rates['2'][-1]:,.0f}, row 3 {rates['3'][-1]:,.0f}, "
                f"row 4 {rates['4'][-1]:,.0f} records/s (simulated 3-node cluster)")
        for p in producers:
            ray.kill(p)
    return {row: spread(v) for row, v in rates.items()}


LABELS = {
    "1": "one producer, 6 partitions, RF=1",
    "2": "RF=3 acks=1 (3 simulated nodes)",
    "3": "RF=3 acks=all (3 simulated nodes)",
    "4": "3 producer processes, RF=3 acks=1 (3 sim. nodes)",
    "5": "one consumer",
    "6": "three consumers in one group",
    "7": "producer and consumer at once",
}


def print_table(rows: dict) -> None:
    say(f"\n{'row':<54}{'raylog rec/s':>14}{'min-max':>24}{'Kafka':>12}{'ratio':>8}")
    for row, label in LABELS.items():
        if row not in rows:
            continue
        entries = [(label, rows[row])] if row != "7" else [
            (f"{label}: producer", rows[row]["producer"]), (f"{label}: consumer", rows[row]["consumer"])]
        for text, r in entries:
            ours, kafka = r["median"], KAFKA[row]
            say(f"{row + '. ' + text:<54}{ours:>14,.0f}{r['min']:>12,.0f}-{r['max']:<11,.0f}{kafka:>12,}"
                f"{ours / kafka:>7.2f}x")
    if "8" in rows:
        for size, r in rows["8"].items():
            say(f"{'8. record size ' + f'{int(size):,} B':<54}{r['median']:>14,.0f}{r['min']:>12,.0f}-{r['max']:<11,.0f}"
                f"{r['mb_per_s']:>10.1f} MB/s")
    if "9" in rows:
        for mode, r in rows["9"].items():
            p50, p99, p999 = r["p50_p99_p999_ms"]
            say(f"{'9. end-to-end latency, ' + mode:<54}p50 {p50:.2f} ms, p99 {p99:.2f} ms, p99.9 {p999:.2f} ms "
                f"(Kafka 2 / 3 / 14 ms)")


def run(records: int, runs: int, latency_samples: int, sizes: list[int], replicated: bool = True) -> dict:
    import json
    import os
    from pathlib import Path

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    say(f"Kafka's table: {records:,} x {RECORD_BYTES}-byte records, {PARTITIONS} partitions, median of {runs} runs")
    rows = single_node_rows(records, runs, latency_samples, sizes)
    if replicated:
        rows.update(replicated_rows(records, runs))
    else:
        say("  rows 2-4 skipped (--quick: they need the simulated 3-node cluster)")
    print_table(rows)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "kafka.json").write_text(json.dumps(
        {"records": records, "runs": runs, "partitions": PARTITIONS, "kafka": KAFKA, "rows": rows}, indent=1))
    return rows
