"""Pure placement decisions: spread replicas over nodes, never two of a partition on one node."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from raylog.errors import InvalidReplicationFactorError


def assign_replicas(
    num_partitions: int,
    replication_factor: int,
    node_ids: Sequence[str],
    load: Counter | None = None,
    first_partition: int = 0,
) -> list[list[str]]:
    """Node ids for each new partition's replicas, the leader first.

    Each replica goes to the node holding the fewest replicas so far (``load``
    counts existing ones), ties broken round-robin from the partition number
    so consecutive partitions start on different nodes, as Kafka's rack-unaware
    assignment does. Raises InvalidReplicationFactorError when there are fewer
    nodes than replicas.
    """
    nodes = sorted(node_ids)
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be >= 1, got {replication_factor}")
    if replication_factor > len(nodes):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} needs as many live nodes; {len(nodes)} alive")
    counts = Counter({n: 0 for n in nodes})
    if load:
        for n, c in load.items():
            if n in counts:
                counts[n] += c
    plan = []
    for p in range(first_partition, first_partition + num_partitions):
        chosen: list[str] = []
        for _ in range(replication_factor):
            candidates = [n for n in nodes if n not in chosen]
            start = p % len(nodes)
            order = {n: (i - start) % len(nodes) for i, n in enumerate(nodes)}
            best = min(candidates, key=lambda n: (counts[n], order[n]))
            chosen.append(best)
            counts[best] += 1
        plan.append(chosen)
    return plan
