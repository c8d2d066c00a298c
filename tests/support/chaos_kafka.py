"""The chaos run's workload through the Kafka listener (issue 34): what a Kafka user outside Ray runs.

- An idempotent librdkafka producer (confluent-kafka, ``enable.idempotence=true``, acks=all)
  sends keyed records ``b"<key>:<n>"`` to the chaos topic through every node's listener, each send
  recorded when issued and again when its delivery report comes (acknowledged at a partition and
  offset, or failed).
- A classic Kafka consumer group (librdkafka's cooperative-sticky assignor, client-side
  assignment) of KAFKA_MEMBERS members polls, records what it got, then commits synchronously (the
  next offset of each partition it read; a refused commit is tried again after the next poll). Now
  and then a new member joins and the oldest leaves, so the group rebalances under the faults too.

Both run in the driver, on the head's host, and reach the cluster only through its listeners: the
head's holds the group, and each partition's leader is reached through the listener of its node.
The history checker (tests/support/history.py) holds them to the same rules as raylog's own
clients: nothing acknowledged lost or duplicated, per-key order, no member skipping a record, the
group's committed offsets never moving back.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from tests.support.history import History, value_of

KAFKA_GROUP = "chaos-kafka"
KAFKA_MEMBERS = 2
KEYS = 4
ERRORS_KEPT = 20


class KafkaClients:
    """The librdkafka producer and classic group of the module doc, on one cluster generation
    (a whole-cluster restart ends them; the next generation starts new ones, under keys of their own)."""

    def __init__(self, bootstrap: str, topic: str, history: History, progress, generation: int, send_interval_s: float):
        from confluent_kafka import Producer

        self.bootstrap, self.topic, self.history, self.progress = bootstrap, topic, history, progress
        self.generation, self.send_interval_s = generation, send_interval_s
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 180_000, "request.timeout.ms": 10_000,
                                  "retry.backoff.ms": 100, "compression.type": "lz4",
                                  "error_cb": lambda error: self._error(f"producer: {error}")})
        self.errors: list[str] = []
        self.acknowledged: dict[int, int] = {}
        """The highest commit a member saw acknowledged, per partition (checked against the final
        committed offsets, as chaos.Group.acknowledged is: a commit is recorded after it returns)."""
        self.commits = 0
        self._lock = threading.Lock()
        self._sending = threading.Event()
        self._sending.set()
        self._members: list[tuple[threading.Event, threading.Thread]] = []
        self._made = 0
        self._producer_thread = threading.Thread(target=self._send, name="chaos-kafka-producer", daemon=True)
        self._producer_thread.start()
        for _ in range(KAFKA_MEMBERS):
            self.add_member()

    def _error(self, text: str) -> None:
        with self._lock:
            self.errors = (self.errors + [text])[-ERRORS_KEPT:]

    # -- the producer ------------------------------------------------------------------------

    def _send(self) -> None:
        from confluent_kafka import KafkaException

        name, n = f"kafka-producer-{self.generation}", 0
        while self._sending.is_set():
            for k in range(KEYS):
                key = b"g%dkafka%d" % (self.generation, k)
                value = value_of(key, n)
                self.history.issue(name, value, self.topic)
                try:
                    self.producer.produce(self.topic, value, key=key, on_delivery=self._delivered)
                except (KafkaException, BufferError) as exc:
                    self.history.fail(value, f"{type(exc).__name__}: {exc}")
            n += 1
            self.producer.poll(self.send_interval_s)

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.history.fail(message.value(), f"KafkaError: {error}")
            return
        self.progress.note("acks", message.partition(), time.monotonic_ns())
        self.history.ack(message.value(), message.partition(), message.offset())

    # -- the group ---------------------------------------------------------------------------

    def add_member(self) -> None:
        """One more member joins the group."""
        self._made += 1
        stop = threading.Event()
        thread = threading.Thread(target=self._consume, args=(f"{KAFKA_GROUP}/g{self.generation}k{self._made}", stop),
                                  name="chaos-kafka-member", daemon=True)
        with self._lock:
            self._members.append((stop, thread))
        thread.start()

    def top_up(self) -> None:
        """A member whose thread ended (its error is in ``errors``) is replaced."""
        with self._lock:
            self._members = [(stop, thread) for stop, thread in self._members if thread.is_alive()]
            missing = KAFKA_MEMBERS - len(self._members)
        for _ in range(missing):
            self.add_member()

    def rotate(self) -> None:
        """A new member joins, then the oldest leaves (a scale-out then scale-in)."""
        self.add_member()
        with self._lock:
            stop, thread = self._members.pop(0)
        stop.set()
        thread.join(timeout=60)

    def _consume(self, session: str, stop: threading.Event) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": KAFKA_GROUP,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "partition.assignment.strategy": "cooperative-sticky",
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                             "max.poll.interval.ms": 120_000})
        history = self.history

        def assigned(_consumer, partitions):
            history.assigned(session, sorted(tp.partition for tp in partitions))

        def revoked(_consumer, partitions):
            history.revoked(session, sorted(tp.partition for tp in partitions))

        consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        uncommitted: dict[int, int] = {}
        """Partition -> the offset after the last record read there and not yet committed. A commit
        refused (REBALANCE_IN_PROGRESS while the next generation's assignment is on its way, as
        Kafka's coordinator answers) is tried again after the next poll: the consumer's position
        is already past those records, so nothing else would commit them once the producers stop."""
        try:
            while not stop.is_set():
                read: dict[int, list] = defaultdict(list)
                for message in consumer.consume(num_messages=2000, timeout=0.2):
                    if message.error() is not None:
                        self._error(f"{session} poll: {message.error()}")
                        continue
                    read[message.partition()].append((message.offset(), message.value()))
                now = time.monotonic_ns()
                for partition, rows in sorted(read.items()):
                    history.poll(session, partition, [o for o, _ in rows], [v for _, v in rows])
                    self.progress.note("polls", partition, now)
                    uncommitted[partition] = rows[-1][0] + 1
                # A partition handed to another member since is read again by it, from the committed offset.
                owned = {tp.partition for tp in consumer.assignment()}
                uncommitted = {p: o for p, o in uncommitted.items() if p in owned}
                if not uncommitted:
                    continue
                try:
                    done = consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in uncommitted.items()],
                                           asynchronous=False)
                except KafkaException as exc:  # a rebalance under way, the coordinator away: tried again
                    self._error(f"{session} commit: {exc}")
                    continue
                with self._lock:
                    self.commits += 1
                    for tp in done:
                        if tp.error is None:
                            self.acknowledged[tp.partition] = max(tp.offset, self.acknowledged.get(tp.partition, 0))
                            if uncommitted.get(tp.partition) == tp.offset:
                                del uncommitted[tp.partition]
        except Exception as exc:  # noqa: BLE001 - reported: the member's thread ends, the checker sees the rest
            self._error(f"{session} ended: {type(exc).__name__}: {exc}")
        finally:
            consumer.close()

    # -- the end -----------------------------------------------------------------------------

    def stop_producer(self, flush_timeout_s: float = 240) -> None:
        """Stop sending and wait for every delivery report (an undelivered send reports failed)."""
        if not self._sending.is_set():
            return
        self._sending.clear()
        self._producer_thread.join(timeout=30)
        self.producer.flush(flush_timeout_s)

    def stop(self) -> None:
        """The producer (if still running) and the group's members, each leaving the group."""
        self.stop_producer(flush_timeout_s=30)
        with self._lock:
            members, self._members = self._members, []
        for stop, _ in members:
            stop.set()
        for _, thread in members:
            thread.join(timeout=60)
        # librdkafka's threads end with the last reference to their client (they would otherwise
        # go on reconnecting to the ended cluster's ports).
        self.producer = None
