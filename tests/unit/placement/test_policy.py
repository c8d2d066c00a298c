"""Placement policy: spread partitions, never two replicas of one partition on a node."""

from collections import Counter

import pytest

from placement.policy import assign_replicas
from raylog.errors import InvalidReplicationFactorError


def test_partitions_spread_evenly_over_nodes():
    plan = assign_replicas(6, 1, ["a", "b", "c"])
    assert Counter(r[0] for r in plan) == Counter({"a": 2, "b": 2, "c": 2})


def test_replicas_of_one_partition_land_on_distinct_nodes():
    for replicas in assign_replicas(10, 3, ["a", "b", "c", "d"]):
        assert len(set(replicas)) == 3


def test_least_loaded_node_is_preferred():
    plan = assign_replicas(2, 1, ["a", "b", "c"], load=Counter({"a": 5, "b": 5}))
    assert plan[0] == ["c"]


def test_more_replicas_than_nodes_is_refused():
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 3, ["a", "b"])
