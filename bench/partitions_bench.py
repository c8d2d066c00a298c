"""Partitions sweep: what a partition costs, and whether throughput holds as their number grows.

For each partition count (default 4, 16, 64, 128, 256), on one local Ray:

- the same number of bare Ray actors (num_cpus=0, one trivial method) are started, timed,
  measured and killed: the floor a process per replica sits on, measured in the same run;
- a topic of that many partitions (RF=1) is created, timed;
- memory per process, both ways: the drop of the machine's available memory divided by the
  count, and the mean USS (memory unique to the process) of the processes;
- idle CPU per process: the processes' CPU time over an idle window, as % of one core;
- one producer's ``send_batch`` and one consumer's ``poll_batch`` over ``max(records,
  partitions x 16,000)`` 100-byte records (so every partition gets MB-sized batches), the median
  of --runs runs, and each as a ratio to the first partition count's rate.

A count whose replicas would take more than half the machine's CPU just idling (the idle CPU
per replica measured at the count before, times this count) is skipped with a line saying so:
every replica is a process, and 256 on two cores (0.46-0.53% of a core each, 118-136% in all)
starved the controller's answers to heartbeats until the topic's creation failed.

    python -m bench.partitions_bench [--counts 4 16 64 128 256] [--records 2000000] [--runs 3] [--idle-s 15]
                                     [--traffic-up-to 64]

Results go to bench/results/partitions.json.
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

import psutil

from bench.client_bench import consume_columns, make_values, produce_batch

PER_PARTITION_RECORDS = 16_000
"""At 100 bytes, 1.6 MB per partition per run: MB-sized batches for every partition."""
SETTLE_S = 5.0
"""After a burst of process starts the raylet keeps starting spare workers for a few seconds."""
IDLE_CPU_LIMIT = 0.5
"""Share of the machine's cores that a count's idle replicas may take before the count is skipped."""


class Bare:
    def ping(self) -> int:
        return os.getpid()


def processes_cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def mean_uss_mb(pids: list[int]) -> float:
    sizes = []
    for pid in pids:
        try:
            sizes.append(psutil.Process(pid).memory_full_info().uss)
        except psutil.Error:
            pass
    return statistics.mean(sizes) / 1e6 if sizes else 0.0


def idle_cpu_percent(pids: list[int], window_s: float) -> float:
    """Mean % of one core each process used over ``window_s`` of doing nothing asked of it."""
    before = processes_cpu_s(pids)
    time.sleep(window_s)
    return (processes_cpu_s(pids) - before) / window_s / len(pids) * 100


def wait_gone(pids: list[int], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.5)


def measure_processes(start, count: int, idle_s: float) -> dict:
    """Start ``count`` processes with ``start()`` (returns their pids), then measure them."""
    available = psutil.virtual_memory().available
    t0 = time.perf_counter()
    pids = start()
    created_s = time.perf_counter() - t0
    # The CPU each process had spent once all were up: its start (Ray's worker, imports, the
    # actor's __init__ and, for a replica, its attach), plus its idling while the rest started.
    start_cpu_ms = processes_cpu_s(pids) / count * 1000
    time.sleep(SETTLE_S)
    drop_mb = (available - psutil.virtual_memory().available) / count / 1e6
    return {"create_s": created_s, "start_cpu_ms": start_cpu_ms, "available_drop_mb": drop_mb,
            "uss_mb": mean_uss_mb(pids), "idle_cpu_percent": idle_cpu_percent(pids, idle_s), "pids": pids}


def run(counts: list[int], records: int, runs: int, idle_s: float, traffic_up_to: int = 1 << 30) -> dict:
    import ray

    import raylog

    cluster = raylog.connect(data_root=tempfile.mkdtemp(prefix="raylog-bench-"), num_cpus=2)
    admin = cluster.admin()
    bare_class = ray.remote(num_cpus=0)(Bare)
    rows, skipped = [], []
    try:
        for count in counts:
            if rows and (idle := rows[-1]["replica"]["idle_cpu_percent"] * count) > IDLE_CPU_LIMIT * 100 * os.cpu_count():
                reason = (f"{count} idle replicas would take {idle:.0f}% of a core ({rows[-1]['replica']['idle_cpu_percent']:.2f}% "
                          f"each, measured at {rows[-1]['partitions']}), over {IDLE_CPU_LIMIT:.0%} of this machine's "
                          f"{os.cpu_count()} cores: the controller and the replicas would starve")
                print(f"{count:>4} partitions skipped: {reason}", flush=True)
                skipped.append({"partitions": count, "reason": reason})
                continue
            bare_actors = []

            def start_bare():
                bare_actors.extend(bare_class.remote() for _ in range(count))
                return ray.get([a.ping.remote() for a in bare_actors])

            bare = measure_processes(start_bare, count, idle_s)
            for actor in bare_actors:
                ray.kill(actor)
            wait_gone(bare.pop("pids"))
            time.sleep(SETTLE_S)

            topic = f"sweep-{count}-{uuid.uuid4().hex[:6]}"

            def start_replicas():
                admin.create_topic(topic, count)
                return [p["pid"] for p in admin.describe_partitions(topic)]

            replicas = measure_processes(start_replicas, count, idle_s)
            pids = replicas.pop("pids")
            n = max(records, count * PER_PARTITION_RECORDS)
            produced, consumed = [], []
            if count <= traffic_up_to:
                values = make_values(n)
                for _ in range(runs):
                    produced.append(n / produce_batch(cluster, topic, values).wall)
                del values
                total = n * runs
                for _ in range(runs):
                    consumed.append(total / consume_columns(cluster, topic, total).wall)
            admin.delete_topics([topic])
            wait_gone(pids)
            time.sleep(SETTLE_S)
            row = {"partitions": count, "records": n if produced else 0, "bare": bare, "replica": replicas,
                   "produce_rate": statistics.median(produced) if produced else None,
                   "consume_rate": statistics.median(consumed) if consumed else None,
                   "produce_runs": produced, "consume_runs": consumed}
            rows.append(row)
            print_row(row, rows[0])
    finally:
        ray.shutdown()
    out = {"records": records, "runs": runs, "idle_s": idle_s, "rows": rows, "skipped": skipped}
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "partitions.json").write_text(json.dumps(out, indent=2))
    return out


def print_row(row: dict, first: dict) -> None:
    b, r = row["bare"], row["replica"]
    print(f"{row['partitions']:>4} partitions ({row['records']:,} records/run)", flush=True)
    print(f"    create: topic {r['create_s']:.1f} s, as many bare actors {b['create_s']:.1f} s; CPU per process by "
          f"then: replica {r['start_cpu_ms']:.0f} ms, bare actor {b['start_cpu_ms']:.0f} ms", flush=True)
    print(f"    memory per process: replica {r['available_drop_mb']:.0f} MB available drop / {r['uss_mb']:.0f} MB USS, "
          f"bare actor {b['available_drop_mb']:.0f} / {b['uss_mb']:.0f} MB "
          f"({r['uss_mb'] / max(b['uss_mb'], 1e-9):.2f}x USS)", flush=True)
    print(f"    idle CPU per process: replica {r['idle_cpu_percent']:.2f}% of a core, bare actor "
          f"{b['idle_cpu_percent']:.2f}%; all {row['partitions']} replicas {r['idle_cpu_percent'] * row['partitions']:.0f}%",
          flush=True)
    if row["produce_rate"] is None:
        print("    (no traffic: above --traffic-up-to)", flush=True)
    elif first["produce_rate"] is not None:
        print(f"    send_batch {row['produce_rate'] / 1e6:.2f} M rec/s ({row['produce_rate'] / first['produce_rate']:.2f}x), "
              f"poll_batch {row['consume_rate'] / 1e6:.2f} M rec/s ({row['consume_rate'] / first['consume_rate']:.2f}x)",
              flush=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[4, 16, 64, 128, 256])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--traffic-up-to", type=int, default=1 << 30,
                        help="measure rates only at partition counts up to this (memory: 256 replicas under load "
                             "outgrew 24 GiB here)")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    return run(args.counts, args.records, args.runs, args.idle_s, args.traffic_up_to)


if __name__ == "__main__":
    main()
