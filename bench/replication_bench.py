"""Replication benchmark: one producer, 100-byte records, 3 simulated nodes (plus Ray's head).

Rows, each the median of --runs runs, in records/s and as the ratio to RF=1 in the same run:

- RF=1, acks=1 (the baseline)
- RF=3, acks=1 (the leader answers after its own append; followers copy behind)
- RF=3, acks="all" (the leader answers once every in-sync replica has the batch)

The producer uses send_batch; each topic has one partition per worker node, so each node leads
one. Also printed: what replication cost in Ray calls, from the replicas' counters (follower
fetches served, bytes they carried, calls per MB). Every process shares this machine's cores:
the producer, three leaders, six followers and four raylets.

    python -m bench.replication_bench [--records 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.client_bench import RECORD_BYTES, make_values

CASES = [("rf1_acks1", 1, 1), ("rf3_acks1", 3, 1), ("rf3_acksall", 3, "all")]


def produce(cluster, topic: str, values: list[bytes], acks, chunk: int = 100_000) -> float:
    producer = cluster.producer(acks=acks)
    start = time.perf_counter()
    futures = [producer.send_batch(topic, values[i:i + chunk]) for i in range(0, len(values), chunk)]
    for f in futures:
        f.wait(timeout=600)
    elapsed = time.perf_counter() - start
    producer.close()
    return len(values) / elapsed


def replication_calls(cluster, topic: str, partitions: int) -> tuple[int, int]:
    calls = bytes_ = 0
    for p in range(partitions):
        for replica in cluster.admin().describe_replicas(topic, p):
            stats = replica.get("replication", {})
            calls += stats.get("follower_fetches_served", 0)
            bytes_ += stats.get("follower_bytes_served", 0)
    return calls, bytes_


def run(records: int, runs: int) -> dict:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from tests.support.cluster import simulated_cluster

    values = make_values(records)
    rates: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
    calls = bytes_ = 0
    with simulated_cluster(tempfile.mkdtemp(prefix="raylog-repl-bench-"), workers=3) as sim:
        cluster = sim.cluster
        for _ in range(runs):
            for name, rf, acks in CASES:
                topic = f"repl-{name}-{uuid.uuid4().hex[:6]}"
                cluster.admin().create_topic(topic, 3, replication_factor=rf,
                                             min_insync_replicas=2 if rf == 3 else 1)
                time.sleep(1)
                rates[name].append(produce(cluster, topic, values, acks))
                if rf == 3:
                    time.sleep(1)  # let the followers' last fetches land in the counters
                    c, b = replication_calls(cluster, topic, 3)
                    calls += c
                    bytes_ += b
                cluster.admin().delete_topics([topic])
    med = {name: statistics.median(v) for name, v in rates.items()}
    base = med["rf1_acks1"]
    print(f"replication bench: {records:,} x {RECORD_BYTES}-byte records, send_batch, 3 partitions on 3 "
          f"simulated nodes, median of {runs} runs")
    for name, rf, acks in CASES:
        print(f"  RF={rf} acks={acks!s:3s}  {med[name]:>12,.0f} records/s  ({med[name] / base:.2f}x RF=1)")
    mb = bytes_ / 1e6
    if calls:
        print(f"  follower fetches: {calls:,} calls carried {mb:,.0f} MB: {bytes_ / calls / 1e6:.2f} MB per call, "
              f"{calls / mb:.2f} calls per MB (includes the empty long polls that wait for new data)")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "replication.json").write_text(json.dumps({"median": med, "runs": rates,
                                                      "follower_calls": calls, "follower_bytes": bytes_}, indent=2))
    return med


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    return run(args.records, args.runs)


if __name__ == "__main__":
    main()
