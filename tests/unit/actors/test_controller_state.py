"""ControllerState: topics, elections, ISR changes and reassignments as records; replay rebuilds it."""

from __future__ import annotations

import pytest

from actors.controller_state import NO_LEADER, ControllerState
from raylog.errors import (
    FencedLeaderEpochError, InvalidConfigError, InvalidPartitionError, InvalidReplicationFactorError,
    InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)

NODES = [0, 1, 2, 3]


def place(count, first, rf):
    return [[NODES[(first + p + r) % len(NODES)] for r in range(rf)] for p in range(count)]


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
    log += apply(state, state.delete_topic("b", lambda r: r["node_id"] == 0))[0]
    rebuilt = ControllerState()
    for r in log:
        rebuilt.replay(r)
    assert rebuilt.topics == state.topics and rebuilt.pending_deletions == state.pending_deletions


def test_a_topic_gets_its_replicas_preferred_leader_first_all_in_sync():
    state = ControllerState()
    apply(state, state.create_topic("t", 2, 3, {}, "id", place))
    part = state.partition("t", 1)
    assert [r["node_id"] for r in part["replicas"]] == [1, 2, 3]
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
    """The followers left the ISR while it stayed at min_insync_replicas (1): the high watermark
    moved on without them, so neither may lead cleanly."""
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {"min.insync.replicas": 1}, "id", place))
    apply(state, state.alter_isr("t", 0, 0, 0, 0, [0], everyone))
    _, part = apply(state, state.replicas_lost("t", 0, {0}, lambda r: r != 0, unclean=False))
    assert part["leader"] == NO_LEADER and part["isr"] == [0], "the last in-sync replica stays, for when it returns"
    assert part["elr"] == []
    unclean = ControllerState()
    apply(unclean, unclean.create_topic("t", 1, 3, {"min.insync.replicas": 1}, "id", place))
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
    _, part = apply(state, state.reassign("t", 0, [0, 1, 3]))
    assert part["adding"] == [3] and part["removing"] == [2]
    assert [r["node_id"] for r in part["replicas"]] == [0, 1, 3, 2]
    _, part = apply(state, state.alter_isr("t", 0, 0, 0, part["partition_epoch"], [0, 1, 2], everyone))
    assert part["adding"] == [3], "the new replica is not in sync yet"
    _, part = apply(state, state.alter_isr("t", 0, 0, 0, part["partition_epoch"], [0, 1, 2, 3], everyone))
    assert [r["node_id"] for r in part["replicas"]] == [0, 1, 3]
    assert part["isr"] == [0, 1, 3] and part["adding"] == part["removing"] == []


def test_a_removed_replicas_directory_is_not_its_to_delete_once_the_partition_is_back_on_that_node():
    """Directories are per node and partition, not per replica: a deletion still pending when a
    reassignment brought the partition back to the node would remove the new replica's live files."""
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {}, "id", place))
    removed = state.partition("t", 0)["replicas"][2]
    _, part = apply(state, state.reassign("t", 0, [0, 1, 3]))
    apply(state, state.alter_isr("t", 0, 0, 0, part["partition_epoch"], [0, 1, 2, 3], everyone))
    apply(state, (state.replica_removal_pending("t", 0, removed), None))  # its node was down
    (key, removed), = state.pending_deletions.items()
    assert removed["node_id"] == 2 and not state.directory_taken(key[0], key[1], removed)
    _, part = apply(state, state.reassign("t", 0, [0, 1, 2]))
    assert state.directory_taken(key[0], key[1], removed)
    assert not state.directory_taken(key[0], key[1], {**removed, "node_id": 5})


def test_deleting_a_topic_remembers_the_replicas_that_could_not_delete_their_files():
    state = ControllerState()
    apply(state, state.create_topic("t", 2, 2, {}, "tid", place))
    apply(state, state.delete_topic("t", lambda r: r["node_id"] == 1))
    assert set(state.pending_deletions) == {("tid", 0, 1), ("tid", 1, 0)}
    apply(state, (state.replica_deleted("tid", 0, 1), None))
    assert set(state.pending_deletions) == {("tid", 1, 0)}
    with pytest.raises(UnknownTopicOrPartitionError):
        state.topic("t")


