"""ControllerState: topics, elections, ISR changes and reassignments as records; replay rebuilds it."""

from __future__ import annotations

import pytest

from actors.controller_state import NO_LEADER, ControllerState
from raylog.errors import (
    FencedLeaderEpochError, InvalidConfigError, InvalidPartitionError, InvalidReplicationFactorError,
    InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)

NODES = ["n0", "n1", "n2", "n3"]


def place(count, first, rf):
    return [[(NODES[(first + p + r) % len(NODES)], "/data") for r in range(rf)] for p in range(count)]


def apply(state, result):
    records, response = result
    for r in records:
        state.replay(r)
    return records, response


def everyone(_rid):
    return True


def test_replaying_the_emitted_records_rebuilds_an_equal_state():
    state, log = ControllerState(), []
    log += apply(state, state.create_topic("a", 2, 3, {"retention.ms": 1000}, "id-a", place))[0]
    log += apply(state, state.create_partitions("a", 4, place))[0]
    log += apply(state, state.create_topic("b", 1, 1, {}, "id-b", place))[0]
    log += apply(state, state.replicas_lost("a", 0, {0}, lambda r: r != 0, False))[0]
    log += apply(state, state.alter_isr("a", 1, 0, 0, 0, [0], everyone))[0]
    log += apply(state, state.delete_topic("b", lambda r: r["node_id"] == "n0"))[0]
    rebuilt = ControllerState()
    for r in log:
        rebuilt.replay(r)
    assert rebuilt.topics == state.topics and rebuilt.pending_deletions == state.pending_deletions


def test_a_topic_gets_its_replicas_preferred_leader_first_all_in_sync():
    state = ControllerState()
    apply(state, state.create_topic("t", 2, 3, {}, "id", place))
    part = state.partition("t", 1)
    assert [r["node_id"] for r in part["replicas"]] == ["n1", "n2", "n3"]
    assert (part["leader"], part["leader_epoch"], part["isr"]) == (0, 0, [0, 1, 2])


@pytest.mark.parametrize("call,error", [
    (lambda s: s.create_topic("bad name", 1, 1, {}, "i", place), InvalidTopicError),
    (lambda s: s.create_topic("t", 0, 1, {}, "i", place), InvalidPartitionError),
    (lambda s: s.create_topic("t", 1, 0, {}, "i", place), InvalidReplicationFactorError),
    (lambda s: s.create_topic("t", 1, 2, {"min_insync_replicas": 3}, "i", place), InvalidConfigError),
    (lambda s: s.create_topic("t", 1, 1, {"retention.mss": 1}, "i", place), InvalidConfigError),
])
def test_bad_topics_are_refused_before_any_record(call, error):
    state = ControllerState()
    with pytest.raises(error):
        call(state)
    assert state.topics == {}


def test_a_second_topic_of_the_same_name_is_refused():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 1, {}, "id", place))
    with pytest.raises(TopicAlreadyExistsError):
        state.create_topic("t", 1, 1, {}, "id2", place)


def test_losing_the_leader_elects_the_next_live_isr_member_and_bumps_the_epoch():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {}, "id", place))
    _, part = apply(state, state.replicas_lost("t", 0, {0}, lambda r: r != 0, False))
    assert (part["leader"], part["leader_epoch"], part["isr"]) == (1, 1, [1, 2])
    assert part["partition_epoch"] == 1


def test_losing_a_follower_removes_it_from_the_isr_without_an_election():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {}, "id", place))
    _, part = apply(state, state.replicas_lost("t", 0, {2}, lambda r: r != 2, False))
    assert (part["leader"], part["leader_epoch"], part["isr"]) == (0, 0, [0, 1])


def test_with_no_live_isr_member_the_partition_goes_offline_unless_unclean_election_is_on():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {}, "id", place))
    apply(state, state.alter_isr("t", 0, 0, 0, 0, [0], everyone))
    _, part = apply(state, state.replicas_lost("t", 0, {0}, lambda r: r != 0, unclean=False))
    assert part["leader"] == NO_LEADER and part["isr"] == [0], "the last in-sync replica stays, for when it returns"
    unclean = ControllerState()
    apply(unclean, unclean.create_topic("t", 1, 3, {}, "id", place))
    apply(unclean, unclean.alter_isr("t", 0, 0, 0, 0, [0], everyone))
    _, part = apply(unclean, unclean.replicas_lost("t", 0, {0}, lambda r: r != 0, unclean=True))
    assert part["leader"] == 1 and part["isr"] == [1]


def test_an_offline_partition_elects_its_last_isr_member_when_it_returns():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 1, {}, "id", place))
    apply(state, state.replicas_lost("t", 0, {0}, lambda r: False, False))
    _, part = apply(state, state.elect_leader("t", 0, everyone, unclean=False))
    assert (part["leader"], part["leader_epoch"]) == (0, 2)


def test_an_isr_change_from_a_replaced_leader_is_fenced():
    """A zombie leader on a lost node must never shrink the ISR to itself."""
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {}, "id", place))
    apply(state, state.replicas_lost("t", 0, {0}, lambda r: r != 0, False))
    with pytest.raises(FencedLeaderEpochError):
        state.alter_isr("t", 0, 0, 0, 0, [0], everyone)
    with pytest.raises(FencedLeaderEpochError):
        state.alter_isr("t", 0, 1, 1, 0, [1], everyone)  # stale partition epoch


def test_preferred_election_moves_leadership_back_once_the_first_replica_is_in_sync():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {}, "id", place))
    apply(state, state.replicas_lost("t", 0, {0}, lambda r: r != 0, False))
    assert state.elect_leader("t", 0, everyone, False, preferred=True) == ([], None), "0 is not in sync yet"
    part = state.partition("t", 0)
    apply(state, state.alter_isr("t", 0, 1, part["leader_epoch"], part["partition_epoch"], [0, 1, 2], everyone))
    _, part = apply(state, state.elect_leader("t", 0, everyone, False, preferred=True))
    assert (part["leader"], part["leader_epoch"]) == (0, 2)


def test_a_reassignment_adds_the_new_replicas_and_drops_the_old_ones_once_they_are_in_sync():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {}, "id", place))
    _, part = apply(state, state.reassign("t", 0, [("n0", "/d"), ("n1", "/d"), ("n3", "/d")]))
    assert part["adding"] == [3] and part["removing"] == [2]
    assert [r["node_id"] for r in part["replicas"]] == ["n0", "n1", "n3", "n2"]
    _, part = apply(state, state.alter_isr("t", 0, 0, 0, part["partition_epoch"], [0, 1, 2], everyone))
    assert part["adding"] == [3], "the new replica is not in sync yet"
    _, part = apply(state, state.alter_isr("t", 0, 0, 0, part["partition_epoch"], [0, 1, 2, 3], everyone))
    assert [r["node_id"] for r in part["replicas"]] == ["n0", "n1", "n3"]
    assert part["isr"] == [0, 1, 3] and part["adding"] == part["removing"] == []


def test_deleting_a_topic_remembers_the_replicas_that_could_not_delete_their_files():
    state = ControllerState()
    apply(state, state.create_topic("t", 2, 2, {}, "tid", place))
    apply(state, state.delete_topic("t", lambda r: r["node_id"] == "n1"))
    assert set(state.pending_deletions) == {("tid", 0, 1), ("tid", 1, 0)}
    apply(state, (state.replica_deleted("tid", 0, 1), None))
    assert set(state.pending_deletions) == {("tid", 1, 0)}
    with pytest.raises(UnknownTopicOrPartitionError):
        state.topic("t")
