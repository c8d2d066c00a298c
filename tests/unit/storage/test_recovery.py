"""Opening a partition directory after an unclean shutdown: what is scanned, what is trusted.

Fault model: a power loss keeps a file's size (the metadata reached the disk)
but not the last pages of its data, which read back as zeros or as whatever
the disk held before. Every segment whose data lies at or above the recovery
point may be damaged that way, not only the last one; segments below it were
fsynced and are trusted.
"""

import random

import pytest

from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage import files
from raylog.storage.log import PartitionLog
from tests.support.builders import append_batches, read_all
from tests.unit.storage.disk_calls import directory_synced_after

SMALL = TopicConfig(segment_bytes=2048, index_interval_bytes=128, retention_ms=-1)


def damage_tail(path, start, garbage: bool, rng):
    """Overwrite ``path`` from ``start`` to its end, keeping its size, as a lost page reads back."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(rng.randbytes(size - start) if garbage else bytes(size - start))
    assert path.stat().st_size == size


@pytest.mark.parametrize("garbage", [False, True], ids=["zeros", "garbage"])
def test_recover_scans_every_segment_above_the_recovery_point(tmp_path, garbage):
    """Issue 16, finding 16: a rolled segment not yet fsynced is scanned, not trusted."""
    rng = random.Random(16)
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True  # nobody syncs the rolled segments: the recovery point stays at 0
    values = append_batches(log, rng)
    assert len(log.segments) >= 4
    middle = log.segments[1]
    last = list(middle.batches())[-1]
    cut_at, end, damage_at = last.position, last.base_offset, last.position + last.size // 2
    del last  # a view into the segment's mapping, which close_unclean releases
    names_kept = sorted(p.name for p in tmp_path.glob("*.log"))[:2]
    log.close_unclean()
    # Keep the header of the last batch intact: only its CRC can tell the batch is lost.
    damage_tail(middle.log_path, damage_at, garbage, rng)

    log = PartitionLog(tmp_path, SMALL)
    assert log.log_end_offset == end
    assert [o for o, _, _ in read_all(log)] == list(range(end))
    assert [v for _, _, v in read_all(log)] == values[:end]
    assert sorted(p.name for p in tmp_path.glob("*.log")) == names_kept, "segments after the cut are deleted"
    assert log.stats.bytes_cut_by_recovery >= middle.size - cut_at
    assert log.append(rb.build([b"after"])).base_offset == end


def test_recover_leaves_segments_below_the_recovery_point_unscanned(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, random.Random(17))
    rolled = log.take_unsynced()
    for seg in rolled:
        seg.sync_data()
    log.mark_synced(rolled)
    assert log.recovery_point == log.active.base_offset
    log.close_unclean()

    log = PartitionLog(tmp_path, SMALL)
    assert log.stats.segments_recovered == 1, "only the active segment lies above the recovery point"
    assert [o for o, _, _ in read_all(log)] == list(range(200))


def test_missing_recovery_point_checkpoint_recovers_every_segment(tmp_path):
    """As Kafka does when its recovery-point-offset-checkpoint is missing."""
    log = PartitionLog(tmp_path, SMALL)
    append_batches(log, random.Random(18))
    segment_count = len(log.segments)
    log.close_unclean()
    (tmp_path / files.RECOVERY_POINT_FILE).unlink()

    log = PartitionLog(tmp_path, SMALL)
    assert log.stats.segments_recovered == segment_count
    assert [o for o, _, _ in read_all(log)] == list(range(200))


def test_recovered_segments_are_handed_out_for_sync_and_then_trusted(tmp_path):
    """Segments recovered after a crash are in the page cache only: the recovery point moves over
    them once their fsync is reported, so the next crash does not scan them again."""
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, random.Random(19))
    log.close_unclean()

    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    assert log.recovery_point == 0
    recovered = log.take_unsynced()
    assert [s.base_offset for s in recovered] == [s.base_offset for s in log.segments[:-1]]
    for seg in recovered:
        seg.sync_data()
    log.mark_synced(recovered)
    assert log.recovery_point == log.active.base_offset
    log.close_unclean()

    log = PartitionLog(tmp_path, SMALL)
    assert log.stats.segments_recovered == 1


def test_clean_open_recovers_nothing_and_starts_at_the_log_end(tmp_path):
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, random.Random(20))
    log.close()
    assert files.read_checkpoint(tmp_path / files.RECOVERY_POINT_FILE) == 200

    log = PartitionLog(tmp_path, SMALL)
    assert log.stats.segments_recovered == 0
    assert log.recovery_point == log.log_end_offset == 200


def test_segments_deleted_after_a_cut_are_deleted_durably(tmp_path, disk_calls):
    """Finding 17: brought back by a power loss, they would sit beside the records appended after
    the cut, under the same offsets."""
    rng = random.Random(21)
    log = PartitionLog(tmp_path, SMALL)
    log.sync_rolled_later = True
    append_batches(log, rng)
    middle = log.segments[1]
    last = list(middle.batches())[-1]
    damage_at = last.position + last.size // 2
    del last
    later = [seg.log_path for seg in log.segments[2:]]
    log.close_unclean()
    damage_tail(middle.log_path, damage_at, False, rng)

    disk_calls.clear()
    PartitionLog(tmp_path, SMALL)
    for path in later:
        removed = path.with_name(path.name + files.DELETED_SUFFIX)
        assert directory_synced_after(disk_calls, tmp_path, "unlink", removed)
