"""PartitionLog on real files: appends, reads, rolls, retention, compaction, truncation, bad input."""

import errno
import os
import random

import pytest

from raylog.config import TopicConfig
from raylog.errors import (
    CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError, RaylogError, RecordTooLargeError,
    UnsupportedCodecError,
)
from raylog.storage import batch as rb
from raylog.storage import files
from raylog.storage.log import PartitionLog
from tests.support.builders import append_batches, read_all
from tests.support.clock import FakeClock
from tests.unit.storage.disk_calls import directory_synced_after, last_index

SMALL = TopicConfig(segment_bytes=2048, index_interval_bytes=128, retention_ms=-1)


def test_append_assigns_offsets_and_reads_cross_segment_rolls(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    values = append_batches(log, random.Random(1))
    assert len(log.segments) > 3
    assert [v for _, _, v in read_all(log)] == values
    assert [o for o, _, _ in read_all(log)] == list(range(200))


def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(2), batches=3, per=10)
    first = next(rb.iter_batches(log.read(13, 10_000)))
    assert (first.base_offset, first.last_offset) == (10, 19)


def test_read_at_log_end_is_empty_and_outside_the_log_is_out_of_range(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(3), batches=2)
    assert log.read(10, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 1000)
    log.delete_records(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)


def test_max_bytes_is_honoured_but_one_batch_always_returned(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig())
    for _ in range(5):
        log.append(rb.build([b"x" * 500], compression="none"))
    assert len(list(rb.iter_batches(log.read(0, 10)))) == 1
    assert len(list(rb.iter_batches(log.read(0, 1300)))) == 2
    assert len(list(rb.iter_batches(log.read(0, 10_000, max_offset=3)))) == 3


def test_offset_for_timestamp_finds_first_record_at_or_after(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    for i in range(30):
        log.append(rb.build([b"a", b"b"], timestamps_ms=[i * 100, i * 100 + 50]))
    assert log.offset_for_timestamp(1030) == (21, 1050)
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(10_000) is None


def test_log_append_time_topic_stamps_the_broker_clock(tmp_path):
    clock = FakeClock(5_000)
    log = PartitionLog(tmp_path, TopicConfig(message_timestamp_type="LogAppendTime"), clock)
    info = log.append(rb.build([b"a"], timestamps_ms=1))
    assert info.log_append_time_ms == 5_000
    batch = next(rb.iter_batches(log.read(0, 1000)))
    batch.validate()
    assert batch.timestamps(batch.columns()) == [5_000]


def test_segment_ms_rolls_by_record_time(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig(segment_ms=1000))
    log.append(rb.build([b"a"], timestamps_ms=0))
    log.append(rb.build([b"b"], timestamps_ms=500))
    assert len(log.segments) == 1
    log.append(rb.build([b"c"], timestamps_ms=1600))
    assert len(log.segments) == 2 and log.active.base_offset == 2


def test_full_index_rolls_the_segment(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig(segment_index_bytes=64, index_interval_bytes=0))
    for _ in range(30):
        log.append(rb.build([b"x" * 20]))
    assert len(log.segments) > 1
    assert len(read_all(log)) == 30


def test_retention_ms_deletes_old_segments_and_moves_log_start(tmp_path):
    clock = FakeClock(10_000)
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=2048, retention_ms=1000), clock)
    for i in range(40):
        log.append(rb.build([b"x" * 100], timestamps_ms=10_000 + i))
    assert log.delete_old_segments() == 0
    clock.advance(5000)
    assert log.delete_old_segments() > 0
    assert log.log_start_offset == log.log_end_offset == 40
    log.append(rb.build([b"new"], timestamps_ms=clock()))
    assert [v for _, _, v in read_all(log)] == [b"new"]


def test_retention_bytes_keeps_the_newest_data_under_the_bound(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=1024, retention_bytes=3000, retention_ms=-1))
    for _ in range(60):
        log.append(rb.build([b"x" * 100], compression="none"))
    log.delete_old_segments()
    assert log.size_bytes - log.segments[0].size < 3000
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert [o for o, _, _ in read_all(log)] == list(range(log.log_start_offset, 60))


def test_delete_records_survives_reopen(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(4))
    log.delete_records(77)
    log.close()
    log = PartitionLog(tmp_path, SMALL)
    assert log.log_start_offset == 77
    assert read_all(log)[0][0] == 77


