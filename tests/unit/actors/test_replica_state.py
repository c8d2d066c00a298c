"""ReplicaState: the high watermark over the ISR, ISR proposals, lag, and roles, with a fake clock."""

from __future__ import annotations

from actors.replica_state import FOLLOWER, LEADER, NONE, ReplicaState
from tests.support.clock import FakeClock


def leader(clock=None, isr=(0, 1, 2), end=0) -> ReplicaState:
    state = ReplicaState(0, 0, end, 0, clock or FakeClock())
    state.become_leader(1, 0, (0, 1, 2), isr)
    return state


def test_high_watermark_is_the_smallest_log_end_over_the_isr():
    state = leader()
    state.on_leader_append(10)
    assert state.high_watermark == 0, "followers' positions are unknown until they fetch"
    state.on_follower_fetch(1, 6)
    assert state.high_watermark == 0
    assert state.on_follower_fetch(2, 8)
    assert state.high_watermark == 6
    state.on_follower_fetch(1, 10)
    assert state.high_watermark == 8


def test_high_watermark_never_moves_backwards_on_a_lagging_fetch():
    state = leader()
    state.on_leader_append(10)
    state.on_follower_fetch(1, 8)
    state.on_follower_fetch(2, 8)
    assert not state.on_follower_fetch(1, 5)
    assert state.high_watermark == 8


def test_a_leader_alone_in_the_isr_commits_its_own_appends():
    state = leader(isr=(0,))
    state.on_leader_append(10)
    assert state.high_watermark == 10


def test_a_caught_up_follower_is_proposed_back_into_the_isr():
    clock = FakeClock()
    state = leader(clock, isr=(0, 1))
    state.on_leader_append(10)
    state.on_follower_fetch(1, 10)
    state.on_follower_fetch(2, 4)
    assert state.isr_to_propose(30_000) is None, "below the high watermark it stays out"
    state.on_follower_fetch(2, 10)
    assert state.isr_to_propose(30_000) == {0, 1, 2}


def test_a_follower_that_stops_catching_up_is_proposed_out_after_the_lag_time():
    clock = FakeClock()
    state = leader(clock)
    state.on_leader_append(10)
    for r in (1, 2):
        state.on_follower_fetch(r, 10)
    clock.advance(20_000)
    state.on_leader_append(20)
    state.on_follower_fetch(1, 20)
    clock.advance(5_000)
    assert state.isr_to_propose(30_000) is None, "2 last caught up 25 s ago"
    clock.advance(6_000)
    assert state.isr_to_propose(30_000) == {0, 1}, "31 s: 2 leaves, 1 stays"


def test_a_proposal_pending_counts_leavers_for_the_high_watermark():
    """KIP-497's maximal ISR: until the controller confirms a shrink, the leaver still holds it back."""
    state = leader()
    state.on_leader_append(10)
    state.on_follower_fetch(1, 10)
    state.on_follower_fetch(2, 3)
    state.propose(frozenset({0, 1}))
    assert state.high_watermark == 3
    state.on_isr_committed({0, 1}, 1)
    assert state.high_watermark == 10


def test_only_one_proposal_is_in_flight():
    state = leader(isr=(0, 1))
    state.on_leader_append(5)
    state.on_follower_fetch(1, 5)
    state.on_follower_fetch(2, 5)
    state.propose(frozenset({0, 1, 2}))
    assert state.isr_to_propose(30_000) is None


def test_a_follower_keeps_its_high_watermark_within_its_own_log():
    state = ReplicaState(1, 0, 0, 0, FakeClock())
    state.become_follower(0, 1, 0, (0, 1, 2), (0, 1, 2))
    state.on_follower_append(4, leader_high_watermark=9)
    assert (state.role, state.high_watermark) == (FOLLOWER, 4)
    state.on_follower_append(12, leader_high_watermark=9)
    assert state.high_watermark == 9