# --- nodes, restarts and KIP-966's eligible leader replicas (issue 30) -----------------------------


def test_a_new_cluster_registers_its_head_and_new_directories_get_ids_never_used_before():
    state = ControllerState()
    apply(state, (state.create_cluster("cid", 0, "10.0.0.1", "/data"), None))
    assert (state.cluster_id, state.head_node_id, list(state.nodes)) == ("cid", 0, [0])
    assert state.next_node_id() == 1
    apply(state, (state.register_node(1, "10.0.0.2", "/d1"), None))
    apply(state, (state.register_node(5, "10.0.0.3", "/d5"), None))
    assert state.next_node_id() == 6
    assert state.register_node(1, "10.0.0.2", "/d1") == [], "the same node from the same place: nothing to record"
    moved = state.register_node(1, "10.0.0.9", "/mnt/d1")
    assert moved and apply(state, (moved, None)) and state.nodes[1].host == "10.0.0.9"


def rf3(min_isr: int = 2) -> ControllerState:
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 3, {"min.insync.replicas": min_isr}, "id", place))
    return state


def test_a_replica_leaving_an_isr_below_min_insync_replicas_becomes_an_eligible_leader_replica():
    state = rf3()
    _, part = apply(state, state.replicas_lost("t", 0, {2}, lambda r: r != 2, False))
    assert (part["isr"], part["elr"]) == ([0, 1], []), "the ISR is still at the minimum: the HW moves on without 2"
    _, part = apply(state, state.replicas_lost("t", 0, {1}, lambda r: r == 0, False))
    assert (part["isr"], part["elr"]) == ([0], [1]), "from here the HW stays put: 1 holds every committed record"


def test_after_a_whole_cluster_shutdown_any_two_of_three_nodes_bring_the_partition_back():
    """Nodes die one after the other as a cluster stops (2, then 1, then the leader 0); on restart any
    two of the three returning include an ISR or ELR member, which leads cleanly."""
    for back in ([0, 1], [0, 2], [1, 2], [1], [0]):
        state = rf3()
        dead: set[int] = set()
        for victim in (2, 1, 0):
            dead.add(victim)
            apply(state, state.replicas_lost("t", 0, {victim}, lambda r: r not in dead, False))
        assert state.partition("t", 0)["leader"] == NO_LEADER
        _, part = apply(state, state.elect_leader("t", 0, lambda r: r in back, unclean=False))
        assert part["leader"] in back and part["leader"] != 2, back
        assert part["leader"] in part["isr"] and set(part["isr"]) <= set(back), "only running members stay in sync"


def test_a_replica_that_left_while_the_isr_was_at_the_minimum_is_never_elected_cleanly():
    state = rf3()
    dead: set[int] = set()
    for victim in (2, 1, 0):
        dead.add(victim)
        apply(state, state.replicas_lost("t", 0, {victim}, lambda r: r not in dead, False))
    assert state.elect_leader("t", 0, lambda r: r == 2, unclean=False) == ([], None), "2 may lack committed records"


def test_an_elected_leader_keeps_only_running_replicas_in_its_isr():
    state = rf3()
    apply(state, state.elect_leader("t", 0, lambda r: False, unclean=False))  # a restart: nobody is back
    part = state.partition("t", 0)
    assert (part["leader"], part["isr"]) == (NO_LEADER, [0, 1, 2]), "offline, the ISR kept for whoever returns"
    _, part = apply(state, state.elect_leader("t", 0, lambda r: r == 1, unclean=False))
    assert (part["leader"], part["isr"], part["elr"]) == (1, [1], [0, 2])


def test_the_eligible_leader_replicas_are_forgotten_once_the_isr_is_back_at_the_minimum():
    state = rf3()
    apply(state, state.replicas_lost("t", 0, {1, 2}, lambda r: r == 0, False))
    part = state.partition("t", 0)
    assert part["elr"] == [1, 2]
    _, part = apply(state, state.alter_isr("t", 0, 0, part["leader_epoch"], part["partition_epoch"], [0, 1],
                                           everyone))
    assert (part["isr"], part["elr"]) == ([0, 1], [])


