"""Issue 33's per-record producer and consumer rows on two trees, alternating in one session.

The machines these benches run on change speed from day to day and within the hour (a `Lock`
round trip has measured 40 ns on one day and 390 on another), so an absolute rate says little
about a change; a ratio between trees measured in the same session does. Each pair runs the base
tree (a `git worktree` of ``--base``, made and removed here), then the current one, each in a
process of its own on a new local Ray, with only the public client API both trees have:

- ``random``: issue 33's workload, 200,000 random 100-byte values into 6 partitions: unkeyed
  ``send()`` then ``flush()``; ``send(key)`` with random 1-24-byte keys then ``get()`` of every
  future; ``poll()`` iterating every record of the first 200,000 in the topic;
- ``suite``: the client bench's own ``send`` row, 1,000,000 values of uppercase letters into 2
  partitions, unkeyed ``send()`` then ``flush()``.

Each process times one warm-up loop and then ``--loops`` loops of each row and reports their
median; the ratios printed are current over base, per pair and their median.

    python -m bench.client_ab --base abae858 [--pairs 5] [--loops 5] [--workload random|suite]
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

# The workloads are bench.client_bench's (make_values, make_random_values, the per-record rows),
# written out here: the child imports only the tree under test, and a base tree's bench may predate
# them.
CHILD = r"""
import json, random, statistics, sys, tempfile, time
import numpy as np
import raylog

workload, loops = sys.argv[1], int(sys.argv[2])
n, parts = (1_000_000, 2) if workload == "suite" else (200_000, 6)
rng = np.random.default_rng(0 if workload == "suite" else 2)
buf = (rng.integers(65, 91, n * 100, dtype=np.uint8) if workload == "suite"
       else rng.integers(0, 256, n * 100, dtype=np.uint8)).tobytes()
values = [buf[i * 100:(i + 1) * 100] for i in range(n)]
keyrng = random.Random(1)
keys = [keyrng.randbytes(keyrng.randint(1, 24)) for _ in range(n)]
cluster = raylog.connect("local", data_root=tempfile.mkdtemp(prefix="raylog-client-ab-"), num_cpus=2)
cluster.admin().create_topic("ab", parts)

def unkeyed():
    producer = cluster.producer()
    send = producer.send
    start = time.perf_counter()
    for v in values:
        send("ab", v)
    producer.flush(timeout=300)
    rate = n / (time.perf_counter() - start)
    producer.close()
    return rate

def keyed_get():
    producer = cluster.producer()
    send = producer.send
    start = time.perf_counter()
    futures = [send("ab", v, key=k) for v, k in zip(values, keys)]
    for f in futures:
        f.get(timeout=300)
    rate = n / (time.perf_counter() - start)
    producer.close()
    return rate

def poll_records():
    consumer = cluster.consumer("ab", auto_offset_reset="earliest")
    got = 0
    start = time.perf_counter()
    while got < n:
        for records in consumer.poll(timeout_ms=5000).values():
            for _record in records:
                got += 1
    rate = got / (time.perf_counter() - start)
    consumer.close()
    return rate

rows = {"send": unkeyed}
if workload == "random":
    rows.update(send_keyed_get=keyed_get, poll=poll_records)
out = {"raylog": raylog.__file__}
for name, row in rows.items():
    row()
    out[name] = statistics.median(row() for _ in range(loops))
print(json.dumps(out))
"""


def one_process(tree: Path, workload: str, loops: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    out = subprocess.run([sys.executable, "-c", CHILD, workload, str(loops)], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=1800)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{tree}: {out.stderr[-3000:]}")
    got = json.loads(lines[-1])
    if not got.pop("raylog").startswith(str(tree)):
        raise RuntimeError(f"{tree}: the child imported another tree's raylog")
    return got


def run(base: str, pairs: int, loops: int, workload: str) -> dict:
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="raylog-client-ab-") as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", str(base_tree), base],
                       check=True, capture_output=True)
        try:
            runs: dict[str, list[dict]] = {"base": [], "current": []}
            for _ in range(pairs):
                runs["base"].append(one_process(base_tree, workload, loops))
                runs["current"].append(one_process(here, workload, loops))
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(base_tree)],
                           capture_output=True)
    commit = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"client A/B, {workload} workload: {pairs} alternating pairs, base {base} then current {commit}, "
          f"each the median of {loops} loops (records/s)")
    ratios = {}
    for row in runs["base"][0]:
        b = [r[row] for r in runs["base"]]
        c = [r[row] for r in runs["current"]]
        ratios[row] = statistics.median(x / y for x, y in zip(c, b))
        print(f"  {row:15s} base {statistics.median(b):>10,.0f}  current {statistics.median(c):>10,.0f}  "
              f"current/base per pair {', '.join(f'{x / y:.2f}' for x, y in zip(c, b))}; median {ratios[row]:.2f}x")
    result = {"base": base, "current": commit, "workload": workload, "loops": loops, "runs": runs,
              "median_ratio": ratios}
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / f"client_ab_{workload}_{base}.json").write_text(json.dumps(result, indent=2))
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with (e.g. abae858, issue 33 as filed)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--loops", type=int, default=5)
    parser.add_argument("--workload", choices=("random", "suite"), default="random")
    args = parser.parse_args(argv)
    return run(args.base, args.pairs, args.loops, args.workload)


if __name__ == "__main__":
    main()
