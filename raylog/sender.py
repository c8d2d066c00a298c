"""Sender: the producer's background thread, one Ray call per partition batch.

It drains closed batches from the accumulator, calls the partition leader's
``produce`` with the encoded bytes, keeps up to
max_in_flight_requests_per_connection calls in flight per partition, and
completes each batch's futures from the response. A retriable error sends the
same bytes again (same producer sequence, so the replica drops a duplicate)
after retry_backoff_ms; while a partition has a batch to retry, nothing newer
is sent to it until its in-flight calls have settled, so order holds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import ray

from raylog import ray_calls
from raylog.accumulator import ProducerBatch, RecordAccumulator
from raylog.config import ProducerConfig
from raylog.errors import KafkaTimeoutError
from raylog.metadata import Metadata

POLL_S = 0.002
"""How long one wait for responses lasts before new batches are looked for again: bounds the
latency a ready batch can add while others are in flight."""


class Sender(threading.Thread):
    def __init__(self, config: ProducerConfig, accumulator: RecordAccumulator, metadata: Metadata):
        super().__init__(name="raylog-producer-sender", daemon=True)
        self.config = config
        self.acc = accumulator
        self.metadata = metadata
        self.acks = config.required_acks
        self.in_flight: dict = {}
        self._per_partition: Counter = Counter()
        self._retrying: set = set()
        self._halt = threading.Event()

    def _admit(self, tp) -> bool:
        n = self._per_partition[tp]
        if n >= self.config.max_in_flight_requests_per_connection or (tp in self._retrying and n > 0):
            return False
        self._per_partition[tp] = n + 1
        self._retrying.discard(tp)
        return True

    def run(self) -> None:
        while not self._halt.is_set():
            for batch in self.acc.drain(self._admit):
                self._submit(batch)
            if self.in_flight:
                self._collect()
            elif self.acc.closed and not self.acc.has_pending():
                return
            else:
                deadline = self.acc.next_deadline()
                timeout = 0.05 if deadline is None else max(0.0, deadline - time.monotonic())
                self.acc.wait_for_work(timeout)

    def stop(self) -> None:
        self._halt.set()

    def _submit(self, batch: ProducerBatch) -> None:
        batch.attempts += 1
        try:
            leader = self.metadata.leader(*batch.tp)
            ref = leader.produce.remote(batch.records, self.acks)
        except Exception as exc:  # noqa: BLE001 - metadata errors complete the batch like call errors
            self._per_partition[batch.tp] -= 1
            self._failed(batch, ray_calls.translate(exc))
            return
        if self.acks == 0:
            batch.result.complete(-1)
        self.in_flight[ref] = (batch, time.monotonic())

    def _collect(self) -> None:
        refs = list(self.in_flight)
        ready, _ = ray.wait(refs, num_returns=1, timeout=POLL_S, fetch_local=True)
        if ready and len(refs) > 1:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True)
        now = time.monotonic()
        for ref in ready:
            batch, _ = self.in_flight.pop(ref)
            self._per_partition[batch.tp] -= 1
            try:
                response = ray_calls.get(ref)
            except Exception as exc:  # noqa: BLE001
                self._failed(batch, ray_calls.translate(exc))
                continue
            if not batch.result.done():
                batch.result.complete(response.base_offset, response.log_append_time_ms)
            self.acc.completed(batch)
        timeout_s = self.config.request_timeout_ms / 1000
        for ref, (batch, sent) in list(self.in_flight.items()):
            if now - sent > timeout_s:
                del self.in_flight[ref]
                self._per_partition[batch.tp] -= 1
                self._failed(batch, KafkaTimeoutError(
                    f"produce to {batch.tp.topic}-{batch.tp.partition} got no response in {timeout_s}s"))

    def _failed(self, batch: ProducerBatch, error: BaseException) -> None:
        retriable = getattr(error, "retriable", False)
        age_ms = (time.monotonic() - batch.created) * 1000
        if (retriable and batch.attempts <= self.config.retries and age_ms < self.config.delivery_timeout_ms
                and not batch.result.done()):
            self.metadata.invalidate(batch.tp.topic)
            self._retrying.add(batch.tp)
            backoff_ms = min(self.config.retry_backoff_ms * 2 ** (batch.attempts - 1), self.config.retry_backoff_max_ms)
            self.acc.requeue(batch, backoff_ms / 1000)
            return
        if not batch.result.done():
            batch.result.complete(-1, -1, error)
        self.acc.completed(batch)
