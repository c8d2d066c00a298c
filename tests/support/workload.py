"""A continuous keyed produce/consume workload that records a History (see history.py)."""

from __future__ import annotations

import threading
import time

from raylog.records import TopicPartition
from tests.support.history import History, value_of


class Workload:
    """One producer thread sends ``keys`` keys round-robin, numbered per key, at a steady trickle;
    one consumer thread reads everything. Every outcome and every read goes into ``history``."""

    def __init__(self, cluster, topic: str, keys: int = 8, acks="all", pause_s: float = 0.005,
                 history: History | None = None, prefix: bytes = b"", **producer):
        """``history`` and ``prefix``: a later workload on the same topic (after a restart) records
        into the same history under keys of its own."""
        self.cluster = cluster
        self.topic = topic
        self.history = history or History()
        self.keys = [prefix + b"k%d" % k for k in range(keys)]
        self.pause_s = pause_s
        self.producer = cluster.producer(acks=acks, linger_ms=2, **producer)
        self.consumer = cluster.consumer(topic, auto_offset_reset="earliest")
        self.consumer_errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        for t in self._threads:
            t.start()

    def _produce(self) -> None:
        history = self.history
        n = 0
        while not self._stop.is_set():
            for key in self.keys:
                value = value_of(key, n)
                future = self.producer.send(self.topic, value, key=key)
                future.add_callback(lambda meta, v=value: history.ack(v, meta.partition, meta.offset))
                future.add_errback(lambda error, v=value: history.fail(v, error))
            n += 1
            time.sleep(self.pause_s)

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                for chunk in self.consumer.poll_batch(timeout_ms=200):
                    self.history.read(chunk.partition, chunk.offsets.tolist(), chunk.value_list())
            except Exception as exc:  # noqa: BLE001 - recorded: a consumer must keep going through faults
                self.consumer_errors.append(exc)
                time.sleep(0.2)

    def acked(self) -> int:
        return len(self.history.acked)

    def stop(self, flush_timeout_s: float = 120) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        self.producer.flush(timeout=flush_timeout_s)
        self.producer.close()
        self.consumer.close()


def read_everything(cluster, topic: str, timeout_s: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    """The whole committed log of every partition, from a fresh consumer."""
    admin = cluster.admin()
    partitions = len(admin.describe_topics([topic])[0].partitions)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = admin.end_offsets(tps)
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign(tps)
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while any((out[tp.partition][-1][0] + 1 if out[tp.partition] else 0) < ends[tp] for tp in tps):
        assert time.monotonic() < deadline, f"could not read {topic} to its end offsets {ends}"
        for chunk in consumer.poll_batch(timeout_ms=500):
            out[chunk.partition].extend(zip(chunk.offsets.tolist(), chunk.value_list()))
    consumer.close()
    return out
