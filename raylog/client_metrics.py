"""metrics() of the producer and the consumer: kafka-python's metric names and groups.

Counters are bumped once per batch sent or fetch completed (never per record), by the one
thread that owns them (the sender, the polling thread); metrics() reads them from any thread, so
each sensor's window is behind its own lock (a reader summing the deque while the owner appends to
it got "deque mutated during iteration"; one uncontended lock per batch costs nothing measurable).
Rates are over a sliding window of ``WINDOW_S`` seconds, as kafka-python's (two samples of
30 s each): a rate says what the client does now, not its average since it started.
"""

from __future__ import annotations

import threading
import time
from collections import deque

WINDOW_S = 30.0


class Sensor:
    """A measured quantity: a total, a windowed rate, and the average and maximum per event."""

    __slots__ = ("total", "events", "maximum", "_samples", "_lock")

    def __init__(self) -> None:
        self.total = 0.0
        self.events = 0
        self.maximum = float("nan")
        self._samples: deque = deque()
        """(monotonic time, value) per event within the window."""
        self._lock = threading.Lock()

    def record(self, value: float = 1.0, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self.total += value
            self.events += 1
            if not value <= self.maximum:  # also replaces the initial NaN
                self.maximum = value
            self._samples.append((now, value))
            self._trim(now)

    def _trim(self, now: float) -> None:
        """Caller holds the lock."""
        samples = self._samples
        while samples and samples[0][0] < now - WINDOW_S:
            samples.popleft()

    def rate(self, now: float, started: float) -> float:
        """Sum per second over the window (or since ``started``, if younger than the window)."""
        span = min(WINDOW_S, max(now - started, 1e-3))
        with self._lock:
            self._trim(now)
            return sum(v for _, v in self._samples) / span

    def event_rate(self, now: float, started: float) -> float:
        """Events per second over the window."""
        with self._lock:
            self._trim(now)
            return len(self._samples) / min(WINDOW_S, max(now - started, 1e-3))

    def avg(self) -> float:
        with self._lock:
            samples = self._samples
            return sum(v for _, v in samples) / len(samples) if samples else float("nan")


class ProducerMetrics:
    """The sender thread's counters, as kafka-python's 'producer-metrics' group."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.records = Sensor()
        """Records acknowledged (acks=0: sent)."""
        self.bytes = Sensor()
        """Encoded batch bytes sent, retries included."""
        self.requests = Sensor()
        """Produce calls, recorded with their latency in ms when answered."""
        self.local_requests = Sensor()
        """Produce requests sent over the same-node channel instead of a Ray call."""
        self.batch_records = Sensor()
        self.batch_bytes = Sensor()
        self.errors = Sensor()
        """Records failed for good."""
        self.retries = Sensor()
        """Records sent again after a retriable error."""

    def report(self, buffer_total: int, buffer_available: int) -> dict:
        now, t0 = time.monotonic(), self.started
        return {"producer-metrics": {
            "record-send-total": self.records.total,
            "record-send-rate": self.records.rate(now, t0),
            "record-error-total": self.errors.total,
            "record-error-rate": self.errors.rate(now, t0),
            "record-retry-total": self.retries.total,
            "record-retry-rate": self.retries.rate(now, t0),
            "outgoing-byte-total": self.bytes.total,
            "outgoing-byte-rate": self.bytes.rate(now, t0),
            "request-total": float(self.requests.events),
            "request-rate": self.requests.event_rate(now, t0),
            "request-latency-avg": self.requests.avg(),
            "request-latency-max": self.requests.maximum,
            "requests-sent-locally-total": float(self.local_requests.total),
            "batch-size-avg": self.batch_bytes.avg(),
            "batch-size-max": self.batch_bytes.maximum,
            "records-per-request-avg": self.batch_records.avg(),
            "buffer-total-bytes": float(buffer_total),
            "buffer-available-bytes": float(buffer_available),
        }}


class ConsumerMetrics:
    """The polling thread's counters, as kafka-python's 'consumer-fetch-manager-metrics' and
    'consumer-coordinator-metrics' groups."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.fetches = Sensor()
        """Fetch calls answered, recorded with their latency in ms."""
        self.fetch_bytes = Sensor()
        self.records = Sensor()
        """Records handed to the application by poll(), poll_batch() or the iterator."""
        self.bytes = Sensor()
        self.local_bytes = Sensor()
        """Batch bytes read from a leader's segment files on this node (no call)."""
        self.remote_bytes = Sensor()
        """Batch bytes that came through fetch calls to leaders."""
        self.commits = Sensor()
        """Commits answered, recorded with their latency in ms."""
        self.lag_max = float("nan")
        """Largest high watermark minus position over the assigned partitions at the last poll."""

    def report(self, assigned: int) -> dict:
        now, t0 = time.monotonic(), self.started
        return {
            "consumer-fetch-manager-metrics": {
                "fetch-total": float(self.fetches.events),
                "fetch-rate": self.fetches.event_rate(now, t0),
                "fetch-latency-avg": self.fetches.avg(),
                "fetch-latency-max": self.fetches.maximum,
                "fetch-size-avg": self.fetch_bytes.avg(),
                "fetch-size-max": self.fetch_bytes.maximum,
                "records-consumed-total": self.records.total,
                "records-consumed-rate": self.records.rate(now, t0),
                "bytes-consumed-total": self.bytes.total,
                "bytes-consumed-rate": self.bytes.rate(now, t0),
                "records-lag-max": self.lag_max,
                "bytes-read-locally-total": self.local_bytes.total,
                "bytes-fetched-remotely-total": self.remote_bytes.total,
            },
            "consumer-coordinator-metrics": {
                "commit-total": float(self.commits.events),
                "commit-rate": self.commits.event_rate(now, t0),
                "commit-latency-avg": self.commits.avg(),
                "commit-latency-max": self.commits.maximum,
                "assigned-partitions": float(assigned),
            },
        }