def test_compaction_keeps_the_last_record_per_key_and_expires_tombstones(tmp_path):
    clock = FakeClock(0)
    cfg = TopicConfig(cleanup_policy="compact", segment_bytes=1024, delete_retention_ms=1000)
    log = PartitionLog(tmp_path, cfg, clock)
    for i in range(60):
        key = b"k%d" % (i % 5)
        value = None if (i % 5 == 4 and i > 50) else b"v%d" % i
        log.append(rb.build([value], keys=[key], timestamps_ms=i))
    active_start = log.active.base_offset
    log.roll()
    log.append(rb.build([b"tail"], keys=[b"z"], timestamps_ms=100))
    log.compact()
    kept = read_all(log)
    latest = {}
    for o, k, v in kept:
        latest[k] = (o, v)
    assert latest[b"k0"] == (55, b"v55")
    assert latest[b"k4"] == (59, None), "a fresh tombstone stays for delete_retention_ms"
    assert len([1 for _, k, _ in kept if k == b"k1"]) == 1
    assert active_start <= 60
    clock.advance(10_000)
    log.compact()
    compacted = read_all(log)
    assert all(k != b"k4" for _, k, _ in compacted), "an expired tombstone is dropped"
    assert [o for o, _, _ in compacted] == sorted({o for o, _, _ in compacted}), "offsets stay increasing"
    log.close()
    reopened = PartitionLog(tmp_path, cfg, clock)
    assert read_all(reopened) == compacted, "a compacted log reopens to the same records"
    assert dict((k, v) for _, k, v in read_all(reopened))[b"k0"] == b"v55"


def test_compacted_topic_refuses_null_keys_and_writes_nothing(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig(cleanup_policy="compact"))
    with pytest.raises(InvalidRecordError):
        log.append(rb.build([b"v"], keys=[None]))
    assert (log.log_end_offset, log.size_bytes) == (0, 0)


def test_truncate_to_removes_the_batch_holding_the_offset_and_all_after(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(5), batches=40, per=5)
    cut = log.truncate_to(103)
    assert cut > 0 and log.log_end_offset == 100
    assert [o for o, _, _ in read_all(log)] == list(range(100))
    log.append(rb.build([b"after"]))
    assert read_all(log)[-1] == (100, None, b"after")
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, read_all(log)) == (0, 0, [])


def test_truncate_fully_and_start_at_restarts_offsets(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(6), batches=3)
    log.truncate_fully_and_start_at(500)
    assert log.append(rb.build([b"x"])).base_offset == 500
    log.close()
    assert PartitionLog(tmp_path, SMALL).log_start_offset == 500


def test_flush_messages_flushes_every_n_records(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig(flush_messages=2))
    for _ in range(4):
        log.append(rb.build([b"x"]))
    assert log.stats.flushes == 2


