"""actors/events.py: which operational events a partition change expresses."""

from __future__ import annotations

from actors.events import (
    ELECTION, ISR_EXPAND, ISR_SHRINK, OFFLINE, REASSIGNMENT_COMPLETED, REASSIGNMENT_STARTED, partition_events,
)


def partition(leader=0, leader_epoch=0, isr=(0, 1, 2), replicas=(0, 1, 2), adding=(), removing=()):
    return {"replicas": [{"replica_id": r, "node_id": r, "directory": "d"} for r in replicas],
            "leader": leader, "leader_epoch": leader_epoch, "partition_epoch": 0, "isr": list(isr),
            "adding": list(adding), "removing": list(removing)}


def kinds(before, after):
    return [event for event, _ in partition_events(before, after)]


def test_a_dead_leader_gives_an_isr_shrink_then_an_election():
    events = partition_events(partition(), partition(leader=1, leader_epoch=1, isr=(1, 2)))
    assert [e for e, _ in events] == [ISR_SHRINK, ELECTION]
    assert events[0][1]["removed"] == [0]
    assert events[1][1] == {"leader": 1, "leader_epoch": 1, "previous_leader": 0, "isr": [1, 2]}


def test_losing_the_last_leader_is_an_offline_partition_not_an_election():
    assert kinds(partition(isr=(0,), replicas=(0,)), partition(leader=-1, leader_epoch=1, isr=(0,), replicas=(0,))) \
        == [OFFLINE]


def test_a_follower_catching_up_is_an_isr_expand_only():
    events = partition_events(partition(isr=(0, 1)), partition(isr=(0, 1, 2)))
    assert events == [(ISR_EXPAND, {"isr": [0, 1, 2], "added": [2]})]


def test_an_isr_that_swaps_members_is_a_shrink_and_an_expand():
    assert kinds(partition(isr=(0, 1)), partition(isr=(0, 2))) == [ISR_SHRINK, ISR_EXPAND]


def test_a_reassignment_starts_and_completes():
    moving = partition(replicas=(0, 1, 2, 3), adding=(3,), removing=(2,))
    assert kinds(partition(), moving) == [REASSIGNMENT_STARTED]
    done = partition(replicas=(0, 1, 3), isr=(0, 1, 3))
    events = partition_events({**moving, "isr": [0, 1, 2, 3]}, done)
    assert [e for e, _ in events] == [REASSIGNMENT_COMPLETED, ISR_SHRINK]
    assert events[0][1] == {"replicas": [0, 1, 3], "removed": [2]}


def test_a_change_of_nothing_operators_watch_gives_no_event():
    assert partition_events(partition(), {**partition(), "partition_epoch": 5}) == []
