"""Soak: an hour of steady produce and consume, with the memory of every raylog process sampled.

A producer sends a steady stream (send_batch of 1,000 records of 100 bytes every 50 ms, about
20,000 records/s) and per-record send()s beside it; a consumer group of one member polls and
commits every second; a 3-partition topic rolls 64 MiB segments and keeps 5 minutes of them, so
retention deletes segments all along (the steady state of a long-running log). Every 30 s the
USS (memory only this process holds) and RSS of each raylog process are sampled: the replicas,
the controller, the group coordinator, and this driver (the clients).

The verdict per process: the median of the last tenth of the run against the median of its
second tenth (the first is warm-up), as growth in MB and percent. "Flat" means no process grew by
more than 10 % and 16 MiB.

    python -m bench.soak [--minutes 60]      (make soak; SOAK_MINUTES sets the length)

Writes bench/results/soak.json (every sample, the verdict) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read by Ray at import: loopback only

import psutil  # noqa: E402
import ray  # noqa: E402

from bench.client_bench import make_values  # noqa: E402

SAMPLE_S = 30.0
GROWTH_LIMIT = (0.10, 16 * 1024 * 1024)
"""Growth over which a process is not flat: both 10 % and 16 MiB."""


def processes(cluster, topic: str, group: str) -> dict[str, int]:
    """name -> pid of every raylog process: replicas, controller, coordinators, this driver."""
    from raylog.consumer.group_member import coordinator_for

    admin = cluster.admin()
    pids = {f"replica {topic}-{p['partition']}": p["pid"] for p in admin.describe_partitions(topic) if "pid" in p}
    for p in admin.describe_partitions("__consumer_offsets"):
        if "pid" in p:
            pids[f"replica __consumer_offsets-{p['partition']}"] = p["pid"]
    pids["controller"] = ray.get(cluster.controller.ping.remote())
    pids["coordinator"] = ray.get(coordinator_for(cluster, group, 30).ping.remote())
    pids["driver (clients)"] = os.getpid()
    return pids


def sample(pids: dict[str, int]) -> dict[str, tuple[int, int]]:
    """name -> (USS, RSS) in bytes of every process of ``pids`` still alive."""
    out = {}
    for name, pid in pids.items():
        try:
            info = psutil.Process(pid).memory_full_info()
            out[name] = (info.uss, info.rss)
        except psutil.Error:
            pass
    return out


def run(minutes: float) -> dict:
    """The soak on a fresh local cluster for ``minutes``; returns ``verdict``'s result."""
    import raylog

    cluster = raylog.connect(data_root=tempfile.mkdtemp(prefix="raylog-soak-"), num_cpus=2,
                             cluster_config={"offsets_topic_num_partitions": 1})
    topic, group = f"soak-{uuid.uuid4().hex[:6]}", "soak-group"
    cluster.admin().create_topic(topic, 3, retention_ms=5 * 60 * 1000, segment_bytes=64 * 1024 * 1024)
    values = make_values(1000)
    stop = threading.Event()
    counts = {"sent": 0, "consumed": 0, "errors": 0}

    def produce() -> None:
        producer = cluster.producer(linger_ms=5)
        n = 0
        while not stop.is_set():
            try:
                producer.send_batch(topic, values)
                for i in range(20):
                    producer.send(topic, values[i], key=b"k%d" % (n % 64))
                    n += 1
                counts["sent"] += len(values) + 20
            except raylog.RaylogError:
                counts["errors"] += 1
            time.sleep(0.05)
        producer.close()

    def consume() -> None:
        consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
        consumer.subscribe([topic])
        last_commit = time.monotonic()
        while not stop.is_set():
            try:
                counts["consumed"] += sum(len(c) for c in consumer.poll_batch(timeout_ms=200))
                if time.monotonic() - last_commit >= 1:
                    consumer.commit()
                    last_commit = time.monotonic()
            except raylog.RaylogError:
                counts["errors"] += 1
        consumer.close()

    threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
    for t in threads:
        t.start()
    time.sleep(5)
    pids = processes(cluster, topic, group)
    samples: list[dict] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < minutes * 60:
            at = round(time.monotonic() - started)
            got = sample(pids)
            samples.append({"t_s": at, "sent": counts["sent"], "consumed": counts["consumed"],
                            "uss": {k: v[0] for k, v in got.items()}, "rss": {k: v[1] for k, v in got.items()}})
            total = sum(v[0] for v in got.values()) / 2**20
            print(f"[{at:5d} s] sent {counts['sent']:,}, consumed {counts['consumed']:,}, errors {counts['errors']}, "
                  f"raylog USS {total:,.0f} MB", flush=True)
            time.sleep(SAMPLE_S)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        ray.shutdown()
    return verdict(samples, minutes, counts)


def verdict(samples: list[dict], minutes: float, counts: dict) -> dict:
    """Growth per process (2nd tenth of the run against the last), printed and written to
    bench/results/soak.json."""
    if not samples:
        raise SystemExit("soak: no memory sample was taken (the run was shorter than its warm-up)")
    n = len(samples)
    tenth = max(1, n // 10)
    early, late = samples[tenth:2 * tenth] or samples[:1], samples[-tenth:]
    rows = {}
    for name in samples[0]["uss"]:
        before = statistics.median(s["uss"][name] for s in early if name in s["uss"])
        after = statistics.median(s["uss"][name] for s in late if name in s["uss"])
        growth = after - before
        rows[name] = {"uss_early_mb": round(before / 2**20, 1), "uss_late_mb": round(after / 2**20, 1),
                      "growth_mb": round(growth / 2**20, 1), "growth_pct": round(100 * growth / max(before, 1), 1),
                      "flat": not (growth > GROWTH_LIMIT[0] * before and growth > GROWTH_LIMIT[1])}
    result = {"minutes": minutes, "machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "records_sent": counts["sent"], "records_consumed": counts["consumed"], "errors": counts["errors"],
              "flat": all(r["flat"] for r in rows.values()), "processes": rows, "samples": samples}
    print(f"\nsoak: {minutes:g} min, {counts['sent']:,} records sent, {counts['consumed']:,} consumed, "
          f"{counts['errors']} errors; USS per process, 2nd tenth -> last tenth of the run")
    for name, r in rows.items():
        print(f"  {name:<34} {r['uss_early_mb']:>7.1f} -> {r['uss_late_mb']:>7.1f} MB  "
              f"({r['growth_mb']:+.1f} MB, {r['growth_pct']:+.1f} %) {'flat' if r['flat'] else 'GROWS'}")
    print("verdict:", "flat" if result["flat"] else "memory grows")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv=None) -> dict:
    """Command line: exits 1 when a process's memory grows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 60)))
    args = parser.parse_args(argv)
    result = run(args.minutes)
    raise SystemExit(0 if result["flat"] else 1)


if __name__ == "__main__":
    main()
