"""A new user's first minute (issue 33): a kafka-python program on a brand-new local cluster.

Each run starts a new local Ray in a child process, and there, with raylog's kafka-python names:
connect, create a 3-partition topic, send 3,000 records with get() on the last, then iterate a
KafkaConsumer(topic, group_id=...). Rows (seconds, medians of --runs runs):

- connect: raylog.connect() on a new local Ray (Ray's own start is most of it)
- create + send: the topic created and 3,000 records acknowledged
- first record: from the consumer's construction to the first record its iteration yields (its
  group's first join is most of it)

with ``__consumer_offsets`` made as the cluster starts (offsets_topic_eager, the default), made
by the first group, and, the baseline in the same run, made by the first group with 8 partitions
(the defaults before issue 33). Also the idle memory (RSS) of
one replica process and one group coordinator process, against a bare Ray actor's.

    python -m bench.first_minute [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RECORDS = 3000

CHILD = r"""
import json, os, sys, time
import psutil, ray
import raylog
from raylog import KafkaAdminClient, KafkaConsumer, KafkaProducer, NewTopic

eager, partitions = sys.argv[1] == "1", int(sys.argv[3])
t0 = time.perf_counter()
cluster = raylog.connect("local", data_root=sys.argv[2], num_cpus=2,
                         cluster_config={"offsets_topic_eager": eager, "offsets_topic_num_partitions": partitions})
t_connect = time.perf_counter() - t0
t0 = time.perf_counter()
KafkaAdminClient().create_topics([NewTopic("first-minute", 3, 1)])
producer = KafkaProducer()
futures = [producer.send("first-minute", b"%d" % i, key=b"k%d" % (i % 50)) for i in range(RECORDS)]
futures[-1].get(timeout=60)
producer.close()
t_send = time.perf_counter() - t0
t0 = time.perf_counter()
consumer = KafkaConsumer("first-minute", group_id="first-group", auto_offset_reset="earliest",
                         consumer_timeout_ms=60000)
first = None
count = 0
for _ in consumer:
    count += 1
    if first is None:
        first = time.perf_counter() - t0
    if count == RECORDS:
        break
consumer.close()


@ray.remote(num_cpus=0)
class Bare:
    def pid(self):
        return os.getpid()


bare = Bare.remote()
pids = {"bare": ray.get(bare.pid.remote())}
admin = cluster.admin()
replica = admin.describe_replicas("first-minute", 0)[0]
pids["replica"] = replica["pid"]
from raylog.naming import coordinator_actor_name
pids["coordinator"] = ray.get(ray.get_actor(coordinator_actor_name(0), namespace="raylog").ping.remote())
time.sleep(5)  # idle, as a replica between requests
rss = {name: psutil.Process(pid).memory_info().rss / 2**20 for name, pid in pids.items()}
print(json.dumps({"connect": t_connect, "send": t_send, "first_record": first, "count": count, "rss_mb": rss}))
ray.shutdown()
""".replace("RECORDS", str(RECORDS))


MODES = {
    "eager": (True, 1, "offsets topic with the cluster"),
    "lazy": (False, 1, "made by the first group"),
    "before": (False, 8, "by the first group, 8 partitions"),
}
"""Mode -> (offsets_topic_eager, offsets_topic_num_partitions, label); "before" is issue 33's
starting point (the defaults until then)."""


def one_run(eager: bool, partitions: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="raylog-first-minute-") as root:
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
        out = subprocess.run([sys.executable, "-c", CHILD, "1" if eager else "0", root, str(partitions)], env=env,
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"no result: {out.stdout[-2000:]} {out.stderr[-2000:]}")
        got = json.loads(lines[-1])
        if got["count"] != RECORDS:
            raise RuntimeError(f"the first group read {got['count']} of {RECORDS} records")
        return got


def run(runs: int) -> dict:
    rows: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES}
    for _ in range(runs):
        for mode, (eager, partitions, _) in MODES.items():
            got = one_run(eager, partitions)
            for key in ("connect", "send", "first_record"):
                rows[mode].setdefault(key, []).append(got[key])
            for name, mb in got["rss_mb"].items():
                rows[mode].setdefault(f"rss_{name}_mb", []).append(mb)
    med = {mode: {k: statistics.median(v) for k, v in r.items()} for mode, r in rows.items()}
    print(f"first minute on a new local cluster, median of {runs} runs (seconds)")
    for mode, (_, _, label) in MODES.items():
        m = med[mode]
        print(f"  {label:32s} connect {m['connect']:.2f}  create+send {m['send']:.2f}  "
              f"first record {m['first_record']:.2f}")
    m = med["eager"]
    print(f"  idle RSS: bare actor {m['rss_bare_mb']:.0f} MB, replica {m['rss_replica_mb']:.0f} MB "
          f"({m['rss_replica_mb'] / m['rss_bare_mb']:.2f}x), coordinator {m['rss_coordinator_mb']:.0f} MB "
          f"({m['rss_coordinator_mb'] / m['rss_bare_mb']:.2f}x)")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "first_minute.json").write_text(json.dumps({"median": med, "runs": rows}, indent=2))
    return med


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    return run(args.runs)


if __name__ == "__main__":
    main()
