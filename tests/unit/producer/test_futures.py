"""Producer futures: one shared result per staged run, filled batch by batch in any order."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from raylog.errors import KafkaTimeoutError, RecordTooLargeError
from raylog.producer.futures import CallbackRunner, FutureBatchMetadata, FutureRecordMetadata, ProduceResult

_new = tuple.__new__


def run_of(count: int, timestamps=None) -> tuple[ProduceResult, list[FutureRecordMetadata]]:
    result = ProduceResult("t", timestamps if timestamps is not None else list(range(1000, 1000 + count)),
                           CallbackRunner())
    return result, [_new(FutureRecordMetadata, (result, i)) for i in range(count)]


def test_futures_resolve_to_their_records_offsets_when_batches_complete_out_of_order():
    result, futures = run_of(6)
    # Records 0, 2, 4 went to partition 1 and 1, 3, 5 to partition 0, as two batches.
    result.set_batches([1, 0, 1, 0, 1, 0], 2)
    result.complete_batch(np.array([1, 3, 5]), 70)
    assert not futures[0].is_done, "the run is done only when its last batch is"
    result.complete_batch(np.array([0, 2, 4]), 500)
    got = [f.get(timeout=0) for f in futures]
    assert [(m.partition, m.offset) for m in got] == [(1, 500), (0, 70), (1, 501), (0, 71), (1, 502), (0, 72)]
    assert [m.timestamp for m in got] == [1000, 1001, 1002, 1003, 1004, 1005]


def test_a_failed_batch_fails_only_its_own_records():
    result, futures = run_of(4)
    result.set_batches([0, 0, 1, 1], 2)
    error = RecordTooLargeError("too big")
    result.fail_batch(np.array([2, 3]), error)
    result.complete_batch(np.array([0, 1]), 10)
    assert [f.get().offset for f in futures[:2]] == [10, 11]
    for f in futures[2:]:
        assert f.failed() and f.exception is error
        with pytest.raises(RecordTooLargeError):
            f.get()
    batch = FutureBatchMetadata(result)
    with pytest.raises(RecordTooLargeError):
        batch.wait(0)
    assert batch.errors() == [error]


def test_get_of_an_unfinished_run_times_out_with_a_raylog_error():
    result, futures = run_of(1)
    with pytest.raises(KafkaTimeoutError):
        futures[0].get(timeout=0.01)


def test_log_append_time_replaces_the_producer_timestamp():
    result, futures = run_of(2)
    result.set_batches([0, 0], 1)
    result.complete_batch(np.array([0, 1]), 5, log_append_time=99)
    assert [f.get().timestamp for f in futures] == [99, 99]


def test_a_callback_added_while_the_run_completes_runs_exactly_once():
    """Issue 12: registering a callback raced with completion (on_done)."""
    for _ in range(20):
        result, futures = run_of(200)
        result.set_batches([0] * 200, 1)
        calls = []
        lock = threading.Lock()

        def record(meta):
            with lock:
                calls.append(meta.offset)

        adders = [threading.Thread(target=lambda f=f: f.add_callback(record)) for f in futures]
        for t in adders[:100]:
            t.start()
        result.complete_batch(np.arange(200), 0)
        for t in adders[100:]:
            t.start()
        for t in adders:
            t.join()
        result._runner.drain(None)
        assert sorted(calls) == list(range(200))


def test_a_raising_callback_is_isolated_and_later_callbacks_still_run(caplog):
    result, futures = run_of(3)
    result.set_batches([0, 0, 0], 1)
    seen = []
    futures[0].add_callback(lambda meta: 1 / 0)
    futures[1].add_callback(seen.append)
    futures[2].add_errback(seen.append)
    result.complete_batch(np.arange(3), 40)
    result._runner.drain(None)
    assert [m.offset for m in seen] == [41], "the errback of a successful record does not run"
    assert "ZeroDivisionError" in caplog.text
    futures[2].add_callback(lambda extra, meta: seen.append((extra, meta.offset)), "x")
    result._runner.drain(None)
    assert seen[-1] == ("x", 42), "kafka-python's extra callback arguments come first"


def test_the_callback_thread_ends_once_idle_and_the_next_callback_starts_another():
    """A producer left open (or closed) kept its callback thread for good: a test run ended with
    27 of them alive. An idle runner now has none, and callbacks still run, in order."""
    result, futures = run_of(4)
    result.set_batches([0] * 4, 1)
    seen = []

    def record(meta):
        seen.append((meta.offset, threading.current_thread()))

    futures[0].add_callback(record)
    result.complete_batch(np.arange(4), 10)
    result._runner.drain(None)
    first = seen[0][1]
    first.join()  # an idle thread that never ends hangs the test here, until pytest's timeout
    assert result._runner._thread is None
    for f in futures[1:]:
        f.add_callback(record)
    result._runner.drain(None)
    assert [offset for offset, _ in seen] == [10, 11, 12, 13]
    assert {thread for _, thread in seen[1:]} == {seen[1][1]} and seen[1][1] is not first


def test_a_runs_metadata_carry_each_records_sizes_and_are_not_kept_once_the_caller_drops_them():
    """kafka-python's RecordMetadata fields, per record; and a run keeps its answers as columns,
    not as one RecordMetadata per record (tuple subclasses: 200,000 of them held 38 MB and set
    off the cyclic collector's full passes, issue 33)."""
    import tracemalloc

    count = 20_000
    result, futures = run_of(count, timestamps=7)
    sizes = (np.full(count, 3), np.arange(count), np.full(count, -1))
    result.set_batches([i % 2 for i in range(count)], 2, sizes)
    result.complete_batch(np.arange(0, count, 2), 100)
    result.complete_batch(np.arange(1, count, 2), 0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for f in futures:
            f.get(timeout=0)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    offsets = [f.get(timeout=0).offset for f in futures]
    first = futures[5].get(timeout=0)
    assert (first.topic, first.partition, first.topic_partition, first.offset, first.timestamp) == ("t", 1, ("t", 1), 2, 7)
    assert (first.serialized_key_size, first.serialized_value_size, first.serialized_header_size) == (3, 5, -1)
    assert offsets == [100 + i // 2 if i % 2 == 0 else i // 2 for i in range(count)]
    assert kept < 64 * count, f"{kept} bytes kept for {count} records' metadata"
