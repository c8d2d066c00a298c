"""Consumer-group members as Ray actors, the way Ray users run them (tests only).

Each actor runs one group consumer on a thread: it polls, "processes" what it gets by
recording it (partition, offset, value, the member epoch its poll fetched under, when), commits after
processing, and answers the test's questions.
"""

from __future__ import annotations

import os
import threading
import time

import ray

import raylog


@ray.remote(num_cpus=0)
class Ledger:
    """Where members report what they processed *before* committing it, so a member killed
    afterwards cannot take its processed records with it."""

    def __init__(self):
        self.rows: list[tuple[str, int, int, bytes, int]] = []

    def add(self, member: str, rows: list) -> None:
        self.rows.extend((member, *row) for row in rows)

    def all(self) -> list:
        return list(self.rows)


class Recorder(raylog.ConsumerRebalanceListener):
    """The rebalance listener's calls, in order: ("assigned" | "revoked" | "lost", partitions)."""

    def __init__(self):
        self.events: list[tuple[str, list[int]]] = []

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", sorted(tp.partition for tp in assigned)))

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", sorted(tp.partition for tp in revoked)))

    def on_partitions_lost(self, lost):
        self.events.append(("lost", sorted(tp.partition for tp in lost)))


@ray.remote(num_cpus=0, max_restarts=0)
class MemberActor:
    def __init__(self, topic: str, group_id: str, configs: dict, commit_every_poll: bool = True, ledger=None):
        import raylog

        self.cluster = raylog.connect(address="auto", namespace="raylog")
        self.consumer = self.cluster.consumer(group_id=group_id, auto_offset_reset="earliest",
                                              enable_auto_commit=False, **configs)
        self.rebalances = Recorder()
        self.consumer.subscribe([topic], listener=self.rebalances)
        self.commit_every_poll = commit_every_poll
        self.ledger = ledger
        self.name = f"{os.getpid()}"
        self.processed: list[tuple[int, int, bytes, int, float]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        consumer = self.consumer
        while not self._stop.is_set():
            try:
                chunks = consumer.poll_batch(timeout_ms=100)
                epoch = consumer.group_metadata().generation_id
                now = time.monotonic()
                rows = [(chunk.partition, offset, value, epoch)
                        for chunk in chunks for offset, value in zip(chunk.offsets.tolist(), chunk.value_list())]
                with self._lock:
                    self.processed.extend(row + (now,) for row in rows)
                if rows and self.ledger is not None:
                    ray.get(self.ledger.add.remote(self.name, rows))
                if chunks and self.commit_every_poll:
                    consumer.commit()
            except Exception as exc:  # noqa: BLE001 - recorded for the test to look at
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.1)

    def pid(self) -> int:
        return os.getpid()

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer._group.owned)

    def records(self, since: int = 0) -> list:
        with self._lock:
            return self.processed[since:]

    def rebalance_events(self) -> list[tuple[str, list[int]]]:
        return list(self.rebalances.events)

    def count(self) -> int:
        return len(self.processed)

    def error_list(self) -> list[str]:
        return list(self.errors)

    def stop(self) -> None:
        """Stop polling and close the consumer (commits and leaves the group)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.consumer.close()
