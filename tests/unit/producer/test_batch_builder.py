"""Cutting a stage of records into partition batches: by key, by bytes, within the topic's limit."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from raylog.producer.accumulator import RecordAccumulator, Stage
from raylog.producer.batch_builder import BatchBuilder, ListBinary
from raylog.config import ProducerConfig
from raylog.errors import RecordTooLargeError
from raylog.producer.futures import CallbackRunner
from raylog.metadata import TopicInfo
from raylog.producer.partitioner import partition_for_key
from raylog.storage import batch as rb
from tests.unit.producer.test_accumulator import StaticTopics, full_send


def stage_of(values, keys=None, partitions=6, max_message_bytes=8 << 20, config=None, headers=None):
    config = config or ProducerConfig()
    stage = Stage("t", TopicInfo(None, [None] * partitions, partitions, max_message_bytes, 0.0), config,
                  CallbackRunner())
    stage.values = list(values)
    stage.keys = list(keys) if keys is not None else [None] * len(values)
    stage.timestamps = [1_700_000_000_000 + i for i in range(len(values))]
    stage.headers = headers
    stage.nbytes = sum(len(v or b"") + len(k or b"") + 16 for v, k in zip(stage.values, stage.keys))
    return stage


def decode(batch) -> list[tuple[bytes | None, bytes | None]]:
    cols = rb.RecordBatch(bytes(batch.records)).columns()
    return list(zip(cols.keys.to_pylist(), cols.values.to_pylist()))


def test_keyed_records_go_to_kafkas_partition_in_send_order(seed):
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randint(1, 24)) for _ in range(3000)]
    values = [b"%d" % i for i in range(3000)]
    stage = stage_of(values, keys)
    batches = BatchBuilder(ProducerConfig(), 7).cut(stage)
    for b in batches:
        records = decode(b)
        assert all(partition_for_key(k, 6) == b.tp.partition for k, _ in records)
        numbers = [int(v) for _, v in records]
        assert numbers == sorted(numbers), "send order is kept within a partition"
    assert stage.result.partitions == [partition_for_key(k, 6) for k in keys]
    assert sorted(int(v) for b in batches for _, v in decode(b)) == list(range(3000))


def test_unkeyed_records_are_cut_into_batch_size_runs_over_the_partitions():
    values = [b"x" * 100] * 5000
    batches = BatchBuilder(ProducerConfig(batch_size=64 * 1024), 7).cut(stage_of(values))
    assert len({b.tp.partition for b in batches}) > 1
    assert all(len(b.records) <= 64 * 1024 + 1024 for b in batches)
    assert sum(b.count for b in batches) == 5000


def test_no_batch_ever_exceeds_the_topics_max_message_bytes(seed):
    """Issue 12: ~1 MiB of records plus one large record must not make one batch the broker rejects."""
    rng = random.Random(seed)
    limit = 100_000
    values = [rng.randbytes(rng.choice([10, 400, 4_000, 60_000, 99_000])) for _ in range(600)]
    stage = stage_of(values, partitions=1, max_message_bytes=limit)
    batches = BatchBuilder(ProducerConfig(compression_type="lz4"), 7).cut(stage)
    assert all(b.error is None for b in batches), "every record fits the limit on its own"
    assert all(len(b.records) <= limit for b in batches)
    assert [v for b in batches for _, v in decode(b)] == values


def test_a_record_too_large_even_compressed_fails_alone_naming_the_limit():
    big = random.Random(1).randbytes(5_000)
    stage = stage_of([b"before", big, b"after"], partitions=1, max_message_bytes=2_000)
    batches = BatchBuilder(ProducerConfig(), 7).cut(stage)
    failed = [b for b in batches if b.error is not None]
    assert len(failed) == 1 and failed[0].indices.tolist() == [1]
    assert isinstance(failed[0].error, RecordTooLargeError)
    assert "max_message_bytes" in str(failed[0].error) and "2000" in str(failed[0].error)
    assert [v for b in batches if b.error is None for _, v in decode(b)] == [b"before", b"after"]


def test_a_compressible_record_over_the_limit_uncompressed_is_still_sent():
    stage = stage_of([b"a" * 5_000], partitions=1, max_message_bytes=2_000)
    (batch,) = BatchBuilder(ProducerConfig(compression_type="lz4"), 7).cut(stage)
    assert batch.error is None and len(batch.records) <= 2_000


@pytest.mark.parametrize("idempotent", [True, False])
def test_batches_carry_the_producer_id_only_when_idempotent(idempotent):
    (batch,) = BatchBuilder(ProducerConfig(enable_idempotence=idempotent), 42).cut(stage_of([b"v"]))
    assert rb.RecordBatch(bytes(batch.records)).producer_id == (42 if idempotent else rb.NO_PRODUCER_ID)


def test_released_bytes_add_up_to_what_the_stage_reserved():
    stage = stage_of([b"x" * n for n in range(1, 2000)], keys=[b"k%d" % (n % 7) for n in range(1, 2000)])
    batches = BatchBuilder(ProducerConfig(batch_size=16 * 1024), 7).cut(stage)
    assert sum(b.nbytes for b in batches) == stage.nbytes


def test_headers_travel_with_their_records():
    headers = [[("i", b"%d" % i)] if i % 3 == 0 else None for i in range(30)]
    stage = stage_of([b"v%d" % i for i in range(30)], keys=[b"k%d" % i for i in range(30)], headers=headers)
    for b in BatchBuilder(ProducerConfig(), 7).cut(stage):
        cols = rb.RecordBatch(bytes(b.records)).columns()
        for i, hs in zip(b.indices.tolist(), cols.headers or [[]] * b.count):
            assert [tuple(h) for h in hs] == (headers[i] or [])
    assert np.array_equal(np.sort(np.concatenate([b.indices for b in BatchBuilder(ProducerConfig(), 7).cut(
        stage_of([b"v"] * 5))])), np.arange(5))


def test_send_stamps_records_in_milliseconds_whether_clock_read_or_given():
    """send() appends raw time.time_ns() readings, cut to ms with the stage; a record given its own
    timestamp turns the stage's readings into ms, and the records after it are stamped in ms too."""
    acc = RecordAccumulator(ProducerConfig(), StaticTopics(1), CallbackRunner())
    before = time.time_ns() // 1_000_000
    send = acc.plain_send(full_send)
    futures = [send("t", b"clock"),
               acc.append_record("t", None, b"given", 1_600_000_000_123, None, None, 21, time.time_ns()),
               send("t", b"clock again"),
               acc.append_record("t", None, b"headers", None, [("h", b"1")], None, 40, time.time_ns())]
    after = time.time_ns() // 1_000_000
    acc.close()
    (stage,) = acc.take_closed()
    (batch,) = BatchBuilder(ProducerConfig(), 7).cut(stage)
    decoded = rb.RecordBatch(bytes(batch.records))
    stamps = decoded.timestamps(decoded.columns()).tolist()
    assert stamps[1] == 1_600_000_000_123
    assert all(before <= s <= after for i, s in enumerate(stamps) if i != 1), stamps
    stage.result.complete_batch(batch.indices, 0)
    assert [f.get(timeout=0).timestamp for f in futures] == stamps
    assert all(type(f.get(timeout=0).timestamp) is int for f in futures)