def drained(state: ControllerState, node: int) -> ControllerState:
    apply(state, (state.create_cluster("cid", 9, "h", "/d"), None))
    for n in NODES:
        apply(state, (state.register_node(n, "h", f"/d{n}"), None))
    apply(state, (state.set_draining(node, True), None))
    return state


def test_draining_a_node_moves_its_leadership_and_takes_it_out_of_the_isr():
    state = drained(rf3(), 0)
    _, part = apply(state, state.move_leaders_off("t", 0, 0, everyone))
    assert part["leader"] == 1 and 0 not in part["isr"] and part["leader_epoch"] == 1
    assert state.move_leaders_off("t", 0, 0, everyone) == ([], None), "nothing more to move"
    _, part = apply(state, state.alter_isr("t", 0, 1, 1, part["partition_epoch"], [0, 1, 2], everyone))
    assert 0 not in part["isr"], "a draining node joins no ISR"
    assert state.ineligible(part) == [0], "what leaders are told not to propose"


def test_a_draining_node_is_elected_only_when_no_other_in_sync_replica_lives():
    state = drained(rf3(min_isr=1), 1)
    _, part = apply(state, state.replicas_lost("t", 0, {0}, lambda r: r != 0, False))
    assert part["leader"] == 2, "replica 1 is on the draining node"
    _, part = apply(state, state.replicas_lost("t", 0, {2}, lambda r: r == 1, False))
    assert part["leader"] == 1, "the draining node leads rather than leave the partition offline"


def test_draining_cannot_move_a_leader_that_is_the_only_in_sync_replica():
    state = ControllerState()
    apply(state, state.create_topic("t", 1, 1, {}, "id", place))
    drained(state, 0)
    assert state.move_leaders_off("t", 0, 0, everyone) == ([], None)
    assert state.partition("t", 0)["leader"] == 0


def test_replicas_written_before_node_identity_are_adopted_by_the_head_when_their_files_are_there():
    state = ControllerState()
    legacy = {"type": "topic_created", "name": "t", "topic_id": "abcdef0123", "config": {}, "overrides": [],
              "partitions": [{"replicas": [{"replica_id": 0, "node_id": "rayA", "directory": f"/old/root/node-rayA/abcdef01/t-{p}"}],
                              "leader": 0, "leader_epoch": 0, "partition_epoch": 0, "isr": [0], "adding": [],
                              "removing": []} for p in range(2)]}
    other = {**legacy, "name": "u", "topic_id": "9999999999",
             "partitions": [{**legacy["partitions"][0], "replicas": [
                 {"replica_id": 0, "node_id": "rayB", "directory": "/old/root/node-rayB/99999999/u-0"}]}]}
    state.replay(legacy)
    state.replay(other)
    here = {"node-rayA/abcdef01/t-0", "node-rayA/abcdef01/t-1"}
    records = state.adopt_legacy_nodes(0, lambda rel: rel in here)
    assert [r["legacy_node_id"] for r in records] == ["rayA"], "rayB's files are not on this node"
    apply(state, (records, None))
    assert [(r["node_id"], r["directory"]) for p in state.topic("t").partitions for r in p["replicas"]] == [
        (0, "node-rayA/abcdef01/t-0"), (0, "node-rayA/abcdef01/t-1")]
    assert state.topic("u").partitions[0]["replicas"][0]["node_id"] == "rayB"


def test_replaying_node_records_rebuilds_nodes_drains_and_pending_removals():
    state, log = ControllerState(), []
    log += apply(state, (state.create_cluster("cid", 0, "h0", "/d0"), None))[0]
    log += apply(state, (state.register_node(1, "h1", "/d1"), None))[0]
    log += apply(state, (state.set_draining(1, True), None))[0]
    log += apply(state, state.create_topic("t", 1, 2, {}, "tid", place))[0]
    log += apply(state, (state.replica_removal_pending("t", 0, state.partition("t", 0)["replicas"][1]), None))[0]
    rebuilt = ControllerState()
    for r in log:
        rebuilt.replay(r)
    assert (rebuilt.cluster_id, rebuilt.head_node_id, rebuilt.nodes) == ("cid", 0, state.nodes)
    assert rebuilt.nodes[1].draining and rebuilt.pending_deletions == state.pending_deletions
    assert set(rebuilt.pending_deletions) == {("tid", 0, 1)}


