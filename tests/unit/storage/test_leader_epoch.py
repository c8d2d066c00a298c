"""LeaderEpochCache and epoch-based truncation, including KIP-101's two scenarios on real logs."""

from __future__ import annotations

from actors.replica_state import truncation_offset
from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage import files
from raylog.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache
from raylog.storage.log import PartitionLog
from tests.support.builders import read_all
from tests.unit.storage.disk_calls import directory_synced_after


def test_end_offset_of_an_epoch_is_the_next_epochs_start_or_the_log_end(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in [(0, 0), (2, 10), (5, 30)]:
        cache.assign(epoch, start)
    assert cache.end_offset_for(0, 40) == (0, 10)
    assert cache.end_offset_for(1, 40) == (0, 10), "an unknown epoch answers for the largest below it"
    assert cache.end_offset_for(3, 40) == (2, 30)
    assert cache.end_offset_for(5, 40) == (5, 40)
    assert cache.end_offset_for(9, 40) == (5, 40)
    empty = LeaderEpochCache(tmp_path / "x")
    assert empty.end_offset_for(0, 0) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_the_epoch_of_an_offset_is_that_of_the_last_epoch_starting_at_or_below_it(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.epoch_of(0) == UNDEFINED_EPOCH
    for epoch, start in [(1, 5), (2, 10), (5, 30)]:
        cache.assign(epoch, start)
    assert [cache.epoch_of(o) for o in (4, 5, 9, 10, 29, 30, 10**9)] == [UNDEFINED_EPOCH, 1, 1, 2, 2, 5, 5]
    assert cache.epoch_of(-1) == UNDEFINED_EPOCH


def test_the_cache_survives_reopening_and_truncation_is_checkpointed(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(1, 5)
    cache.assign(3, 7)
    cache.assign(4, 9)
    cache.truncate_from_end(8)
    assert LeaderEpochCache(tmp_path).entries() == [(1, 0), (3, 7)]
    cache.truncate_from_start(8)
    assert LeaderEpochCache(tmp_path).entries() == [(3, 8)]


def test_every_checkpoint_write_reaches_the_directory(tmp_path, disk_calls):
    """Finding 17: the rename of the checkpoint into place is fsynced with its directory."""
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    assert directory_synced_after(disk_calls, tmp_path, "replace", tmp_path / files.LEADER_EPOCH_CHECKPOINT_FILE)


def append(log: PartitionLog, values: list[bytes], epoch: int, cache: LeaderEpochCache) -> None:
    cache.assign(epoch, log.log_end_offset)
    log.append(rb.build(values, timestamps_ms=1000), epoch)


def copy(leader: PartitionLog, follower: PartitionLog, cache: LeaderEpochCache, upto: int) -> None:
    """What a follower's fetch does: append the leader's batches below ``upto`` as they are."""
    data = leader.read(follower.log_end_offset, 1 << 20, upto)
    for batch in rb.iter_batches(data):
        cache.assign(batch.leader_epoch, batch.base_offset)
    follower.append_as_follower(data)


def follower_truncates(follower: PartitionLog, cache: LeaderEpochCache, leader_cache: LeaderEpochCache,
                       leader_end: int, high_watermark: int) -> int:
    latest = cache.latest_epoch()
    epoch, end = leader_cache.end_offset_for(latest, leader_end)
    target = truncation_offset(cache, follower.log_end_offset, latest, epoch, end, high_watermark)
    follower.truncate_to(target)
    cache.truncate_from_end(follower.log_end_offset)
    return target


def test_kip101_scenario_1_a_restarted_follower_keeps_what_the_leader_committed(tmp_path):
    """High-watermark truncation loses m2: B truncates to its stale HW (1), A dies, B leads without m2.
    With epochs, B asks A where epoch 0 ends (2) and keeps m2."""
    a, b = PartitionLog(tmp_path / "a", TopicConfig()), PartitionLog(tmp_path / "b", TopicConfig())
    a_epochs, b_epochs = LeaderEpochCache(tmp_path / "a"), LeaderEpochCache(tmp_path / "b")
    append(a, [b"m1"], 0, a_epochs)
    append(a, [b"m2"], 0, a_epochs)
    copy(a, b, b_epochs, upto=2)
    b_high_watermark = 1  # B learned HW=1 with m2's fetch; the fetch that would tell it HW=2 never came
    b.close()
    b = PartitionLog(tmp_path / "b", TopicConfig())
    assert follower_truncates(b, b_epochs, a_epochs, a.log_end_offset, b_high_watermark) == 2
    assert [v for _, _, v in read_all(b)] == [b"m1", b"m2"]


def test_kip101_scenario_2_a_returning_old_leader_drops_exactly_its_divergent_suffix(tmp_path):
    """A (leader, epoch 0) has m1, m2; B has m1. Both crash; B returns first, leads epoch 1 and writes
    m3 at offset 1. HW truncation would leave A with m2 at offset 1: diverged. With epochs, A learns
    epoch 0 ended at 1 on B, drops m2 and fetches m3."""
    a, b = PartitionLog(tmp_path / "a", TopicConfig()), PartitionLog(tmp_path / "b", TopicConfig())
    a_epochs, b_epochs = LeaderEpochCache(tmp_path / "a"), LeaderEpochCache(tmp_path / "b")
    append(a, [b"m1"], 0, a_epochs)
    copy(a, b, b_epochs, upto=1)
    append(a, [b"m2"], 0, a_epochs)
    append(b, [b"m3"], 1, b_epochs)
    a_high_watermark = 2  # A's own view as the old leader
    assert follower_truncates(a, a_epochs, b_epochs, b.log_end_offset, a_high_watermark) == 1
    copy(b, a, a_epochs, upto=b.log_end_offset)
    assert read_all(a) == read_all(b) == [(0, None, b"m1"), (1, None, b"m3")]
    assert a_epochs.entries() == b_epochs.entries() == [(0, 0), (1, 1)]


def test_a_follower_two_epochs_behind_uses_the_smaller_of_both_ends(tmp_path):
    """KIP-279: the leader answers for an older epoch than the follower's latest; the follower's own
    end of that epoch can be smaller than the leader's."""
    f = PartitionLog(tmp_path / "f", TopicConfig())
    f_epochs = LeaderEpochCache(tmp_path / "f")
    append(f, [b"a", b"b"], 1, f_epochs)   # offsets 0-1, epoch 1
    append(f, [b"c"], 3, f_epochs)         # offset 2, epoch 3 (never reached the new leader)
    leader_epochs = LeaderEpochCache(tmp_path / "l")
    leader_epochs.assign(1, 0)
    leader_epochs.assign(4, 5)
    epoch, end = leader_epochs.end_offset_for(3, 9)
    assert (epoch, end) == (1, 5)
    assert truncation_offset(f_epochs, f.log_end_offset, 3, epoch, end, 0) == 2


def test_a_follower_whose_epochs_the_unclean_leader_never_had_converges_to_the_leaders_log(tmp_path):
    """Issue 19, finding 8. A (leader, epoch 0) has 300 records, the last 100 never copied to C,
    whose log starts fresh at 200 (it caught up by starting at A's log start, so it has no epoch
    entry of its own below 200). C is elected uncleanly (epoch 2) and writes 150 records. A asks C
    where epoch 0 ends: C knows no epoch <= 0. Truncating to A's high watermark (300), above C's
    log end, left A's 200..299 in place under C's later records: the logs differed for good. C
    answers with where its first epoch starts (Kafka's rule for an epoch below the first), and A
    cuts there."""
    a, c = PartitionLog(tmp_path / "a", TopicConfig()), PartitionLog(tmp_path / "c", TopicConfig())
    a_epochs, c_epochs = LeaderEpochCache(tmp_path / "a"), LeaderEpochCache(tmp_path / "c")
    for n in range(3):
        append(a, [b"a%d-%d" % (n, i) for i in range(100)], 0, a_epochs)
    c.truncate_fully_and_start_at(200)
    c_epochs.assign(2, 200)
    append(c, [b"c-%d" % i for i in range(150)], 2, c_epochs)
    target = follower_truncates(a, a_epochs, c_epochs, c.log_end_offset, high_watermark=300)
    assert target == 200
    copy(c, a, a_epochs, upto=c.log_end_offset)
    assert [v for o, _, v in read_all(a) if o >= 200] == [v for _, _, v in read_all(c)]
    assert a.log_end_offset == c.log_end_offset == 350