def test_start_le_high_watermark_le_end_through_truncation():
    state = leader(isr=(0,), end=20)
    state.on_leader_append(20)
    state.become_follower(1, 2, 0, (0, 1, 2), (1,))
    state.on_truncate(log_start_offset=5, log_end_offset=12)
    assert 5 <= state.high_watermark <= 12
    state.on_log_start_moved(15)
    assert state.high_watermark == 15


def test_newer_states_win_and_older_ones_are_ignored():
    state = leader()
    assert state.is_newer(1, 1) and state.is_newer(2, 0)
    assert not state.is_newer(1, 0) and not state.is_newer(0, 9)
    state.become_none()
    assert state.role == NONE
    state.become_leader(3, 0, (0,), (0,))
    assert state.role == LEADER and state.epoch_start_offset == state.log_end_offset


def test_a_follower_that_stopped_fetching_at_the_high_watermark_does_not_flap_back_into_the_isr():
    """Regression: with nothing written, a stopped follower's last fetch offset equals the high
    watermark; the lag check dropped it, the next check added it back, and so on."""
    clock = FakeClock()
    state = leader(clock)
    state.on_leader_append(10)
    for r in (1, 2):
        state.on_follower_fetch(r, 10)
    clock.advance(31_000)
    state.on_follower_fetch(1, 10)
    isr = state.isr_to_propose(30_000)
    assert isr == {0, 1}
    state.propose(isr)
    state.on_isr_committed(isr, 1)
    clock.advance(1_000)
    assert state.isr_to_propose(30_000) is None, "2 has not fetched: it stays out"
    state.on_follower_fetch(2, 10)
    assert state.isr_to_propose(30_000) == {0, 1, 2}, "a fresh fetch at the high watermark brings it back"


def test_a_caught_up_follower_on_a_draining_node_is_not_proposed_until_the_drain_ends():
    """The controller would answer each such proposal with the same ISR at a new partition epoch,
    and the leader proposed again at once: a metadata record storm for as long as the drain lasted
    (seen after a drain, 107 epochs in half a second)."""
    state = leader(isr=(0, 1))
    state.on_leader_append(10)
    state.on_follower_fetch(1, 10)
    assert state.set_ineligible([2], 1, 0) is False
    state.on_follower_fetch(2, 10)
    assert state.isr_to_propose(30_000) is None
    assert state.set_ineligible([], 1, -1) is False and state.ineligible == {2}, "an older state's view is stale"
    assert state.set_ineligible([], 1, 0) is True, "the drain ended (same epochs): 2 may join again"
    assert state.isr_to_propose(30_000) == {0, 1, 2}


def test_an_isr_reply_older_than_a_state_pushed_meanwhile_is_ignored():
    """Issue 19, finding 6: the controller committed the leader's proposal (partition epoch 1) and
    then another change (epoch 2, the ISR without 2) that it pushed; the push arrived first. The
    late reply must not roll the ISR back."""
    state = leader(isr=(0, 1))
    state.propose(frozenset({0, 1, 2}))
    state.become_leader(1, 2, (0, 1, 2), (0, 1))
    state.on_isr_committed({0, 1, 2}, 1)
    assert state.isr == {0, 1} and state.partition_epoch == 2
    state.on_isr_committed({0, 1, 2}, 3)
    assert state.isr == {0, 1, 2} and state.partition_epoch == 3, "a newer reply is applied"


def test_the_high_watermark_stays_put_while_the_isr_is_below_min_insync_replicas():
    """KIP-966: a follower that left an ISR already below the minimum holds every committed record,
    which is what lets the controller elect it after the leader is lost (issue 30)."""
    state = leader(isr=(0,), end=0)
    state.min_insync_replicas = 2
    state.on_leader_append(10)
    assert state.high_watermark == 0
    state.on_isr_committed([0, 1], partition_epoch=5)
    state.on_follower_fetch(1, 10)
    assert state.high_watermark == 10
