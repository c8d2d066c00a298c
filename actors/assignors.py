"""Server-side partition assignors for consumer groups (KIP-848's ``ServerAssignor``).

With KIP-848 the group coordinator, not a group leader, computes each member's *target
assignment* whenever the group epoch moves ahead of the target epoch. An assignor is a pure
function of three inputs and raylog registers each one by the name a member sends in its
heartbeat (``group.remote.assignor`` in Kafka's consumer):

    assign(members, topics, previous) -> {member_id: frozenset[(topic, partition)]}

``members``  member id -> names of the topics it subscribes to (patterns already resolved);
``topics``   topic -> partition count, only for topics that exist;
``previous`` the previous target assignment. It may name members that left, topics that were
             deleted or partitions that no longer exist; assignors ignore those entries.

Every assignor returns every member (possibly with an empty set), never gives one partition to
two members, never gives a member a partition of a topic it does not subscribe to, and assigns
every partition of every subscribed, existing topic. All are deterministic: ties break on member
id, then topic, then partition, so two coordinators replaying one log compute the same targets.

Kafka's counterparts: ``UniformAssignor`` (its homogeneous and heterogeneous builders) and
``RangeAssignor`` in ``group-coordinator/.../assignor/``. Thread-safe: each function only
reads its arguments.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Mapping

PartitionId = tuple[str, int]
"""(topic, partition)."""

Assignment = dict[str, frozenset[PartitionId]]
Assignor = Callable[
    [Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, frozenset[PartitionId]]],
    Assignment,
]

DEFAULT_ASSIGNOR = "uniform"
"""Kafka's default for ``group.consumer.assignors`` is its uniform assignor too."""


# --- range ---------------------------------------------------------------------------------


def range_assign(
    members: Mapping[str, frozenset[str]],
    topics: Mapping[str, int],
    previous: Mapping[str, frozenset[PartitionId]],
) -> Assignment:
    """Kafka's RangeAssignor, topic by topic: the members subscribed to a topic, sorted by id,
    take contiguous ranges of its partitions; the first ``count % members`` take one extra.

    ``previous`` is ignored: range gives each member the same partitions for the same membership
    anyway, and that predictability is why people choose it (co-partitioned joins).
    """
    result: dict[str, set[PartitionId]] = {m: set() for m in members}
    for topic in sorted(topics):
        subscribers = sorted(m for m, subscribed in members.items() if topic in subscribed)
        if not subscribers:
            continue
        per_member, extra = divmod(topics[topic], len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            length = per_member + (1 if i < extra else 0)
            result[member].update((topic, p) for p in range(start, start + length))
            start += length
    return {m: frozenset(ps) for m, ps in result.items()}


# --- uniform (sticky) -------------------------------------------------------------------------


def uniform_assign(
    members: Mapping[str, frozenset[str]],
    topics: Mapping[str, int],
    previous: Mapping[str, frozenset[PartitionId]],
) -> Assignment:
    """Balance the number of partitions per member; move as few partitions as balance allows.

    1. Sticky start: every partition stays with its previous owner if that member is still here,
       still subscribes to the topic and the partition still exists.
    2. Partitions without an owner go, those with the fewest eligible members first, each to the
       eligible member that has the fewest partitions.
    3. Balance: while some member owns at least two partitions more than a member it can reach,
       shift one partition along the shortest chain of members (each link: a partition of a topic
       the next member subscribes to). Members with different subscriptions need chains: A may
       hold only topics C does not read, while B reads both. Each shift lowers the sum of squared
       counts, so the loop ends; when no such chain is left, no reassignment could lower that sum
       (the usual exchange argument for unit jobs), so the result is balanced. When everyone
       subscribes to the same topics, every chain is one link and counts differ by at most one.

    Within a shift a member gives away first a partition the receiver owned before (undoing an
    earlier move), then one it did not own before (no movement is lost), and only then one of
    its previous partitions: a member only loses previous partitions when it must shrink.
    """
    subscriptions = {m: frozenset(t for t in members[m] if t in topics) for m in members}
    eligible: dict[PartitionId, list[str]] = {}
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        readers = sorted(m for m, ts in subscriptions.items() if topic in ts)
        for p in range(topics[topic]):
            eligible[(topic, p)] = readers

    previous_owner: dict[PartitionId, str] = {}
    owned: dict[str, set[PartitionId]] = {m: set() for m in members}
    for member in sorted(previous):
        if member not in members:
            continue
        for tp in sorted(previous[member]):
            if tp in eligible and tp[0] in subscriptions[member] and tp not in previous_owner:
                previous_owner[tp] = member
                owned[member].add(tp)

    for tp in sorted((tp for tp in eligible if tp not in previous_owner),
                     key=lambda tp: (len(eligible[tp]), tp)):
        readers = eligible[tp]
        owned[min(readers, key=lambda m: (len(owned[m]), m))].add(tp)

    _balance(owned, subscriptions, previous_owner)
    return {m: frozenset(ps) for m, ps in owned.items()}


def _balance(owned: dict[str, set[PartitionId]], subscriptions: Mapping[str, frozenset[str]],
             previous_owner: Mapping[PartitionId, str]) -> None:
    while True:
        for donor in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            chain = _shortest_chain_to_a_poorer_member(donor, owned, subscriptions)
            if chain:
                for giver, taker in zip(chain, chain[1:]):
                    tp = _partition_to_give(owned[giver], giver, taker, subscriptions[taker], previous_owner)
                    owned[giver].remove(tp)
                    owned[taker].add(tp)
                break
        else:
            return


def _shortest_chain_to_a_poorer_member(donor: str, owned: Mapping[str, set[PartitionId]],
                                       subscriptions: Mapping[str, frozenset[str]]) -> list[str] | None:
    """Breadth-first over "x owns a partition y may read"; of the members reached that own at
    least two partitions fewer than ``donor``, the one with the fewest partitions (then the
    shortest chain, then the smallest id). Returns the chain donor..receiver, or None."""
    topics_of = {m: {t for t, _ in ps} for m, ps in owned.items()}
    everyone = sorted(owned)
    parent: dict[str, str] = {donor: donor}
    depth = {donor: 0}
    queue = deque([donor])
    best: tuple[int, int, str] | None = None
    while queue:
        giver = queue.popleft()
        for taker in everyone:
            if taker in parent or not (topics_of[giver] & subscriptions[taker]):
                continue
            parent[taker] = giver
            depth[taker] = depth[giver] + 1
            queue.append(taker)
            if len(owned[donor]) >= len(owned[taker]) + 2:
                candidate = (len(owned[taker]), depth[taker], taker)
                if best is None or candidate < best:
                    best = candidate
    if best is None:
        return None
    chain = [best[2]]
    while chain[-1] != donor:
        chain.append(parent[chain[-1]])
    return chain[::-1]


def _partition_to_give(giver_owns: set[PartitionId], giver: str, taker: str, taker_reads: frozenset[str],
                       previous_owner: Mapping[PartitionId, str]) -> PartitionId:
    def cost(tp: PartitionId) -> tuple[int, str, int]:
        owner = previous_owner.get(tp)
        rank = 0 if owner == taker else 1 if owner != giver else 2
        return rank, tp[0], tp[1]

    return min((tp for tp in giver_owns if tp[0] in taker_reads), key=cost)


ASSIGNORS: dict[str, Assignor] = {
    "uniform": uniform_assign,
    "range": range_assign,
}
"""Assignors by the name a member asks for in its heartbeat."""