def test_clean_close_and_reopen_keeps_everything(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    values = append_batches(log, random.Random(7))
    log.close()
    log = PartitionLog(tmp_path, SMALL)
    assert log.recovered_cleanly and log.stats.bytes_cut_by_recovery == 0
    assert [v for _, _, v in read_all(log)] == values


def test_follower_append_keeps_offsets_and_refuses_going_backwards(tmp_path):
    leader = PartitionLog(tmp_path / "leader", SMALL)
    append_batches(leader, random.Random(8), batches=4)
    follower = PartitionLog(tmp_path / "follower", SMALL)
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert read_all(follower) == read_all(leader)
    with pytest.raises(RaylogError):
        follower.append_as_follower(leader.read(0, 100))


def valid():
    return rb.build([b"ok"], compression="none")


def with_crc(buf, crc):
    b = bytearray(buf)
    b[rb.CRC_POS:rb.CRC_POS + 4] = crc.to_bytes(4, "big")
    return bytes(b)


def with_codec(buf, codec):
    b = bytearray(buf)
    b[rb.ATTRIBUTES_POS:rb.ATTRIBUTES_POS + 2] = codec.to_bytes(2, "big")
    return bytes(b)


@pytest.mark.parametrize("bad,error", [
    (b"garbage" * 20, CorruptRecordError),
    (b"", CorruptRecordError),
    (with_crc(valid(), 1), CorruptRecordError),
    (with_codec(valid(), 5), UnsupportedCodecError),
    (rb.build([b"x" * 5000], compression="none"), RecordTooLargeError),
    (valid()[:-3], CorruptRecordError),
    (valid() + b"\x00" * 20, CorruptRecordError),
])
def test_bad_batches_raise_and_leave_the_log_unchanged(tmp_path, bad, error):
    log = PartitionLog(tmp_path, TopicConfig(max_message_bytes=4096))
    log.append(valid())
    before = (log.log_end_offset, log.size_bytes, log.read(0, 1 << 20))
    with pytest.raises(error):
        log.append(bad)
    assert (log.log_end_offset, log.size_bytes, log.read(0, 1 << 20)) == before


# --- the recovery point: the offset below which every byte is known to be fsynced -------------


def checkpointed_recovery_point(directory):
    return files.read_checkpoint(directory / files.RECOVERY_POINT_FILE)


def test_recovery_point_moves_only_over_contiguously_synced_segments(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, random.Random(9))
    rolled = log.take_unsynced()
    assert len(rolled) >= 3 and log.recovery_point == 0
    rolled[1].sync_data()
    log.mark_synced([rolled[1]])
    assert log.recovery_point == 0, "a synced segment above an unsynced one moves nothing"
    rolled[0].sync_data()
    log.mark_synced([rolled[0]])
    assert log.recovery_point == rolled[2].base_offset
    assert checkpointed_recovery_point(tmp_path) == log.recovery_point
    assert log.take_unsynced() == [], "segments handed out are not handed out twice"
    log.mark_synced(rolled[2:])
    assert log.recovery_point == rolled[2].base_offset, "a segment whose fsync did not run is still owed"
    assert log.take_unsynced() == rolled[2:], "and is handed out again"


def test_roll_with_sync_moves_the_recovery_point_to_the_new_segment(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(10))
    assert log.recovery_point == log.active.base_offset > 0
    assert checkpointed_recovery_point(tmp_path) == log.recovery_point


def test_flush_moves_the_recovery_point_to_the_log_end(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, random.Random(11), batches=3)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == log.log_end_offset == 15
    append_batches(log, random.Random(12))
    log.flush()
    rolled = log.take_unsynced()
    assert log.recovery_point == 15, "no further than where the first unsynced segment was flushed to"
    for seg in rolled:
        seg.sync_data()
    log.mark_synced(rolled)
    assert log.recovery_point == log.log_end_offset, "the active segment was flushed to the end"


def test_truncate_to_lowers_the_recovery_point_to_the_new_log_end(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(13))
    log.flush()
    log.truncate_to(63)
    assert log.recovery_point == log.log_end_offset == 60
    assert checkpointed_recovery_point(tmp_path) <= 63
    log.truncate_fully_and_start_at(500)
    assert log.recovery_point == 500 == checkpointed_recovery_point(tmp_path)


def test_deleting_unsynced_segments_moves_the_recovery_point_past_them(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, random.Random(14))
    log.delete_records(100)
    assert log.recovery_point == log.segments[0].base_offset > 0
    assert all(seg in log.segments for seg in log.take_unsynced())


# --- what a power loss cannot undo -------------------------------------------------------------


@pytest.mark.parametrize("sync_rolled_later", [False, True])
def test_roll_fsyncs_the_directory_after_creating_the_segment_files(tmp_path, disk_calls, sync_rolled_later):
    """Finding 17: a flushed record in a segment whose directory entry was lost is lost."""
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = sync_rolled_later
    append_batches(log, random.Random(15), batches=3)
    disk_calls.clear()
    seg = log.roll()
    for path in files.segment_paths(tmp_path, seg.base_offset):
        assert directory_synced_after(disk_calls, tmp_path, "create", path), path.name


def test_truncate_to_makes_the_cut_and_the_removed_segments_durable(tmp_path, disk_calls):
    """Stale batches that came back after a power loss would undo replication's divergence repair."""
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(16))
    holder = log.segments[log._segment_slot(63)]
    removed = [s.log_path for s in log.segments if s.base_offset > 63]
    assert removed
    disk_calls.clear()
    log.truncate_to(63)
    assert last_index(disk_calls, "fsync", holder.log_path) >= 0, "the cut file is fsynced"
    for path in removed:
        assert directory_synced_after(disk_calls, tmp_path, "unlink", path.with_name(path.name + ".deleted"))


def test_a_segment_whose_fsync_failed_never_moves_the_recovery_point_even_if_a_retry_succeeds(tmp_path, monkeypatch):
    # Linux may drop the dirty pages of a failed fsync and report the next one a success
    # ("fsyncgate"): only a recovery scan after a restart can vouch for that segment again.
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, random.Random(14))
    rolled = log.take_unsynced()
    real_fsync = os.fsync

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    assert rolled[0].sync_data() is False
    monkeypatch.setattr(os, "fsync", real_fsync)
    log.mark_synced([rolled[0]])
    assert log.take_unsynced() == [], "a segment whose fsync failed is not handed out again"
    for seg in rolled[1:]:
        assert seg.sync_data()
    log.mark_synced(rolled[1:])
    assert log.recovery_point == 0
    with pytest.raises(OSError):
        rolled[0].sync()
    assert not rolled[0].synced
    log.close()
    assert checkpointed_recovery_point(tmp_path) == 0, "a clean close does not vouch for it either"
