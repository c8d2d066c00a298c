"""A client's metrics() is read from the caller's thread while the sender (or the polling thread)
records into the same sensors: a reader must never see the window mid-change."""

from __future__ import annotations

import sys
import threading
import time

from raylog.client_metrics import WINDOW_S, ProducerMetrics, Sensor


def test_metrics_read_while_the_owning_thread_records_never_raise():
    """CI saw ``RuntimeError: deque mutated during iteration`` from producer.metrics() while the
    sender thread recorded a batch. A short switch interval makes the reader's sum over 20,000
    samples all but certain to be interrupted by the recorder, which then appends mid-sum."""
    metrics = ProducerMetrics()
    now = time.monotonic()
    for sensor in (metrics.requests, metrics.batch_bytes, metrics.batch_records, metrics.records):
        for _ in range(20_000):
            sensor.record(1.0, now)
    stop = threading.Event()
    recorded = [0]

    def sender() -> None:
        while not stop.is_set():
            t = time.monotonic()
            for sensor in (metrics.requests, metrics.batch_bytes, metrics.batch_records, metrics.records):
                sensor.record(1.0, t)
            recorded[0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=sender)
    thread.start()
    try:
        reports = [metrics.report(1000, 1000)["producer-metrics"] for _ in range(100)]
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert recorded[0] > 0, "the sender recorded while metrics() read"
    assert all(r["batch-size-avg"] == 1.0 and r["records-per-request-avg"] == 1.0 for r in reports)
    assert metrics.requests.events == 20_000 + recorded[0]


def test_a_sensors_window_keeps_only_its_last_window_of_events():
    sensor = Sensor()
    t0 = 1000.0
    sensor.record(5.0, t0)
    sensor.record(7.0, t0 + WINDOW_S / 2)
    assert sensor.avg() == 6.0
    assert sensor.rate(t0 + WINDOW_S / 2, t0 - WINDOW_S) == 12.0 / WINDOW_S
    sensor.record(3.0, t0 + WINDOW_S + 1)
    assert sensor.avg() == 5.0, "the first event left the window"
    assert sensor.event_rate(t0 + WINDOW_S + 1, t0 - WINDOW_S) == 2 / WINDOW_S
    assert (sensor.total, sensor.events, sensor.maximum) == (15.0, 3, 7.0)
