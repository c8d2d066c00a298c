"""The client's metadata cache keeps the newest answer: a lookup made without waiting
(LeaderWatch) may be collected after a later, blocking lookup already showed a new election, and
installing it then named the old leader again until the next refresh."""

from __future__ import annotations

from raylog.metadata import Metadata
from raylog.protocol import PartitionInfo, TopicDescription


def answer(leader_epoch: int):
    partition = PartitionInfo("t", 0, None, (), leader_epoch, f"leader-at-{leader_epoch}")
    return TopicDescription("t", (partition,)), [f"handle-{leader_epoch}"]


def test_an_answer_asked_before_the_cached_one_does_not_replace_it():
    md = Metadata(controller=None, timeout_s=1, session=None)
    newer = md._install("t", answer(leader_epoch=1), loaded_at=20.0)
    late = md._install("t", answer(leader_epoch=0), loaded_at=10.0)
    assert late is newer
    assert md.leader_epoch("t", 0) == 1 and md.topic("t").leaders == ["handle-1"]


def test_an_answer_asked_after_the_cached_one_replaces_it():
    md = Metadata(controller=None, timeout_s=1, session=None)
    md._install("t", answer(leader_epoch=0), loaded_at=10.0)
    md._install("t", answer(leader_epoch=2), loaded_at=30.0)
    assert md.leader_epoch("t", 0) == 2


def test_an_answer_asked_before_the_cache_was_dropped_as_wrong_is_not_cached():
    """invalidate() empties the entry: without a floor, a LeaderWatch answer asked before it found
    nothing newer cached and put the replaced leader back."""
    md = Metadata(controller=None, timeout_s=1, session=None)
    md._install("t", answer(leader_epoch=0), loaded_at=10.0)
    md.invalidate("t")
    asked_before = md._install("t", answer(leader_epoch=0), loaded_at=10.5)
    assert asked_before.description.partitions[0].leader_epoch == 0, "the caller still gets its answer"
    assert "t" not in md._topics, "but the cache stays empty, for a lookup asked after the drop"
