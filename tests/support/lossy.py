"""The chaos run's lossy topic: where the Spark stream meets the faults that lose acknowledged
records on purpose (issue 32), an unclean leader election and a topic deleted and created again.

The topic has one partition on two replicas, unclean_leader_election_enable and
min_insync_replicas 1; a producer thread sends it numbered values with acks=1, and a Spark query
(format "raylog", failOnDataLoss=false) copies it to parquet. What those faults lose is lost by
design; what the stream must still do is checked at the end:

- ``stream-re-emitted``: no value reaches the parquet twice (after a divergence the stream resumes
  where the logs diverged, not from the log's start; the parquet sink is exactly once);
- ``stream-skipped``: every value in the topic's final log is in the parquet (records written at
  offsets the stream had read before the loss, and a re-created topic's records, are read);
- ``stream-failed``: the query never stops with an error (failOnDataLoss=false warns and reads on).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

from raylog.errors import RaylogError
from raylog.records import TopicPartition
from tests.support.processes import pause

LOSSY = "chaos-lossy"
LOSSY_CONFIG = {"replication_factor": 2, "unclean_leader_election_enable": True, "min_insync_replicas": 1}
SEND_INTERVAL_S = 0.02
LOST_AFTER_SHRINK = 20
"""Records the leader acknowledges alone (its follower out of the ISR) before the unclean election
that loses them."""
STEP_TIMEOUT_S = 60.0


def create(cluster) -> None:
    cluster.admin().create_topic(LOSSY, 1, **LOSSY_CONFIG)


def _wait(what: str, ready, timeout_s: float = STEP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if ready():
                return
        except RaylogError:
            pass
        if time.monotonic() > deadline:
            raise ValueError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.2)


class LossyProducer:
    """One thread sending ``b"L<n>"`` with acks=1, every value once; a send that fails (the topic
    deleted, a leader gone) is recorded as failed and the thread goes on with a new producer (an
    unclean election takes the old one's sequence numbers with the records it lost)."""

    def __init__(self, cluster, first: int = 0):
        self.cluster = cluster
        self.acked: set[bytes] = set()
        self.next = first
        self._lock = threading.Lock()
        self._failed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-lossy-producer", daemon=True)
        self._thread.start()

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _ack(self, value: bytes) -> None:
        with self._lock:
            self.acked.add(value)

    def _run(self) -> None:
        producer = None
        while not self._stop.is_set():
            if producer is None:
                producer = self.cluster.producer(acks=1, linger_ms=5, request_timeout_ms=10_000,
                                                 delivery_timeout_ms=30_000)
            value = b"L%d" % self.next
            self.next += 1
            try:
                future = producer.send(LOSSY, value, partition=0)
                future.add_callback(lambda _, v=value: self._ack(v))
                future.add_errback(lambda _: self._failed.set())
            except RaylogError:
                self._failed.set()
            if self._failed.is_set():
                producer.close(timeout=5)
                producer = None
                self._failed.clear()
                self._stop.wait(0.5)
            self._stop.wait(SEND_INTERVAL_S)
        if producer is not None:
            with contextlib.suppress(RaylogError):
                producer.flush(timeout=30)
            producer.close(timeout=30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=90)


def start_query(session, out: Path):
    """The stream of the lossy topic into parquet under ``out`` (restarted there, it carries on)."""
    return (session.readStream.format("raylog").option("subscribe", LOSSY).option("startingOffsets", "earliest")
            .option("failOnDataLoss", "false").load().select("value")
            .writeStream.format("parquet").option("path", str(out / "lossy-out"))
            .option("checkpointLocation", str(out / "lossy-checkpoint")).trigger(processingTime="1 second").start())


def unclean_election(cluster, producer: LossyProducer) -> str:
    """The follower is paused until it leaves the ISR; the leader acknowledges LOST_AFTER_SHRINK
    records alone and is paused in turn; the follower resumes and, the leader fenced, is elected
    uncleanly; the old leader resumes, finds the log diverged and truncates. Each step waits on
    what the cluster shows."""
    admin = cluster.admin()
    views = admin.describe_replicas(LOSSY, 0)
    leader = next((v for v in views if v.get("role") == "leader"), None)
    follower = next((v for v in views if v.get("role") == "follower"), None)
    if leader is None or follower is None or len(admin.describe_partitions(LOSSY)[0]["isr"]) != 2:
        raise ValueError("the lossy topic is not led with both replicas in sync")
    paused = []
    try:
        pause(follower["pid"])
        paused.append(follower["pid"])
        _wait("the paused follower leaving the ISR",
              lambda: admin.describe_partitions(LOSSY)[0]["isr"] == [leader["replica_id"]])
        acked = producer.acked_count()
        _wait("records acknowledged by the leader alone", lambda: producer.acked_count() >= acked + LOST_AFTER_SHRINK)
        pause(leader["pid"])
        paused.append(leader["pid"])
        os.kill(follower["pid"], signal.SIGCONT)
        paused.remove(follower["pid"])
        _wait("the stale follower elected", lambda: admin.describe_partitions(LOSSY)[0]["leader"] == follower["replica_id"])
    finally:
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return f"{LOSSY}-0 replica {follower['replica_id']} elected over replica {leader['replica_id']}"


def recreate(cluster) -> str:
    """The topic deleted and created again under the same name while the producer and the stream run."""
    admin = cluster.admin()
    admin.delete_topics([LOSSY])
    _wait("the deleted topic gone", lambda: LOSSY not in admin.list_topics())
    create(cluster)
    return f"{LOSSY} deleted and created again"


def final_values(cluster, timeout_s: float = 120) -> list[bytes]:
    """Every value in the topic's log now."""
    tp = TopicPartition(LOSSY, 0)
    end = cluster.admin().end_offsets([tp])[tp]
    consumer = cluster.consumer(enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
        if consumer.position(tp) < end:
            raise ValueError(f"the lossy topic's log read to {consumer.position(tp)} of {end}")
        return values
    finally:
        consumer.close()


def check(session, out: Path, final: list[bytes], acked: set[bytes], errors: list[str]) -> tuple[dict, dict]:
    """The anomalies of the stream of the lossy topic, and a summary of what ran."""
    written = [bytes(r["value"]) for r in session.read.parquet(str(out / "lossy-out")).collect()] \
        if (out / "lossy-out").exists() else []
    counts = Counter(written)
    twice = sorted(v for v, n in counts.items() if n > 1)
    skipped = sorted(set(final) - counts.keys())
    anomalies = {}
    if twice:
        anomalies["stream-re-emitted"] = twice
    if skipped:
        anomalies["stream-skipped"] = skipped
    if errors:
        anomalies["stream-failed"] = errors
    summary = {"lossy_acked": len(acked), "lossy_in_log": len(final), "lossy_streamed": len(written),
               "lossy_acked_then_lost": len(acked - set(final))}
    return anomalies, summary