def test_a_stage_of_clock_readings_is_cut_to_milliseconds():
    acc = RecordAccumulator(ProducerConfig(), StaticTopics(2), CallbackRunner())
    now_ns = 1_700_000_000_123_456_789
    futures = [acc.append_record("t", None, b"v%d" % i, None, None, None, 18, now_ns + i * 1_000_000)
               for i in range(5)]
    acc.close()
    (stage,) = acc.take_closed()
    (batch,) = BatchBuilder(ProducerConfig(), 7).cut(stage)
    decoded = rb.RecordBatch(bytes(batch.records))
    assert decoded.timestamps(decoded.columns()).tolist() == [1_700_000_000_123 + i for i in range(5)]
    stage.result.complete_batch(batch.indices, 0)
    assert [f.get(timeout=0).timestamp for f in futures] == [1_700_000_000_123 + i for i in range(5)]


@pytest.mark.parametrize("items, nulls, lengths", [
    ([b"ab", b"", b"c"], 0, [2, 0, 1]),
    ([b"ab", None, b"c"], 1, [2, 0, 1]),
    ([None, b"ab"], 1, [0, 2]),
    ([None, None], 2, [0, 0]),
])
def test_a_list_of_keys_or_values_counts_its_nulls_and_lengths(items, nulls, lengths):
    column = ListBinary(items)
    assert (column.nulls, column.lengths().tolist()) == (nulls, lengths)
    assert column.present().tolist() == [x is not None for x in items]


def send_order(batches):
    return sorted(batches, key=lambda b: int(b.indices[0]))


@pytest.mark.parametrize("sizes", [[100], [10, 100, 400, 2_000]], ids=["equal", "mixed"])
def test_unkeyed_runs_fill_each_batch_and_never_split_off_a_record(sizes):
    """Issue 33: a run took every record that *started* within its batch_size bytes, so the record
    across the boundary made it one record too large, and the cut sent that record as a batch of its
    own (1-record batches in every 6 MiB stage, each a call of its own). A run now closes before a
    record would pass batch_size: each batch but a stage's last is full."""
    rng = random.Random(3)
    config = ProducerConfig(batch_size=10_000)
    builder = BatchBuilder(config, 7)
    last = None
    for _ in range(3):
        values = [b"x" * rng.choice(sizes) for _ in range(1000)]
        batches = send_order(builder.cut(stage_of(values)))
        record_sizes = [len(v) + 16 for v in values]
        assert sum(b.count for b in batches) == 1000
        assert [v for b in batches for _, v in decode(b)] == values
        # A later stage's first batch goes on with the run the earlier stage's last batch began.
        filled = [b.nbytes for b in batches]
        if last is not None and batches[0].tp.partition == last.tp.partition:
            filled[0] += last.nbytes
        assert all(f <= config.batch_size for f in filled)
        for b, f, after in zip(batches, filled, batches[1:]):
            assert b.tp.partition != after.tp.partition, "each full run moves on to the next partition"
            assert f + record_sizes[int(after.indices[0])] > config.batch_size, "a run closed while the next record fit"
        last = batches[-1]


def test_small_unkeyed_stages_stick_to_one_partition_until_its_batch_is_full():
    """KIP-480 across stages: a slow producer's stages of a few records each continue the sticky
    partition's run, and move on to another partition once batch_size bytes have gone to it."""
    config = ProducerConfig(batch_size=10_000)
    builder = BatchBuilder(config, 7)
    partitions = []
    for _ in range(60):  # 5 x 116 bytes a stage: 17 stages fill a run
        partitions += [b.tp.partition for b in builder.cut(stage_of([b"x" * 100] * 5))]
    changes = [i for i in range(1, len(partitions)) if partitions[i] != partitions[i - 1]]
    assert changes[:3] == [17, 34, 51]
