"""Placement policy: spread partitions and leaders, never two replicas of one partition on a node."""

from collections import Counter

import pytest

from placement.policy import assign_replicas, check_replication_factor, replacement_node
from raylog.errors import InvalidReplicationFactorError


def test_partitions_spread_evenly_over_nodes():
    plan = assign_replicas(6, 1, ["a", "b", "c"])
    assert Counter(r[0] for r in plan) == Counter({"a": 2, "b": 2, "c": 2})


def test_replicas_of_one_partition_land_on_distinct_nodes():
    for replicas in assign_replicas(10, 3, ["a", "b", "c", "d"]):
        assert len(set(replicas)) == 3


def test_leaders_spread_evenly_with_replication():
    plan = assign_replicas(12, 3, ["a", "b", "c", "d"])
    assert Counter(r[0] for r in plan) == Counter({"a": 3, "b": 3, "c": 3, "d": 3})
    assert Counter(n for r in plan for n in r) == Counter({"a": 9, "b": 9, "c": 9, "d": 9})


def test_least_loaded_node_is_preferred():
    plan = assign_replicas(2, 1, ["a", "b", "c"], replica_load=Counter({"a": 5, "b": 5}),
                           leader_load=Counter({"a": 5, "b": 5}))
    assert plan[0] == ["c"]


def test_the_head_node_holds_replicas_only_when_the_others_are_too_few():
    assert all("head" not in r for r in assign_replicas(6, 3, ["head", "w1", "w2", "w3"], secondary={"head"}))
    assert all("head" in r for r in assign_replicas(3, 3, ["head", "w1", "w2"], secondary={"head"}))


@pytest.mark.parametrize("factor", [0, -1, "3", None, True])
def test_a_replication_factor_that_is_not_a_positive_int_is_refused(factor):
    with pytest.raises(InvalidReplicationFactorError, match="replication factor"):
        check_replication_factor(factor, 3)


def test_more_replicas_than_live_nodes_is_refused_naming_both_numbers():
    with pytest.raises(InvalidReplicationFactorError, match=r"replication factor 3 .* 2 are alive"):
        assign_replicas(1, 3, ["a", "b"])


def test_a_lost_replica_moves_to_the_least_loaded_node_without_one():
    assert replacement_node(["a", "b", "c"], ["a", "b", "d", "e"], Counter({"d": 4, "e": 1})) == "e"
    assert replacement_node(["a", "b"], ["a", "b"]) is None
    assert replacement_node(["a"], ["a", "head", "x"], secondary={"head"}) == "x"
