"""Server-side assignors: what every assignor promises, then uniform's balance and stickiness and
range's contiguous ranges."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, range_assign, uniform_assign

TOPICS = ["a", "b", "c"]


def partitions_of(topic, count):
    return {(topic, p) for p in range(count)}


def counts(assignment):
    return {m: len(ps) for m, ps in assignment.items()}


def moved_away(previous, result):
    """Partitions each member had before and does not have now."""
    return {m: len(previous[m] - result.get(m, frozenset())) for m in previous}


@st.composite
def groups(draw, homogeneous=False):
    """Members (1..6) with subscriptions over up to three topics of 0..9 partitions, and a
    previous assignment that may be stale: unknown members, deleted topics, dropped partitions."""
    topics = {t: draw(st.integers(0, 9)) for t in TOPICS if draw(st.booleans())}
    member_ids = draw(st.lists(st.sampled_from("mnopqrstuv"), min_size=1, max_size=6, unique=True))
    if homogeneous:
        shared = frozenset(draw(st.sets(st.sampled_from(TOPICS + ["gone"]), min_size=1)))
        members = {m: shared for m in member_ids}
    else:
        members = {m: frozenset(draw(st.sets(st.sampled_from(TOPICS + ["gone"])))) for m in member_ids}
    every = sorted({(t, p) for t in TOPICS + ["gone"] for p in range(12)})
    previous = {m: frozenset(draw(st.sets(st.sampled_from(every), max_size=8)))
                for m in draw(st.lists(st.sampled_from("mnopqrstuvw"), max_size=6, unique=True))}
    return members, topics, previous


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_every_assignor_assigns_each_subscribed_partition_once_and_only_to_subscribers(name, group):
    members, topics, previous = group
    result = ASSIGNORS[name](members, topics, previous)
    assert set(result) == set(members), "every member appears, possibly with nothing"
    owners = Counter(tp for ps in result.values() for tp in ps)
    assert all(n == 1 for n in owners.values()), "no partition has two owners"
    for member, ps in result.items():
        assert all(t in members[member] for t, _ in ps), f"{member} got a topic it does not read"
    subscribed = {t for ts in members.values() for t in ts if t in topics}
    assert set(owners) == {tp for t in subscribed for tp in partitions_of(t, topics[t])}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_assignors_are_deterministic_whatever_the_mapping_order(name):
    members = {"m2": frozenset({"a", "b"}), "m1": frozenset({"a"}), "m3": frozenset({"b"})}
    topics = {"b": 5, "a": 4}
    reordered = dict(reversed(list(members.items())))
    assert ASSIGNORS[name](members, topics, {}) == ASSIGNORS[name](reordered, dict(reversed(list(topics.items()))), {})


def test_uniform_is_the_default():
    assert DEFAULT_ASSIGNOR == "uniform" and ASSIGNORS["uniform"] is uniform_assign


def test_uniform_gives_three_members_two_partitions_each_of_six():
    members = {m: frozenset({"a"}) for m in ("m1", "m2", "m3")}
    result = uniform_assign(members, {"a": 6}, {})
    assert counts(result) == {"m1": 2, "m2": 2, "m3": 2}


def test_uniform_moves_only_what_a_fourth_member_needs():
    members = {m: frozenset({"a"}) for m in ("m1", "m2", "m3")}
    before = uniform_assign(members, {"a": 6}, {})
    after = uniform_assign({**members, "m4": frozenset({"a"})}, {"a": 6}, before)
    assert sorted(counts(after).values()) == [1, 1, 2, 2]
    assert all(n <= 1 for n in moved_away(before, after).values()), "each old member loses at most one"
    assert sum(moved_away(before, after).values()) == len(after["m4"]) == 1
    for m in before:
        assert after[m] <= before[m], f"{m} only loses partitions, it never swaps them"


def test_uniform_keeps_a_balanced_previous_assignment_unchanged():
    members = {"m1": frozenset({"a", "b"}), "m2": frozenset({"a", "b"})}
    previous = {"m1": frozenset({("a", 1), ("b", 0)}), "m2": frozenset({("a", 0), ("b", 1)})}
    assert uniform_assign(members, {"a": 2, "b": 2}, previous) == previous


def test_uniform_gives_a_departed_members_partitions_to_the_others_without_moving_theirs():
    members = {m: frozenset({"a"}) for m in ("m1", "m2", "m3")}
    before = uniform_assign(members, {"a": 6}, {})
    after = uniform_assign({"m1": members["m1"], "m2": members["m2"]}, {"a": 6}, before)
    assert counts(after) == {"m1": 3, "m2": 3}
    assert after["m1"] >= before["m1"] and after["m2"] >= before["m2"]


def test_uniform_balances_through_a_member_that_reads_both_topics():
    """m1 reads only a, m3 only b, m2 both. From 3/2/1 no single move helps (m1 cannot give to
    m3, and m1->m2 or m2->m3 only swaps who is richer); the chain m1 -> m2 -> m3 gives 2/2/2."""
    members = {"m1": frozenset({"a"}), "m2": frozenset({"a", "b"}), "m3": frozenset({"b"})}
    previous = {"m1": frozenset(partitions_of("a", 3)), "m2": frozenset({("b", 0), ("b", 1)}),
                "m3": frozenset({("b", 2)})}
    result = uniform_assign(members, {"a": 3, "b": 3}, previous)
    assert counts(result) == {"m1": 2, "m2": 2, "m3": 2}
    assert result["m3"] > previous["m3"], "m3 keeps what it had"


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=True))
def test_uniform_counts_differ_by_at_most_one_when_everyone_reads_the_same_topics(group):
    members, topics, previous = group
    sizes = counts(uniform_assign(members, topics, previous)).values()
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_uniform_leaves_no_member_two_partitions_richer_than_one_that_could_take_a_partition(group):
    members, topics, previous = group
    result = uniform_assign(members, topics, previous)
    for rich, ps in result.items():
        for poor in members:
            if any(t in members[poor] for t, _ in ps):
                assert len(ps) <= len(result[poor]) + 1, (rich, poor, result)


@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_uniform_is_sticky_reassigning_its_own_result_moves_nothing(group):
    members, topics, previous = group
    first = uniform_assign(members, topics, previous)
    assert uniform_assign(members, topics, first) == first


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=True), joiners=st.integers(0, 2), leavers=st.integers(0, 2))
def test_uniform_moves_a_partition_only_away_from_a_member_that_must_shrink(group, joiners, leavers):
    members, topics, _ = group
    before = uniform_assign(members, topics, {})
    shared = next(iter(members.values()))
    kept = dict(sorted(members.items())[leavers:]) or dict(sorted(members.items())[:1])
    changed = {**kept, **{f"new{i}": shared for i in range(joiners)}}
    after = uniform_assign(changed, topics, before)
    for m in kept:
        assert len(before[m] - after[m]) == max(0, len(before[m]) - len(after[m])), (m, before, after)


def test_range_gives_contiguous_ranges_and_the_extra_partitions_to_the_first_members():
    members = {"m3": frozenset({"a"}), "m1": frozenset({"a"}), "m2": frozenset({"a"})}
    result = range_assign(members, {"a": 7}, {})
    assert result == {
        "m1": frozenset(partitions_of("a", 3)),
        "m2": frozenset({("a", 3), ("a", 4)}),
        "m3": frozenset({("a", 5), ("a", 6)}),
    }


def test_range_works_topic_by_topic_over_each_topics_subscribers():
    members = {"m1": frozenset({"a", "b"}), "m2": frozenset({"a"})}
    result = range_assign(members, {"a": 2, "b": 3}, {})
    assert result == {"m1": frozenset({("a", 0), *partitions_of("b", 3)}), "m2": frozenset({("a", 1)})}


def test_range_ignores_the_previous_assignment():
    members = {"m1": frozenset({"a"}), "m2": frozenset({"a"})}
    previous = {"m2": frozenset({("a", 0), ("a", 1)})}
    assert range_assign(members, {"a": 2}, previous) == range_assign(members, {"a": 2}, {})
