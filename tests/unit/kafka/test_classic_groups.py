"""Kafka's classic group protocol as the listener coordinates it (no Ray): generations, the
leader's assignment reaching every member, rebalances on join, leave, silence and a member that
never rejoins, and which commits are taken."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from raylog.kafka.classic_groups import COMPLETING, EMPTY, PREPARING, STABLE, ClassicGroups

PROTOCOLS = [("range", b"meta-range"), ("roundrobin", b"meta-rr")]


def join(groups, member_id="", protocols=PROTOCOLS, session_ms=10_000, rebalance_ms=10_000, client="c"):
    return groups.join("g", member_id, None, "consumer", protocols, session_ms, rebalance_ms, client, "127.0.0.1")


async def stable_group(groups, n: int):
    """n members joined and synced; returns their JoinResults, leader first."""
    results = await asyncio.gather(*(join(groups, client=f"c{i}") for i in range(n)))
    leader = next(r for r in results if r.member_id == r.leader)
    others = [r for r in results if r is not leader]
    assignments = {r.member_id: f"a-{r.member_id}".encode() for r in results}
    synced = await asyncio.gather(groups.sync("g", leader.member_id, leader.generation_id, assignments),
                                  *(groups.sync("g", r.member_id, r.generation_id, {}) for r in others))
    assert all(code == ErrorCode.none for code, _ in synced)
    assert [a for _, a in synced] == [assignments[r.member_id] for r in [leader, *others]]
    return [leader, *others]


def test_members_joining_together_share_a_generation_and_get_the_leaders_assignment():
    async def run():
        groups = ClassicGroups()
        members = await stable_group(groups, 3)
        leader = members[0]
        assert {r.generation_id for r in members} == {1}
        assert len(leader.members) == 3 and all(meta == b"meta-range" for _, _, meta in leader.members)
        assert all(r.members == () for r in members[1:])
        assert leader.protocol_name == "range" and groups.group("g").state == STABLE
    asyncio.run(run())


def test_a_leave_makes_the_others_rejoin_into_the_next_generation():
    async def run():
        groups = ClassicGroups()
        a, b, c = await stable_group(groups, 3)
        assert groups.leave("g", [c.member_id]) == {c.member_id: ErrorCode.none}
        assert groups.group("g").state == PREPARING
        assert groups.heartbeat("g", a.member_id, 1) == ErrorCode.rebalance_in_progress
        again = await asyncio.gather(join(groups, a.member_id), join(groups, b.member_id))
        assert {r.generation_id for r in again} == {2}
        assert next(r for r in again if r.member_id == a.member_id).members  # the leader stays leader
        assert groups.heartbeat("g", c.member_id, 2) == ErrorCode.unknown_member_id
        assert groups.heartbeat("g", a.member_id, 1) == ErrorCode.illegal_generation
    asyncio.run(run())


def test_a_silent_member_is_expired_and_the_rest_rebalance():
    async def run():
        clock = [0.0]
        groups = ClassicGroups(now=lambda: clock[0])
        a, b = await stable_group(groups, 2)
        clock[0] = 5.0
        assert groups.heartbeat("g", a.member_id, 1) == ErrorCode.none
        clock[0] = 10.5
        assert groups.expire() == [("g", b.member_id)]
        assert groups.group("g").state == PREPARING
        result = await join(groups, a.member_id)
        assert (result.generation_id, [m[0] for m in result.members]) == (2, [a.member_id])
    asyncio.run(run())


def test_members_that_waited_in_a_join_past_their_session_are_not_expired_when_it_completes():
    """Kafka starts every member's session again when a join completes: a member that waited there
    for a slow one to rejoin (within the rebalance timeout) was expired right after the generation
    formed, and the group rebalanced again (a rolling-restart run's librdkafka members expired 12
    times in 2.5 minutes, each at a new generation)."""
    async def run():
        clock = [0.0]
        groups = ClassicGroups(now=lambda: clock[0])
        a, b = await stable_group(groups, 2)  # 10 s sessions
        clock[0] = 1.0
        newcomer = asyncio.ensure_future(join(groups, client="n"))
        a_again = asyncio.ensure_future(join(groups, a.member_id))
        await asyncio.sleep(0)
        assert groups.group("g").state == PREPARING
        clock[0] = 9.0
        assert groups.heartbeat("g", b.member_id, 1) == ErrorCode.rebalance_in_progress
        assert groups.expire() == [], "a member waiting in its join is not expired"
        clock[0] = 15.0  # b rejoins after a's and the newcomer's sessions, counted from their joins
        b_again = await join(groups, b.member_id)
        joined = [await a_again, await newcomer, b_again]
        assert {r.generation_id for r in joined} == {2}
        clock[0] = 15.5
        assert groups.expire() == [], "every member's session starts again when the join completes"
        leader = next(r for r in joined if r.member_id == r.leader)
        synced = await asyncio.gather(groups.sync("g", leader.member_id, 2, {r.member_id: b"x" for r in joined}),
                                      *(groups.sync("g", r.member_id, 2, {}) for r in joined if r is not leader))
        assert [code for code, _ in synced] == [ErrorCode.none] * 3 and groups.group("g").state == STABLE
    asyncio.run(run())


def test_a_member_that_never_rejoins_is_dropped_when_the_rebalance_times_out():
    async def run():
        groups = ClassicGroups()
        results = await asyncio.gather(join(groups, rebalance_ms=1_000, session_ms=1_000, client="x"),
                                       join(groups, rebalance_ms=1_000, session_ms=1_000, client="y"))
        leader = next(r for r in results if r.member_id == r.leader)
        other = next(r for r in results if r is not leader)
        await groups.sync("g", leader.member_id, 1, {})
        newcomer = asyncio.ensure_future(join(groups, session_ms=1_000, rebalance_ms=1_000, client="z"))
        await asyncio.sleep(0)
        assert groups.group("g").state == PREPARING
        rejoined = await join(groups, leader.member_id, session_ms=1_000, rebalance_ms=1_000)
        late = await newcomer
        assert rejoined.generation_id == late.generation_id == 2
        assert other.member_id not in {m[0] for m in rejoined.members}
        assert len(rejoined.members) == 2
    asyncio.run(run())


def test_commits_need_the_current_generation_and_a_member_or_an_empty_group():
    async def run():
        groups = ClassicGroups()
        assert groups.check_commit("g", "", -1) == ErrorCode.none  # a standalone consumer
        a, b = await stable_group(groups, 2)
        assert groups.check_commit("g", a.member_id, 1) == ErrorCode.none
        assert groups.check_commit("g", a.member_id, 0) == ErrorCode.illegal_generation
        assert groups.check_commit("g", "nobody", 1) == ErrorCode.unknown_member_id
        assert groups.check_commit("g", "", -1) == ErrorCode.unknown_member_id
        groups.leave("g", [b.member_id])
        assert groups.check_commit("g", a.member_id, 1) == ErrorCode.none  # before it rejoins
        assert (await join(groups, a.member_id)).generation_id == 2
        assert groups.group("g").state == COMPLETING
        assert groups.check_commit("g", a.member_id, 2) == ErrorCode.rebalance_in_progress
        assert (await groups.sync("g", a.member_id, 2, {a.member_id: b"all"})) == (ErrorCode.none, b"all")
        assert groups.check_commit("g", a.member_id, 2) == ErrorCode.none
        assert groups.delete("g") == ErrorCode.non_empty_group
        groups.leave("g", [a.member_id])
        assert groups.group("g").state == EMPTY and groups.delete("g") == ErrorCode.none
    asyncio.run(run())


@pytest.mark.parametrize("case", ["type", "no common protocol", "session", "unknown member"])
def test_bad_joins_get_kafkas_errors(case):
    async def run():
        groups = ClassicGroups()
        await stable_group(groups, 1)
        if case == "type":
            r = await groups.join("g", "", None, "connect", PROTOCOLS, 10_000, 10_000, "c", "h")
            assert r.error == ErrorCode.inconsistent_group_protocol
        elif case == "no common protocol":
            r = await join(groups, protocols=[("sticky", b"")])
            assert r.error == ErrorCode.inconsistent_group_protocol
        elif case == "session":
            r = await join(groups, session_ms=10)
            assert r.error == ErrorCode.invalid_session_timeout
        else:
            r = await join(groups, member_id="made-up")
            assert r.error == ErrorCode.unknown_member_id
        assert groups.group("g").state == STABLE
    asyncio.run(run())


def test_a_follower_waiting_in_sync_learns_of_a_new_rebalance():
    async def run():
        groups = ClassicGroups()
        results = await asyncio.gather(join(groups, client="a"), join(groups, client="b"))
        follower = next(r for r in results if r.member_id != r.leader)
        waiting = asyncio.ensure_future(groups.sync("g", follower.member_id, 1, {}))
        await asyncio.sleep(0)
        assert groups.group("g").state == COMPLETING
        asyncio.ensure_future(join(groups, client="c"))
        await asyncio.sleep(0)
        assert await waiting == (ErrorCode.rebalance_in_progress, b"")
    asyncio.run(run())


def test_subscribed_topics_are_read_from_consumer_members_metadata_as_kafka_python_writes_it():
    """OffsetDelete's question: which topics a group's members read. kafka-python's own
    subscription encoder (every version) is the judge; metadata no consumer can read, or a group of
    another protocol type, answers None (the listener then refuses as Kafka does)."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    async def run():
        groups = ClassicGroups()
        assert groups.subscribed_topics("g") == set()
        subscriptions = [ConsumerProtocolSubscription(version, topics, b"user-data").encode(version=version)
                         for version, topics in ((0, ["orders", "ünïcode"]), (3, ["clicks"]))]
        await asyncio.gather(*(groups.join("g", "", None, "consumer", [("range", meta)], 10_000, 10_000, f"c{i}",
                                           "127.0.0.1") for i, meta in enumerate(subscriptions)))
        assert groups.subscribed_topics("g") == {"orders", "ünïcode", "clicks"}
        await groups.join("cut", "", None, "consumer", [("range", subscriptions[0][:9])], 10_000, 10_000, "c", "h")
        assert groups.subscribed_topics("cut") is None
        await groups.join("connect", "", None, "connect", [("default", b"\x00")], 10_000, 10_000, "c", "h")
        assert groups.subscribed_topics("connect") is None
    asyncio.run(run())
