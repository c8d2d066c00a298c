"""Pure placement decisions: spread replicas over nodes, never two of a partition on one node."""

from __future__ import annotations

from collections import Counter
from typing import Collection, Sequence

from raylog.errors import InvalidReplicationFactorError


def check_replication_factor(replication_factor: object, live_nodes: int) -> int:
    if not isinstance(replication_factor, int) or isinstance(replication_factor, bool) or replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be an int >= 1, got {replication_factor!r}")
    if replication_factor > live_nodes:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} needs {replication_factor} live nodes, and {live_nodes} "
            f"{'is' if live_nodes == 1 else 'are'} alive: every replica of a partition lives on its own node")
    return replication_factor


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    node_ids: Sequence[str],
    replica_load: Counter | None = None,
    leader_load: Counter | None = None,
    first_partition: int = 0,
    secondary: Collection[str] = (),
) -> list[list[str]]:
    """Node ids for each new partition's replicas, the preferred leader first.

    Never two replicas of a partition on one node. Each partition's leader goes
    to the node leading the fewest partitions so far, each follower to the node
    holding the fewest replicas (``leader_load`` and ``replica_load`` count the
    existing ones); ties go round-robin from the partition number, so
    consecutive partitions start on different nodes, as Kafka's rack-unaware
    assignment does. ``secondary`` nodes (Ray's head node) are used only when
    the others are too few, and then last in the list (never the preferred
    leader): the head's loss ends the cluster anyway, and a partition kept off
    it can lose any of its nodes. Raises
    InvalidReplicationFactorError when there are fewer nodes than replicas.
    """
    nodes = sorted(node_ids)
    check_replication_factor(replication_factor, len(nodes))
    replicas = Counter({n: 0 for n in nodes})
    leaders = Counter({n: 0 for n in nodes})
    for counts, load in ((replicas, replica_load), (leaders, leader_load)):
        for n, c in (load or {}).items():
            if n in counts:
                counts[n] += c
    spare = sorted(set(nodes) - set(secondary))
    usable = spare if len(spare) >= replication_factor else nodes
    plan = []
    for p in range(first_partition, first_partition + num_partitions):
        start = p % len(usable)
        order = {n: (i - start) % len(usable) for i, n in enumerate(usable)}
        leader = min(usable, key=lambda n: (n in secondary, leaders[n], replicas[n], order[n]))
        chosen = [leader]
        leaders[leader] += 1
        replicas[leader] += 1
        for _ in range(replication_factor - 1):
            follower = min((n for n in usable if n not in chosen),
                           key=lambda n: (n in secondary, replicas[n], order[n]))
            chosen.append(follower)
            replicas[follower] += 1
        plan.append(chosen)
    return plan


def replacement_node(current: Sequence[str], live: Sequence[str], replica_load: Counter | None = None,
                     secondary: Collection[str] = ()) -> str | None:
    """A live node to move a lost replica to: one holding no replica of the partition, the least
    loaded, a secondary node only if nothing else fits. None when every live node has one."""
    candidates = [n for n in sorted(live) if n not in current]
    if not candidates:
        return None
    load = replica_load or Counter()
    return min(candidates, key=lambda n: (n in secondary, load[n], n))
