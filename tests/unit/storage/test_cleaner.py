"""Compaction rounds: a bounded key map, the high-watermark limit, and a round interleaved with
appends and truncation (what the replica's event loop does between a round's steps)."""

from __future__ import annotations

import random

from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage import files
from raylog.storage.cleaner import MAP_ENTRY_OVERHEAD_BYTES, Cleaner
from raylog.storage.log import PartitionLog
from tests.support.builders import read_all
from tests.support.clock import FakeClock
from tests.unit.storage.disk_calls import last_index

COMPACT = TopicConfig(cleanup_policy="compact", segment_bytes=4096, index_interval_bytes=256,
                      delete_retention_ms=10**12)


def fill(log, rng, batches, per=8, keyspace=60, ts=0):
    for b in range(batches):
        keys = [b"key-%d" % rng.randrange(keyspace) for _ in range(per)]
        values = [b"%d:%d" % (b, i) for i in range(per)]
        log.append(rb.build(values, keys=keys, timestamps_ms=ts + b, compression=rng.choice(["lz4", "none"])))


def latest_per_key(records):
    return {k: (o, v) for o, k, v in records}


def test_bounded_rounds_keep_each_keys_last_record_and_reach_what_one_unbounded_round_does(tmp_path):
    rng = random.Random(7)
    bounded = PartitionLog(tmp_path / "bounded", COMPACT, FakeClock(0))
    whole = PartitionLog(tmp_path / "whole", COMPACT, FakeClock(0))
    for log in (bounded, whole):
        fill(log, random.Random(7), 300)
        log.roll()
    before = read_all(bounded)
    cleaner = Cleaner(bounded, dedupe_buffer_bytes=30 * (6 + MAP_ENTRY_OVERHEAD_BYTES))
    rounds = 0
    while cleaner.dirty():
        cleaner.clean(0)
        rounds += 1
        assert cleaner.map_entries <= 30 + 8, "a round's map stops within one batch of its bound"
    cleaner.clean(0)  # a last round over the clean part applies the final map's keys
    whole.compact()
    assert rounds > 3, "the bound made the work take several rounds"
    assert latest_per_key(read_all(bounded)) == latest_per_key(before)
    assert read_all(bounded) == read_all(whole)
    assert len(read_all(bounded)) == len(latest_per_key(before)) < len(before) / 10
    del rng


def test_a_round_never_maps_records_at_or_above_the_limit(tmp_path):
    log = PartitionLog(tmp_path, COMPACT, FakeClock(0))
    for i in range(200):
        log.append(rb.build([b"v%d" % i], keys=[b"k%d" % (i % 3)], timestamps_ms=i))
    log.roll()
    limit = 100
    log.compact(limit)
    kept = read_all(log)
    assert [o for o, _, _ in kept if o >= limit] == list(range(limit, 200)), "above the limit nothing moves"
    below = [o for o, _, _ in kept if o < limit]
    assert below == [97, 98, 99], "below it, each key's last record under the limit stays"


def test_a_round_interleaved_with_appends_and_truncation_loses_no_surviving_key(tmp_path):
    rng = random.Random(11)
    log = PartitionLog(tmp_path, COMPACT, FakeClock(0))
    fill(log, rng, 200)
    log.roll()
    hw = log.log_end_offset - 400
    steps = log.cleaner.steps(0, hw)
    for _ in range(50):
        next(steps)
    fill(log, rng, 20, ts=1000)  # appends roll new segments while the round runs
    cut = hw + 100
    log.truncate_to(cut)  # replication cuts above the high watermark mid-round
    fill(log, rng, 10, ts=2000)
    expected = latest_per_key(read_all(log))
    for _ in steps:
        pass
    assert latest_per_key(read_all(log)) == expected
    offsets = [o for o, _, _ in read_all(log)]
    assert offsets == sorted(set(offsets))
    log.close()
    assert latest_per_key(read_all(PartitionLog(tmp_path, COMPACT, FakeClock(0)))) == expected


def test_next_maintenance_is_the_oldest_segments_expiry_or_a_pending_flush(tmp_path):
    clock = FakeClock(10_000)
    log = PartitionLog(tmp_path / "r", TopicConfig(retention_ms=5_000, segment_bytes=1024), clock)
    assert log.next_maintenance_ms() is None, "an empty log has nothing due"
    log.append(rb.build([b"x"], timestamps_ms=9_000))
    log.append(rb.build([b"y"], timestamps_ms=9_500))
    assert log.next_maintenance_ms() == 9_500 + 5_000 + 1
    clock.advance(5_000)
    assert log.delete_old_segments() == 1 and log.next_maintenance_ms() is None
    flushed = PartitionLog(tmp_path / "f", TopicConfig(retention_ms=-1, flush_ms=2_000), clock)
    assert flushed.next_maintenance_ms() is None
    flushed.append(rb.build([b"z"], timestamps_ms=1))
    assert flushed.next_maintenance_ms() == clock() + 2_000
    clock.advance(2_000)
    flushed.maybe_flush()
    assert flushed.next_maintenance_ms() is None


def test_a_swap_is_durable_before_the_old_segment_is_removed(tmp_path, disk_calls):
    """Finding 17: if the rename to .swap were lost while the old segment's removal was not, a power
    loss would leave neither; recovery completes a .swap only if it is there."""
    log = PartitionLog(tmp_path, COMPACT, FakeClock(0))
    fill(log, random.Random(3), 60)
    log.roll()
    disk_calls.clear()
    log.compact()
    swapped = [path for kind, path in disk_calls if kind == "replace" and path.name.endswith(files.SWAP_SUFFIX)]
    assert swapped
    for swap in swapped:
        log_file = swap.with_name(swap.name[:-len(files.SWAP_SUFFIX)])
        removed = last_index(disk_calls, "replace", log_file.with_name(log_file.name + files.DELETED_SUFFIX))
        synced = [i for i, call in enumerate(disk_calls) if call == ("fsync", tmp_path)]
        assert any(last_index(disk_calls, "replace", swap) < i < removed for i in synced)
