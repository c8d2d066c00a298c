"""Consumer-group benchmark: members as Ray actors reading one 6-partition topic (issue 14).

Rows (medians of --runs runs):

- records/s read by a group of 1 member and of 3 members (each member an actor that polls
  column batches and counts them), from the moment they are told to start polling to the last
  record;
- seconds from a member's SIGKILL until every partition it owned is being consumed again by the
  others (session_timeout_ms is printed with it: that is what bounds it);
- the longest pause, during a 4th member's join, in any partition that did not move (the
  target is none: KIP-848 has no group-wide barrier);
- a new cluster's first join (issue 33): on a brand-new local Ray, seconds from a kafka-python
  KafkaConsumer's construction to the first record its group's first join lets it read, at the
  defaults (``__consumer_offsets`` made with the cluster) and, the baseline in the same run, at
  the defaults before issue 33 (made by the first group, 8 partitions). bench.first_minute's
  child program measures it, before this bench starts its own cluster.

    python -m bench.groups_bench [--records 1000000] [--runs 3] [--session-ms 3000] [--no-first-join]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import ray

from bench import first_minute
from bench.client_bench import RECORD_BYTES, make_values


@ray.remote(num_cpus=0, max_restarts=0)
class CountingMember:
    """A group member that counts what it reads, and notes when each partition last delivered."""

    def __init__(self, topic: str, group: str, session_ms: int):
        import raylog

        cluster = raylog.connect(address="auto")
        self.consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest",
                                         session_timeout_ms=session_ms, heartbeat_interval_ms=500)
        self.consumer.subscribe([topic])
        self.count = 0
        self.seen: dict[int, list[float]] = {}
        self._go = threading.Event()
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        self._go.wait()
        while not self._stop.is_set():
            for chunk in self.consumer.poll_batch(timeout_ms=100):
                self.count += len(chunk)
                self.seen.setdefault(chunk.partition, []).append(time.monotonic())

    def go(self) -> None:
        self._go.set()

    def stats(self) -> tuple[int, dict]:
        return self.count, {p: list(t) for p, t in self.seen.items()}

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer._group.owned)

    def pid(self) -> int:
        return os.getpid()

    def stop(self) -> None:
        self._stop.set()
        self.consumer.close()


def wait_until(predicate, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        time.sleep(0.05)


def read_rate(topic: str, members: int, records: int, session_ms: int) -> float:
    group = f"bench-{uuid.uuid4().hex[:6]}"
    actors = [CountingMember.remote(topic, group, session_ms) for _ in range(members)]
    ray.get([a.assignment.remote() for a in actors])
    start = time.perf_counter()
    ray.get([a.go.remote() for a in actors])
    wait_until(lambda: sum(ray.get([a.stats.remote()])[0][0] for a in actors) >= records)
    elapsed = time.perf_counter() - start
    for a in actors:
        ray.get(a.stop.remote())
        ray.kill(a)
    return records / elapsed


def failover_and_join(cluster, topic: str, session_ms: int) -> tuple[float, float]:
    """(seconds from a SIGKILL to the victim's partitions being read again, longest pause of a
    partition that did not move during a join), under a steady producer."""
    group = f"bench-{uuid.uuid4().hex[:6]}"
    stop = threading.Event()

    def write():
        producer = cluster.producer(linger_ms=5)
        while not stop.is_set():
            producer.send_batch(topic, [b"x" * RECORD_BYTES] * 60, keys=[b"%d" % k for k in range(60)])
            time.sleep(0.02)
        producer.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    actors = [CountingMember.remote(topic, group, session_ms) for _ in range(3)]
    ray.get([a.go.remote() for a in actors])
    try:
        wait_until(lambda: sorted(map(len, ray.get([a.assignment.remote() for a in actors]))) == [2, 2, 2])
        time.sleep(1)
        before = ray.get([a.assignment.remote() for a in actors])
        join_start = time.monotonic()
        actors.append(CountingMember.remote(topic, group, session_ms))
        ray.get(actors[-1].go.remote())
        wait_until(lambda: sorted(map(len, ray.get([a.assignment.remote() for a in actors]))) == [1, 1, 2, 2])
        time.sleep(1)
        join_end = time.monotonic()
        after = ray.get([a.assignment.remote() for a in actors])
        pause = 0.0
        for i in range(3):
            _, seen = ray.get(actors[i].stats.remote())
            for p in set(before[i]) & set(after[i]):
                times = [t for t in seen.get(p, []) if join_start - 1 <= t <= join_end]
                pause = max([pause] + [b - a for a, b in zip(times, times[1:])])
        victim, rest = actors[0], actors[1:]
        orphaned = set(ray.get(victim.assignment.remote()))
        killed_at = time.monotonic()
        os.kill(ray.get(victim.pid.remote()), signal.SIGKILL)

        def taken_over():
            covered = set()
            for a in rest:
                _, seen = ray.get(a.stats.remote())
                covered |= {p for p, times in seen.items() if p in orphaned and times and times[-1] > killed_at}
            return covered == orphaned

        wait_until(taken_over, timeout_s=session_ms / 1000 + 60)
        failover = time.monotonic() - killed_at
    finally:
        stop.set()
        writer.join()
        for a in actors:
            try:
                ray.get(a.stop.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - the killed one
                pass
            ray.kill(a)
    return failover, pause


def first_joins(runs: int) -> dict[str, list[float]]:
    """First-record seconds of a new cluster's first group, now and at the defaults before issue
    33, alternating; each run is a new local Ray in a child process."""
    rows: dict[str, list[float]] = {"first_join_s": [], "first_join_before_s": []}
    for _ in range(runs):
        for row, mode in (("first_join_s", "eager"), ("first_join_before_s", "before")):
            eager, partitions, _ = first_minute.MODES[mode]
            rows[row].append(first_minute.one_run(eager, partitions)["first_record"])
    return rows


def run(records: int, runs: int, session_ms: int, first_join: bool = True) -> dict:
    import raylog

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # Before this bench's own Ray starts: each first join needs a Ray of its own, new.
    joins = first_joins(runs) if first_join else {}
    cluster = raylog.connect(data_root=tempfile.mkdtemp(prefix="raylog-groups-bench-"), num_cpus=2,
                             cluster_config={"offsets_topic_num_partitions": 1})
    rows: dict[str, list[float]] = {"one_member": [], "three_members": [], "failover_s": [], "join_pause_s": [],
                                    **joins}
    try:
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        cluster.admin().create_topic(topic, 6)
        producer = cluster.producer()
        values = make_values(records)
        for i in range(0, records, 100_000):
            producer.send_batch(topic, values[i:i + 100_000])
        producer.flush(timeout=300)
        producer.close()
        churn = f"bench-churn-{uuid.uuid4().hex[:6]}"
        cluster.admin().create_topic(churn, 6)
        for _ in range(runs):
            rows["one_member"].append(read_rate(topic, 1, records, session_ms))
            rows["three_members"].append(read_rate(topic, 3, records, session_ms))
            failover, pause = failover_and_join(cluster, churn, session_ms)
            rows["failover_s"].append(failover)
            rows["join_pause_s"].append(pause)
    finally:
        ray.shutdown()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"groups bench: {records:,} x {RECORD_BYTES}-byte records, 6 partitions, members are Ray actors, "
          f"median of {runs} runs")
    print(f"  1 member             {med['one_member']:>12,.0f} records/s")
    print(f"  3 members            {med['three_members']:>12,.0f} records/s")
    print(f"  SIGKILL to re-read   {med['failover_s']:>12.2f} s   (session_timeout_ms {session_ms})")
    print(f"  longest pause of a partition that did not move during a join  {med['join_pause_s']:.3f} s")
    if joins:
        print(f"  a new cluster's first join, consumer built to first record  {med['first_join_s']:.2f} s"
              f"   (defaults before issue 33: {med['first_join_before_s']:.2f} s, "
              f"{med['first_join_before_s'] / med['first_join_s']:.1f}x; target <= 1.5 s)")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "groups.json").write_text(json.dumps({"median": med, "runs": rows}, indent=2))
    return med


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-ms", type=int, default=3000)
    parser.add_argument("--no-first-join", action="store_true", help="skip the new clusters' first joins")
    args = parser.parse_args(argv)
    return run(args.records, args.runs, args.session_ms, not args.no_first_join)


if __name__ == "__main__":
    main()
