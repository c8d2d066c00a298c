"""The systems a raylog user would otherwise pick, measured on the same records in the same run.

Each peer is started by the bench on 127.0.0.1 in a temporary directory and stopped after; each
is driven the way a normal user of it would configure it for throughput (``Peer.setup`` says
how, and the bench prints it). A peer whose server or client library is missing is skipped with
a line saying why (``Peer.missing``), never silently. `make bench` installs them: Debian's
redis-server and nats-server, PyPI's redis (with hiredis) and nats-py.

- Redis Streams: ``appendonly yes``, ``appendfsync everysec`` (its durable setting short of an
  fsync per write); XADD pipelined 1,000 at a time; read back with XRANGE 10,000 at a time from
  the last id seen (a consumer tracking its own position, like raylog's).
- NATS JetStream: a file-storage stream; nats-py's ``publish_async`` (up to 4,000 acks
  outstanding, its default), then ``publish_async_completed``; read back by a pull consumer
  fetching 10,000 at a time with no per-message acks (AckPolicy.NONE).
- ray.util.queue.Queue: put_nowait_batch / get_nowait_batch of 100,000.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


@dataclass
class Rates:
    produce: float          # records/s
    consume: float          # records/s


@dataclass
class Peer:
    """One peer: its name, how it is driven, and what it needs to run."""

    name: str
    setup: str
    servers: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _dir: str | None = field(default=None, repr=False)

    def missing(self) -> str | None:
        """Why this peer cannot run here, or None."""
        for server in self.servers:
            if shutil.which(server) is None:
                return f"{server} is not installed (make bench installs it from Debian's packages)"
        for module in self.modules:
            try:
                __import__(module)
            except ImportError:
                return f"Python module {module} is missing (make bench installs it from PyPI)"
        return None

    def measure(self, values: list[bytes]) -> Rates:
        """Produce every value, then consume them all; a fresh server each time."""
        self._dir = tempfile.mkdtemp(prefix=f"raylog-peer-{self.name.split()[0].lower()}-")
        try:
            return self._measure(values)
        finally:
            if self._proc is not None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None
            shutil.rmtree(self._dir, ignore_errors=True)

    def _start(self, argv: list[str], port: int) -> None:
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self._dir)
        wait_port(port)

    def _measure(self, values: list[bytes]) -> Rates:
        raise NotImplementedError


class RedisStreams(Peer):
    PIPELINE = 1_000
    READ = 10_000

    def __init__(self) -> None:
        super().__init__("Redis Streams", "appendonly yes, appendfsync everysec; XADD pipelined 1,000 at a time; "
                         "XRANGE 10,000 at a time", servers=("redis-server",), modules=("redis", "hiredis"))

    def _measure(self, values: list[bytes]) -> Rates:
        import redis

        port = free_port()
        self._start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", self._dir,
                     "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "yes"],
                    port)
        r = redis.Redis(host="127.0.0.1", port=port)
        start = time.perf_counter()
        for i in range(0, len(values), self.PIPELINE):
            pipe = r.pipeline(transaction=False)
            for v in values[i:i + self.PIPELINE]:
                pipe.xadd("bench", {b"v": v})
            pipe.execute()
        produce = len(values) / (time.perf_counter() - start)
        if r.xlen("bench") != len(values):
            raise RuntimeError(f"Redis holds {r.xlen('bench'):,} of {len(values):,} entries")
        n, after = 0, "-"
        start = time.perf_counter()
        while n < len(values):
            entries = r.xrange("bench", min=after, count=self.READ)
            n += len(entries)
            after = b"(" + entries[-1][0]  # exclusive: the next entry after the last one read
        consume = n / (time.perf_counter() - start)
        r.close()
        return Rates(produce, consume)


class JetStream(Peer):
    FETCH = 10_000

    def __init__(self) -> None:
        super().__init__("NATS JetStream", "file storage; publish_async with up to 4,000 acks outstanding; pull "
                         "consumer fetching 10,000 at a time, AckPolicy.NONE", servers=("nats-server",),
                         modules=("nats",))

    def _measure(self, values: list[bytes]) -> Rates:
        port = free_port()
        self._start(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", self._dir], port)
        return asyncio.run(self._drive(port, values))

    async def _drive(self, port: int, values: list[bytes]) -> Rates:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, StorageType

        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream()
        await js.add_stream(name="bench", subjects=["bench"], storage=StorageType.FILE)
        start = time.perf_counter()
        for v in values:
            await js.publish_async("bench", v)
        await js.publish_async_completed()
        produce = len(values) / (time.perf_counter() - start)
        stored = (await js.stream_info("bench")).state.messages
        if stored != len(values):
            raise RuntimeError(f"JetStream acknowledged {stored:,} of {len(values):,} messages")
        sub = await js.pull_subscribe("bench", "reader", config=ConsumerConfig(ack_policy=AckPolicy.NONE))
        n = 0
        start = time.perf_counter()
        while n < len(values):
            n += len(await sub.fetch(self.FETCH, timeout=10))
        consume = n / (time.perf_counter() - start)
        await nc.close()
        return Rates(produce, consume)


class RayQueue(Peer):
    CHUNK = 100_000

    def __init__(self) -> None:
        super().__init__("ray.util.queue", "put_nowait_batch / get_nowait_batch of 100,000 (in memory, not durable)")

    def _measure(self, values: list[bytes]) -> Rates:
        from bench.client_bench import ray_queue_baseline

        return Rates(*ray_queue_baseline(values, self.CHUNK))


def all_peers() -> list[Peer]:
    return [RedisStreams(), JetStream(), RayQueue()]


def run(records: int, runs: int) -> dict:
    """raylog (send_batch / poll_batch, 6 partitions, RF=1) and every peer on the same records."""
    import json
    import os
    import statistics
    from pathlib import Path

    import ray

    import raylog
    from bench.client_bench import RECORD_BYTES, consume_columns, make_values, produce_batch

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    values = make_values(records)
    measured: dict[str, dict[str, list[float]]] = {}
    setups = {"raylog": "send_batch of 100,000 (lz4, the producer's batching), poll_batch; 6 partitions, RF=1"}
    skipped = {}
    peers = all_peers()
    for peer in peers:
        reason = peer.missing()
        if reason:
            skipped[peer.name] = reason
            print(f"  {peer.name}: skipped, {reason}", flush=True)
        else:
            setups[peer.name] = peer.setup
    cluster = raylog.connect(data_root=tempfile.mkdtemp(prefix="raylog-peers-"), num_cpus=2)
    try:
        for r in range(runs):
            topic = f"peers-{r}-{time.time_ns() % 10**9}"
            cluster.admin().create_topic(topic, 6)
            time.sleep(1)
            produced = records / produce_batch(cluster, topic, values).wall
            consumed = records / consume_columns(cluster, topic, records).wall
            cluster.admin().delete_topics([topic])
            measured.setdefault("raylog", {"produce": [], "consume": []})
            measured["raylog"]["produce"].append(produced)
            measured["raylog"]["consume"].append(consumed)
            for peer in peers:
                if peer.name in skipped:
                    continue
                rates = peer.measure(values)
                measured.setdefault(peer.name, {"produce": [], "consume": []})
                measured[peer.name]["produce"].append(rates.produce)
                measured[peer.name]["consume"].append(rates.consume)
            print(f"  run {r + 1}/{runs}: " + ", ".join(
                f"{name} {m['produce'][-1]:,.0f} / {m['consume'][-1]:,.0f}" for name, m in measured.items()),
                flush=True)
    finally:
        ray.shutdown()
    summary = {name: {side: {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v}
                      for side, v in m.items()} for name, m in measured.items()}
    print(f"\nraylog and its peers: {records:,} x {RECORD_BYTES}-byte records, one producer then one consumer, "
          f"median of {runs} runs")
    ours = summary["raylog"]
    for name, s in summary.items():
        ratio = "" if name == "raylog" else (f"  raylog = {ours['produce']['median'] / s['produce']['median']:.1f}x / "
                                             f"{ours['consume']['median'] / s['consume']['median']:.1f}x")
        print(f"  {name:16s} produce {s['produce']['median']:>12,.0f}  consume {s['consume']['median']:>12,.0f} "
              f"records/s{ratio}\n      ({setups[name]})")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "peers.json").write_text(json.dumps(
        {"records": records, "runs": runs, "setups": setups, "skipped": skipped, "rates": summary}, indent=1))
    return summary
