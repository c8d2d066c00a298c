"""Producer throughput while stored data grows (Kafka's "does not fall as data grows" row).

One producer (send_batch, 100-byte records, RF=1) fills a topic of 6 partitions until the log
holds --gb gigabytes, and every --every seconds the bench samples: the records/s of that slice,
the bytes stored (the topic's files on disk), the kernel's dirty and writeback pages, the page
cache, and the resident memory of the producer and of the replica processes. Those columns are
what tell a fall's cause apart (dirty-page writeback, segment rolls, index growth, the page cache,
a process's growing memory). The verdict is the last minute's rate over the first minute's (the
last fifth of the samples over the first fifth when the fill takes under five minutes).

    python -m bench.stored_data [--gb 10] [--every 2]
    python -m bench.stored_data --gb 50      # needs ~55 GB free under --dir
    python -m bench.stored_data --page-cache-probe 8   # the kernel's cost per GiB, with and without drop-behind
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

from bench.client_bench import RECORD_BYTES, make_values

CHUNK = 100_000       # records per send_batch call
IN_FLIGHT = 4         # send_batch calls outstanding before the producer waits for the oldest


def meminfo_mb() -> dict[str, float]:
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) / 1024
    return {"dirty_mb": fields["Dirty"], "writeback_mb": fields["Writeback"], "cached_mb": fields["Cached"]}


def tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def replica_rss_mb(pids: list[int]) -> float:
    import psutil

    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def cpu_by_process() -> dict[str, float]:
    """CPU seconds so far of every process on the machine, summed by name (Ray names its workers
    by actor class: ray::PartitionReplica)."""
    import psutil

    out: dict[str, float] = {}
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is None:
            continue
        cmd = proc.info["cmdline"] or []
        name = cmd[0].split()[0] if cmd and cmd[0].startswith("ray::") else proc.info["name"] or "?"
        out[name] = out.get(name, 0.0) + times.user + times.system
    return out


def system_cpu_s() -> dict[str, float]:
    """The machine's user, system (with irq and softirq) and iowait CPU seconds so far."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return {"user": (fields[0] + fields[1]) / tick, "system": (fields[2] + fields[5] + fields[6]) / tick,
            "iowait": fields[4] / tick}