def test_a_drain_lasts_until_the_node_registers_from_another_ray_session():
    """A controller restart registers every running node again: that must not end a drain."""
    state = ControllerState()
    apply(state, (state.create_cluster("cid", 0, "h0", "/d0"), None))
    apply(state, (state.register_node(1, "h1", "/d1"), None))
    apply(state, (state.set_draining(1, True, "ray-session-a"), None))
    assert state.restarted(1, "ray-session-a") == []
    apply(state, (state.restarted(1, "ray-session-b"), None))
    assert not state.nodes[1].draining


def test_a_leader_with_a_corrupt_batch_hands_over_to_an_in_sync_replica_and_leaves_the_isr_and_elr():
    """Issue 31: a byte rotted in the leader's segment is never served: another in-sync replica
    leads, and the reporter, out of the ISR and the ELR, refetches the batch as a follower."""
    state = rf3()
    assert state.replica_corrupt("t", 0, 1, 0, 0, everyone) == ([], None), "only the leader reports its log"
    _, part = apply(state, state.replica_corrupt("t", 0, 0, 0, 0, everyone))
    assert (part["leader"], part["leader_epoch"]) == (1, 1) and 0 not in part["isr"] and 0 not in part["elr"]
    assert state.replica_corrupt("t", 0, 0, 0, 0, everyone) == ([], None), "a stale report changes nothing"
    alone = ControllerState()
    apply(alone, alone.create_topic("t", 1, 1, {}, "id", place))
    assert alone.replica_corrupt("t", 0, 0, 0, 0, everyone) == ([], None), "no one else holds the records"


def test_a_replica_that_reopened_below_its_checkpointed_high_watermark_is_not_elected_while_another_copy_may_return():
    """Issue 30 (chaos finding): after a whole-cluster restart the first ISR member back led with a
    log its disk had cut below the high watermark, and the others truncated committed records to
    it. Such a replica leaves the ISR and the ELR; a member that may hold the records leads."""
    state = rf3()
    _, part = apply(state, state.replicas_lost("t", 0, {0, 1, 2}, lambda r: False, False))
    assert part["leader"] == NO_LEADER and part["isr"]
    pools = set(part["isr"]) | set(part["elr"])
    damaged = sorted(pools)[0]
    _, part = apply(state, state.replica_lost_committed("t", 0, damaged))
    assert damaged not in part["isr"] and damaged not in part["elr"]
    apply(state, state.elect_leader("t", 0, lambda r: r == damaged, False))
    assert state.partition("t", 0)["leader"] == NO_LEADER, "nobody else is back: offline"
    _, part = apply(state, state.elect_leader("t", 0, lambda r: True, False))
    assert part["leader"] in pools - {damaged}
    assert state.replica_lost_committed("t", 0, damaged) == ([], None), "already out of sync: no change"
    alone = ControllerState()
    apply(alone, alone.create_topic("t", 1, 1, {}, "id", place))
    assert alone.replica_lost_committed("t", 0, 0) == ([], None), "the only copy stays eligible"


def test_a_topic_compacted_once_is_remembered_as_such_after_it_goes_back_to_delete():
    """Issue 32, finding 9: its logs keep the gaps compaction left, so counting its records from
    offsets would count records that are gone; the state remembers it, through a replay too."""
    state, log = ControllerState(), []
    log += apply(state, state.create_topic("t", 1, 1, {}, "id", place))[0]
    assert not state.topics["t"].ever_compacted
    log += apply(state, state.alter_topic_config("t", {"cleanup_policy": "compact"}, []))[0]
    log += apply(state, state.alter_topic_config("t", {"cleanup_policy": "delete"}, []))[0]
    assert state.topics["t"].ever_compacted
    rebuilt = ControllerState()
    for r in log:
        rebuilt.replay(r)
    assert rebuilt.topics["t"].ever_compacted