def run(gb: float, every_s: float, partitions: int = 6, directory: str | None = None,
        out_name: str = "stored_data.json") -> dict:
    import psutil
    import ray

    import raylog

    data_root = tempfile.mkdtemp(prefix="raylog-stored-", dir=directory)
    cluster = raylog.connect(data_root=data_root, num_cpus=2)
    values = make_values(1_000_000)
    target = int(gb * 1e9)
    samples: list[dict] = []
    topic = f"stored-{uuid.uuid4().hex[:6]}"
    try:
        cluster.admin().create_topic(topic, partitions)
        pids = [d["pid"] for d in cluster.admin().describe_partitions(topic)]
        time.sleep(3)
        producer = cluster.producer()
        me = psutil.Process()
        cpu_last, system_last = cpu_by_process(), system_cpu_s()
        start = last = time.perf_counter()
        sent = sent_at_last = 0
        stored = 0
        futures = []
        print(f"stored data: filling {gb:g} GB of {RECORD_BYTES}-byte records into {partitions} partitions, "
              f"a sample every {every_s:g} s", flush=True)
        while stored < target:
            offset = sent % len(values)
            chunk = values[offset:offset + CHUNK]
            futures.append(producer.send_batch(topic, chunk))
            sent += len(chunk)
            if len(futures) > IN_FLIGHT:
                futures.pop(0).wait(timeout=600)
            now = time.perf_counter()
            if now - last >= every_s:
                for f in futures:
                    f.wait(timeout=600)
                futures.clear()
                now = time.perf_counter()
                stored = tree_bytes(Path(data_root))
                sample = {"t_s": round(now - start, 2), "records": sent,
                          "rate": (sent - sent_at_last) / (now - last), "stored_gb": stored / 1e9,
                          "producer_rss_mb": me.memory_info().rss / 2**20,
                          "replicas_rss_mb": replica_rss_mb(pids), **meminfo_mb()}
                cpu_now, system_now = cpu_by_process(), system_cpu_s()
                busy = {k: round((v - cpu_last.get(k, 0.0)) / (now - last), 3) for k, v in cpu_now.items()}
                sample["cores_by_process"] = {k: v for k, v in sorted(busy.items(), key=lambda kv: -kv[1]) if v >= 0.02}
                sample["cores"] = {k: round((v - system_last[k]) / (now - last), 3) for k, v in system_now.items()}
                cpu_last, system_last = cpu_now, system_now
                samples.append(sample)
                print(f"  {sample['t_s']:7.1f} s  {sample['stored_gb']:6.2f} GB  {sample['rate']:>11,.0f} rec/s  "
                      f"dirty {sample['dirty_mb']:6.0f} MB  writeback {sample['writeback_mb']:5.0f} MB  "
                      f"cache {sample['cached_mb'] / 1024:5.1f} GiB  producer {sample['producer_rss_mb']:5.0f} MB  "
                      f"replicas {sample['replicas_rss_mb']:5.0f} MB", flush=True)
                print("           cores: " + ", ".join(f"{k} {v:.2f}" for k, v in sample["cores"].items()) + "; " +
                      ", ".join(f"{k} {v:.2f}" for k, v in list(sample["cores_by_process"].items())[:6]), flush=True)
                last, sent_at_last = now, sent
        producer.close()
    finally:
        ray.shutdown()
        shutil.rmtree(data_root, ignore_errors=True)

    # The first and the last minute, or fifth of the samples if the fill took under five minutes.
    span = max(1, min(len([x for x in samples if x["t_s"] <= 60]), len(samples) // 5))
    first = statistics.median(x["rate"] for x in samples[:span])
    final = statistics.median(x["rate"] for x in samples[-span:])
    result = {"gb": gb, "partitions": partitions, "every_s": every_s, "samples": samples,
              "samples_compared": span, "first_rate": first, "last_rate": final, "ratio": final / first}
    print(f"stored data: first {span} samples {first:,.0f} rec/s, last {span} {final:,.0f} rec/s at "
          f"{samples[-1]['stored_gb']:.1f} GB: {final / first:.2f}x", flush=True)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / out_name).write_text(json.dumps(result, indent=2))
    return result


def page_cache_probe(gib: int, directory: str | None = None) -> dict:
    """The cost under row 10, without Ray: one file written 1 MiB at a time, ``gib`` GiB, first
    leaving the page cache to the kernel, then with drop-behind (page_cache.py, a 256 MiB window);
    the machine's kernel CPU seconds and wall seconds per GiB, GiB by GiB."""
    from raylog.storage.page_cache import DropBehind

    chunk = os.urandom(1 << 20)
    out: dict[str, list[dict]] = {}
    for mode in ("kernel decides", "drop-behind"):
        fd, path = tempfile.mkstemp(prefix="raylog-page-cache-probe-", dir=directory)
        drop = DropBehind(fd, 256 << 20) if mode == "drop-behind" else None
        rows = out[mode] = []
        position = 0
        try:
            for _ in range(gib):
                before, wall = system_cpu_s(), time.perf_counter()
                for _ in range(1024):
                    os.pwrite(fd, chunk, position)
                    position += len(chunk)
                    if drop is not None:
                        drop.advance(position)
                after = system_cpu_s()
                rows.append({"wall_s": time.perf_counter() - wall, "system_s": after["system"] - before["system"],
                             "cached_gib": meminfo_mb()["cached_mb"] / 1024})
                print(f"  {mode:15s} GiB {len(rows):3d}: {rows[-1]['wall_s']:.2f} s, kernel CPU "
                      f"{rows[-1]['system_s']:.2f} s, page cache {rows[-1]['cached_gib']:.1f} GiB", flush=True)
        finally:
            os.close(fd)
            os.unlink(path)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--dir", default=None, help="where the log lives (default: the temp directory)")
    parser.add_argument("--page-cache-probe", type=int, metavar="GIB",
                        help="instead: write GIB GiB to one file with and without drop-behind, no Ray")
    args = parser.parse_args(argv)
    if args.page_cache_probe:
        return page_cache_probe(args.page_cache_probe, args.dir)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    return run(args.gb, args.every, args.partitions, args.dir)


if __name__ == "__main__":
    main()
