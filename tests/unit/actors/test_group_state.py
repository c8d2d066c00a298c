"""GroupCoordinatorState: KIP-848 consumer groups as a pure state machine.

Every test drives the state the way the coordinator actor will: call a handler, append its
records to a log, replay them, return the response (``Shell``). Time moves only through a
FakeClock. ``Client`` plays a well-behaved consumer: it heartbeats with the epoch and the
partitions of its last response, so it gives up a partition as soon as a response stops
listing it.
"""

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.group_state import (
    GroupCoordinatorConfig, GroupCoordinatorState, HeartbeatRequest, HeartbeatResponse, Record,
)
from raylog.errors import (
    CommitFailedError, CorruptRecordError, FencedMemberEpochError, GroupIdNotFoundError, InvalidConfigError,
    InvalidGroupIdError, InvalidOffsetError, InvalidTopicError, NonEmptyGroupError, StaleMemberEpochError,
    UnknownMemberIdError, UnreleasedInstanceIdError,
)
from tests.support.clock import FakeClock

SESSION_MS = 45_000
ORDERS = frozenset(("orders", p) for p in range(6))


class Shell:
    """What the coordinator actor does with each call: run the handler, append its records to
    the log, replay them, return the response."""

    def __init__(self, topics=None):
        self.clock = FakeClock()
        self.state = GroupCoordinatorState(self.clock)
        self.log: list[Record] = []
        self.topics = dict(topics or {"orders": 6})

    def run(self, result):
        records, response = result
        for record in records:
            self.state.replay(record)
            self.log.append(record)
        return response

    def heartbeat(self, member_id, member_epoch, group_id="g", **fields) -> HeartbeatResponse:
        request = HeartbeatRequest(group_id, member_id, member_epoch, **fields)
        response = self.run(self.state.heartbeat(request, self.topics))
        if member_epoch >= 0:
            # A response describes the state as it is once its records are replayed.
            member = self.member(member_id, group_id)
            assert (response.member_epoch, response.assignment) == (member["member_epoch"], set(member["assigned"]))
        return response

    def join(self, member_id, group_id="g", **fields) -> HeartbeatResponse:
        if "subscribed_pattern" not in fields:
            fields.setdefault("subscribed_topics", ("orders",))
        return self.heartbeat(member_id, 0, group_id, **fields)

    def expire(self) -> list[Record]:
        records = self.state.expire()
        self.run((records, None))
        return records

    def commit(self, member_id, member_epoch, offsets, group_id="g"):
        return self.run(self.state.commit_offsets(group_id, member_id, member_epoch, offsets))

    def group(self, group_id="g") -> dict:
        return self.state.describe_group(group_id)

    def member(self, member_id, group_id="g") -> dict:
        [member] = [m for m in self.group(group_id)["members"] if m["member_id"] == member_id]
        return member

    def member_ids(self, group_id="g") -> list[str]:
        return [m["member_id"] for m in self.group(group_id)["members"]]


class Client:
    """A well-behaved consumer of one group."""

    def __init__(self, shell: Shell, member_id: str, **join_fields):
        self.shell, self.member_id = shell, member_id
        self.instance_id = join_fields.get("instance_id")
        self.response = shell.join(member_id, **join_fields)

    @property
    def epoch(self) -> int:
        return self.response.member_epoch

    @property
    def owned(self) -> frozenset:
        return self.response.assignment

    def heartbeat(self, **fields) -> HeartbeatResponse:
        fields.setdefault("owned_partitions", tuple(sorted(self.owned)))
        self.response = self.shell.heartbeat(self.member_id, self.epoch, **fields)
        return self.response


def settle(*clients: Client, rounds: int = 5) -> None:
    for _ in range(rounds):
        for client in clients:
            client.heartbeat()
        if clients[0].shell.group()["state"] == "stable":
            return
    raise AssertionError(f"group did not settle: {clients[0].shell.group()}")


def compacted(log: list[Record], keep_tombstones: bool = True) -> list[Record]:
    """What log compaction leaves: the last record of each key, in the order of those records."""
    last = {record.key: (i, record) for i, record in enumerate(log)}
    kept = [record for _, record in sorted(last.values(), key=lambda item: item[0])]
    return kept if keep_tombstones else [r for r in kept if r.value is not None]


def rebuilt(log: list[Record], now_ms: int = 1_800_000_000_000) -> GroupCoordinatorState:
    state = GroupCoordinatorState(FakeClock(now_ms))
    for record in log:
        state.replay(Record.from_bytes(*record.to_bytes()))
    return state


# --- joining ---------------------------------------------------------------------------------


def test_first_member_to_join_creates_the_group_and_gets_every_partition():
    shell = Shell()
    response = shell.join("m1")
    assert (response.member_id, response.member_epoch, response.assignment) == ("m1", 1, ORDERS)
    assert response.heartbeat_interval_ms == GroupCoordinatorConfig().heartbeat_interval_ms
    group = shell.group()
    assert (group["group_epoch"], group["target_epoch"], group["state"]) == (1, 1, "stable")
    assert group["assignor"] == "uniform"


def test_joining_member_bumps_the_group_epoch():
    shell = Shell()
    shell.join("m1")
    shell.join("m2")
    group = shell.group()
    assert (group["group_epoch"], group["target_epoch"]) == (2, 2)
    assert shell.member_ids() == ["m1", "m2"]


def test_three_members_share_six_partitions_two_each():
    shell = Shell()
    clients = [Client(shell, m) for m in ("m1", "m2", "m3")]
    settle(*clients)
    assert [len(c.owned) for c in clients] == [2, 2, 2]
    assert frozenset().union(*(c.owned for c in clients)) == ORDERS
    assert all(c.epoch == shell.group()["group_epoch"] == 3 for c in clients)


def test_moving_partition_reaches_its_new_owner_only_after_the_old_owner_released_it():
    shell = Shell()
    m1 = Client(shell, "m1")
    m2 = Client(shell, "m2")
    moving = frozenset(shell.member("m2")["target"])
    assert len(moving) == 3 and moving < m1.owned
    assert (m2.epoch, m2.owned, shell.member("m2")["state"]) == (2, frozenset(), "unreleased_partitions")

    # m1, still owning all six, is told to give up the moving ones and stays at its epoch.
    assert m1.heartbeat().assignment == ORDERS - moving and m1.epoch == 1
    assert shell.member("m1")["state"] == "unrevoked_partitions"
    assert set(shell.member("m1")["pending_revocation"]) == moving

    # Until m1 reports them gone, m2 gets nothing, whether or not m1 says anything.
    assert m2.heartbeat().assignment == frozenset()
    assert shell.heartbeat("m1", 1, owned_partitions=None).assignment == ORDERS - moving
    assert m2.heartbeat().assignment == frozenset()

    # m1's heartbeat shows them released: it moves to epoch 2, keeping what it keeps ...
    assert m1.heartbeat().assignment == ORDERS - moving and m1.epoch == 2
    assert shell.member("m1")["state"] == "stable"
    # ... and only now m2 receives them.
    assert m2.heartbeat().assignment == moving and shell.group()["state"] == "stable"


def test_member_with_nothing_to_revoke_moves_to_the_new_epoch_at_once():
    shell = Shell({"orders": 6, "audit": 2})
    m1 = Client(shell, "m1")
    m2 = Client(shell, "m2", subscribed_topics=("audit",))
    assert (m2.epoch, m2.owned) == (2, {("audit", 0), ("audit", 1)})
    assert m1.heartbeat().assignment == ORDERS and m1.epoch == 2
    assert shell.group()["state"] == "stable"


def test_heartbeat_that_changes_nothing_writes_no_records():
    shell = Shell()
    m1 = Client(shell, "m1")
    before = len(shell.log)
    m1.heartbeat()
    shell.heartbeat("m1", m1.epoch)
    assert len(shell.log) == before


def test_join_without_a_subscription_is_refused():
    shell = Shell()
    with pytest.raises(InvalidConfigError, match="subscribed_topics or subscribed_pattern"):
        shell.heartbeat("m1", 0)
    with pytest.raises(InvalidTopicError):
        shell.join("m1", subscribed_topics=("bad name",))
    assert shell.log == []


# --- leaving and timeouts ----------------------------------------------------------------------


def test_leaving_member_bumps_the_group_epoch_and_frees_its_partitions_at_once():
    shell = Shell()
    m1, m2 = Client(shell, "m1"), Client(shell, "m2")
    settle(m1, m2)
    epoch = shell.group()["group_epoch"]
    response = shell.heartbeat("m2", -1)
    assert (response.member_epoch, response.assignment) == (-1, frozenset())
    assert shell.group()["group_epoch"] == epoch + 1 and shell.member_ids() == ["m1"]
    tombstones = {r.key for r in shell.log if r.value is None}
    assert {("member", "g", "m2"), ("target", "g", "m2"), ("current", "g", "m2")} <= tombstones
    assert m1.heartbeat().assignment == ORDERS, "nobody holds m2's partitions any more"


def test_member_that_stops_heartbeating_is_removed_when_its_session_expires():
    shell = Shell()
    m1, m2 = Client(shell, "m1"), Client(shell, "m2")
    settle(m1, m2)
    last_m2_heartbeat = shell.clock.now_ms
    shell.clock.advance(10_000)
    m1.heartbeat()
    assert shell.state.next_deadline() == last_m2_heartbeat + SESSION_MS
    shell.clock.advance(SESSION_MS - 10_000 - 1)
    assert shell.expire() == []
    epoch = shell.group()["group_epoch"]
    shell.clock.advance(1)
    assert shell.expire() != []
    assert shell.member_ids() == ["m1"] and shell.group()["group_epoch"] == epoch + 1
    with pytest.raises(UnknownMemberIdError):
        m2.heartbeat()
    assert m1.heartbeat().assignment == ORDERS


def test_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed():
    shell = Shell()
    m1 = Client(shell, "m1", rebalance_timeout_ms=20_000)
    m2 = Client(shell, "m2")
    m1.heartbeat()  # asked to revoke; keeps heartbeating but never lets go
    assert shell.member("m1")["state"] == "unrevoked_partitions"
    for _ in range(3):
        shell.clock.advance(5_000)
        shell.heartbeat("m1", 1, owned_partitions=tuple(sorted(ORDERS)))
    shell.clock.advance(4_999)
    assert shell.expire() == [] and shell.state.next_deadline() == shell.clock.now_ms + 1
    shell.clock.advance(1)
    shell.expire()
    assert shell.member_ids() == ["m2"]
    assert m2.heartbeat().assignment == ORDERS


def test_member_that_left_after_max_poll_interval_rejoins_with_epoch_zero():
    """The consumer's poll loop stalled past max.poll.interval.ms: it leaves with epoch -1,
    and when it polls again it joins afresh under the same member id."""
    shell = Shell()
    m1, m2 = Client(shell, "m1"), Client(shell, "m2")
    settle(m1, m2)
    shell.heartbeat("m2", -1)
    assert m1.heartbeat().assignment == ORDERS
    epoch = shell.group()["group_epoch"]
    m2 = Client(shell, "m2")
    assert m2.epoch == shell.group()["group_epoch"] == epoch + 1 and shell.member_ids() == ["m1", "m2"]
    settle(m1, m2)
    assert (len(m1.owned), len(m2.owned)) == (3, 3)


def test_fenced_member_rejoining_with_epoch_zero_starts_from_nothing():
    shell = Shell()
    m1, m2 = Client(shell, "m1"), Client(shell, "m2")
    settle(m1, m2)
    with pytest.raises(FencedMemberEpochError):
        shell.heartbeat("m1", m1.epoch + 5)
    epoch, m2_partitions = shell.group()["group_epoch"], m2.owned
    rejoined = shell.join("m1")
    assert shell.group()["group_epoch"] == epoch + 1
    assert rejoined.member_epoch == epoch + 1 and len(rejoined.assignment) == 3
    assert m2.heartbeat().assignment == m2_partitions


# --- static membership --------------------------------------------------------------------------


def test_static_member_restart_keeps_its_partitions_without_a_group_epoch_bump():
    shell = Shell()
    a = Client(shell, "a-1", instance_id="consumer-a")
    b = Client(shell, "b-1", instance_id="consumer-b")
    settle(a, b)
    epoch = shell.group()["group_epoch"]
    left = shell.heartbeat("a-1", -2, instance_id="consumer-a")
    assert (left.member_epoch, left.assignment) == (-2, frozenset())
    assert shell.group()["group_epoch"] == epoch and set(shell.member("a-1")["assigned"]) == a.owned
    assert b.heartbeat().assignment == b.owned, "b does not get the absent member's partitions"

    restarted = Client(shell, "a-2", instance_id="consumer-a")
    assert (restarted.epoch, restarted.owned) == (a.epoch, a.owned)
    assert shell.group()["group_epoch"] == epoch and shell.member_ids() == ["a-2", "b-1"]
    assert b.heartbeat().assignment == b.owned and shell.group()["state"] == "stable"
    with pytest.raises(UnknownMemberIdError):
        a.heartbeat()


def test_static_member_that_does_not_come_back_within_its_session_is_removed():
    shell = Shell()
    a = Client(shell, "a-1", instance_id="consumer-a")
    b = Client(shell, "b-1")
    settle(a, b)
    epoch = shell.group()["group_epoch"]
    shell.heartbeat("a-1", -2, instance_id="consumer-a")
    shell.clock.advance(SESSION_MS - 1)
    b.heartbeat()
    assert shell.expire() == []
    shell.clock.advance(1)
    shell.expire()
    assert shell.member_ids() == ["b-1"] and shell.group()["group_epoch"] == epoch + 1
    assert b.heartbeat().assignment == ORDERS


def test_joining_with_an_instance_id_a_live_member_holds_is_refused():
    shell = Shell()
    Client(shell, "a-1", instance_id="consumer-a")
    before = list(shell.log)
    with pytest.raises(UnreleasedInstanceIdError, match="a-1"):
        shell.join("a-2", instance_id="consumer-a")
    assert shell.log == before and shell.member_ids() == ["a-1"]


def test_instance_id_whose_session_expired_can_be_taken_over_before_expire_runs():
    shell = Shell()
    a = Client(shell, "a-1", instance_id="consumer-a")
    shell.clock.advance(SESSION_MS)
    taken_over = shell.join("a-2", instance_id="consumer-a")
    assert (taken_over.member_epoch, taken_over.assignment) == (a.epoch, a.owned)
    assert shell.member_ids() == ["a-2"] and shell.group()["group_epoch"] == 1


def test_temporary_leave_needs_an_instance_id():
    shell = Shell()
    Client(shell, "m1")
    with pytest.raises(InvalidConfigError, match="instance_id"):
        shell.heartbeat("m1", -2)


# --- epochs -----------------------------------------------------------------------------------


def two_epoch_member(shell: Shell) -> Client:
    """m1 at epoch 2 after epoch 1: a member reading another topic joined, nothing moved."""
    shell.topics["audit"] = 1
    m1 = Client(shell, "m1")
    Client(shell, "m2", subscribed_topics=("audit",))
    m1.heartbeat()
    assert m1.epoch == 2
    return m1


def test_heartbeat_with_an_epoch_the_member_does_not_have_is_fenced():
    shell = Shell()
    two_epoch_member(shell)
    with pytest.raises(FencedMemberEpochError, match="epoch 3"):
        shell.heartbeat("m1", 3)
    with pytest.raises(FencedMemberEpochError):
        shell.heartbeat("m1", 1, owned_partitions=None)
    with pytest.raises(FencedMemberEpochError):
        shell.heartbeat("m1", 1, owned_partitions=(("audit", 0),))


def test_previous_epoch_is_accepted_while_the_member_owns_a_subset_of_its_assignment():
    """The response that moved the member to epoch 2 may have been lost (Kafka accepts it too)."""
    shell = Shell()
    m1 = two_epoch_member(shell)
    response = shell.heartbeat("m1", 1, owned_partitions=(("orders", 0),))
    assert (response.member_epoch, response.assignment) == (2, m1.owned)


def test_heartbeat_from_a_member_the_group_does_not_have_is_refused():
    shell = Shell()
    with pytest.raises(UnknownMemberIdError, match="ghost"):
        shell.heartbeat("ghost", 3)
    Client(shell, "m1")
    with pytest.raises(UnknownMemberIdError):
        shell.heartbeat("ghost", -1)


def test_empty_or_non_string_group_id_is_refused():
    state = GroupCoordinatorState(FakeClock())
    for bad in ("", None):
        with pytest.raises(InvalidGroupIdError):
            state.heartbeat(HeartbeatRequest(bad, "m1", 0, subscribed_topics=("orders",)), {"orders": 1})
    with pytest.raises(InvalidGroupIdError):
        state.commit_offsets("", None, -1, {})


# --- subscriptions and assignors ----------------------------------------------------------------


def test_pattern_subscription_picks_up_a_topic_created_later():
    shell = Shell({"orders": 6})
    m1 = Client(shell, "m1", subscribed_pattern=r"metrics-.*")
    assert (m1.epoch, m1.owned) == (1, frozenset())
    shell.topics["metrics-eu"] = 2
    shell.topics["logs"] = 3
    assert m1.heartbeat().assignment == {("metrics-eu", 0), ("metrics-eu", 1)}
    assert m1.epoch == shell.group()["group_epoch"] == 2


def test_adding_partitions_to_a_subscribed_topic_bumps_the_epoch_and_assigns_them():
    shell = Shell()
    m1 = Client(shell, "m1")
    shell.topics["orders"] = 8
    assert m1.heartbeat().assignment == {("orders", p) for p in range(8)}
    assert shell.group()["group_epoch"] == 2


def test_a_topic_nobody_subscribes_to_does_not_bump_the_epoch():
    shell = Shell()
    m1 = Client(shell, "m1")
    shell.topics["unrelated"] = 3
    before = len(shell.log)
    m1.heartbeat()
    assert shell.group()["group_epoch"] == 1 and len(shell.log) == before


def test_dropping_a_topic_from_the_subscription_revokes_its_partitions_first():
    shell = Shell({"orders": 2, "audit": 1})
    m1 = Client(shell, "m1", subscribed_topics=("orders", "audit"))
    response = m1.heartbeat(subscribed_topics=("orders",))
    assert response.assignment == {("orders", 0), ("orders", 1)} and response.member_epoch == 1
    assert shell.member("m1")["pending_revocation"] == [("audit", 0)]
    assert m1.heartbeat().member_epoch == 2 and shell.group()["state"] == "stable"


def test_unknown_assignor_is_refused():
    shell = Shell()
    with pytest.raises(InvalidConfigError, match="sticky"):
        shell.join("m1", assignor="sticky")


def test_members_of_one_group_must_use_the_same_assignor():
    shell = Shell()
    m1 = Client(shell, "m1", assignor="range")
    with pytest.raises(InvalidConfigError, match="range"):
        shell.join("m2")
    m2 = Client(shell, "m2", assignor="range")
    settle(m1, m2)
    assert m1.owned == {("orders", p) for p in range(3)} and m2.owned == {("orders", p) for p in range(3, 6)}


# --- offsets ----------------------------------------------------------------------------------


def test_commit_at_the_members_epoch_is_stored_and_fetched():
    shell = Shell()
    m1 = Client(shell, "m1")
    shell.commit("m1", m1.epoch, {("orders", 0): (42, "meta"), ("orders", 1): (7, "")})
    assert shell.state.fetch_offsets("g", None) == {("orders", 0): (42, "meta"), ("orders", 1): (7, "")}
    assert shell.state.fetch_offsets("g", [("orders", 1), ("orders", 5)]) == {("orders", 1): (7, "")}
    assert shell.log[-1].value["commit_timestamp_ms"] == shell.clock.now_ms


def test_commit_with_an_older_epoch_is_stale_and_with_a_newer_one_is_fenced():
    shell = Shell()
    two_epoch_member(shell)
    with pytest.raises(StaleMemberEpochError) as stale:
        shell.commit("m1", 1, {("orders", 0): (1, "")})
    assert isinstance(stale.value, CommitFailedError)
    with pytest.raises(FencedMemberEpochError):
        shell.commit("m1", 3, {("orders", 0): (1, "")})
    assert shell.state.fetch_offsets("g", None) == {}


def test_a_member_fetching_offsets_is_checked_at_its_epoch_and_an_unnamed_fetch_always_reads():
    shell = Shell()
    m1 = two_epoch_member(shell)
    shell.commit("m1", m1.epoch, {("orders", 0): (5, "")})
    assert shell.state.fetch_offsets("g", None, "m1", 2) == {("orders", 0): (5, "")}
    assert shell.state.fetch_offsets("g", None) == {("orders", 0): (5, "")}
    with pytest.raises(StaleMemberEpochError):
        shell.state.fetch_offsets("g", None, "m1", 1)
    with pytest.raises(FencedMemberEpochError):
        shell.state.fetch_offsets("g", None, "m1", 3)
    with pytest.raises(UnknownMemberIdError):
        shell.state.fetch_offsets("g", None, "gone", 2)
    with pytest.raises(UnknownMemberIdError):  # an epoch names a member, even with no id
        shell.state.fetch_offsets("g", None, None, 2)
    # A group without members checks no one: a classic group's member (the Kafka listener runs
    # classic groups; here they are offsets only) reads as Kafka lets it.
    shell.commit(None, -1, {("orders", 0): (3, "")}, group_id="offsets-only")
    assert shell.state.fetch_offsets("offsets-only", None, "classic-member", 4) == {("orders", 0): (3, "")}


def test_commit_for_a_partition_the_member_no_longer_owns_is_refused():
    shell = Shell()
    m1, m2 = Client(shell, "m1"), Client(shell, "m2")
    settle(m1, m2)
    [gone] = sorted(m2.owned)[:1]
    with pytest.raises(CommitFailedError, match=rf"'m1'.*{gone[0]}-{gone[1]}"):
        shell.commit("m1", m1.epoch, {gone: (5, "")})


def test_member_may_commit_a_partition_it_is_still_revoking():
    shell = Shell()
    m1 = Client(shell, "m1")
    Client(shell, "m2")
    m1.heartbeat()
    [revoking] = sorted(shell.member("m1")["pending_revocation"])[:1]
    shell.commit("m1", m1.epoch, {revoking: (9, "")})
    assert shell.state.fetch_offsets("g", [revoking]) == {revoking: (9, "")}


def test_commit_without_a_member_id_is_allowed_only_while_the_group_is_empty():
    shell = Shell()
    shell.commit(None, -1, {("orders", 0): (3, "")}, group_id="manual")
    assert shell.state.fetch_offsets("manual", None) == {("orders", 0): (3, "")}
    Client(shell, "m1")
    with pytest.raises(CommitFailedError, match="member"):
        shell.commit(None, -1, {("orders", 0): (4, "")})


def test_commit_refuses_negative_offsets_and_unknown_members():
    shell = Shell()
    m1 = Client(shell, "m1")
    with pytest.raises(InvalidOffsetError, match="-1"):
        shell.commit("m1", m1.epoch, {("orders", 0): (-1, "")})
    with pytest.raises(InvalidOffsetError):
        shell.commit("m1", m1.epoch, {("orders", 0): (True, "")})
    with pytest.raises(UnknownMemberIdError):
        shell.commit("ghost", 1, {("orders", 0): (1, "")})


def test_reset_offsets_needs_an_empty_group_and_creates_offsets_for_a_new_group():
    shell = Shell()
    shell.run(shell.state.reset_offsets("fresh", {("orders", 0): 10, ("orders", 1): 20}))
    assert shell.state.fetch_offsets("fresh", None) == {("orders", 0): (10, ""), ("orders", 1): (20, "")}
    assert shell.state.describe_group("fresh")["state"] == "empty"
    shell.run(shell.state.reset_offsets("fresh", {("orders", 1): None}))
    assert shell.state.fetch_offsets("fresh", None) == {("orders", 0): (10, "")}
    Client(shell, "m1")
    with pytest.raises(NonEmptyGroupError):
        shell.state.reset_offsets("g", {("orders", 0): 0})


# --- group administration ------------------------------------------------------------------------


def test_describe_of_an_unknown_group_raises_group_id_not_found():
    with pytest.raises(GroupIdNotFoundError, match="nope"):
        Shell().group("nope")


def test_list_groups_reports_each_groups_state_and_member_count():
    shell = Shell()
    m1 = Client(shell, "m1")
    m2 = Client(shell, "m2")
    shell.commit(None, -1, {("orders", 0): (1, "")}, group_id="offsets-only")
    assert shell.state.list_groups() == [
        {"group_id": "g", "state": "reconciling", "member_count": 2},
        {"group_id": "offsets-only", "state": "empty", "member_count": 0},
    ]
    settle(m1, m2)
    assert shell.state.list_groups()[0] == {"group_id": "g", "state": "stable", "member_count": 2}


def test_delete_group_refuses_a_group_with_members():
    shell = Shell()
    Client(shell, "m1")
    with pytest.raises(NonEmptyGroupError):
        shell.state.delete_group("g")
    with pytest.raises(GroupIdNotFoundError):
        shell.state.delete_group("nope")


def test_delete_group_tombstones_every_key_including_offsets():
    shell = Shell()
    m1 = Client(shell, "m1")
    shell.commit("m1", m1.epoch, {("orders", 0): (1, "")})
    shell.heartbeat("m1", -1)
    records, _ = shell.state.delete_group("g")
    shell.run((records, None))
    assert all(r.value is None for r in records)
    assert {r.key for r in records} == {("group", "g"), ("partition_metadata", "g"), ("target_epoch", "g"),
                                        ("offset", "g", "orders", 0)}
    assert shell.state.list_groups() == [] and shell.state.fetch_offsets("g", None) == {}
    assert rebuilt(shell.log).snapshot() == {} == rebuilt(compacted(shell.log)).snapshot()


# --- records and replay ----------------------------------------------------------------------------


def scenario() -> Shell:
    """A bit of everything: members, a static restart, a leave, an expiry, topic changes, commits."""
    shell = Shell({"orders": 6, "audit": 2})
    a = Client(shell, "a-1", instance_id="consumer-a")
    b = Client(shell, "b-1")
    c = Client(shell, "c-1", subscribed_pattern="aud.*")
    settle(a, b, c)
    shell.commit("b-1", b.epoch, {sorted(b.owned)[0]: (5, "b")})
    shell.heartbeat("a-1", -2, instance_id="consumer-a")
    a = Client(shell, "a-2", instance_id="consumer-a")
    shell.topics["orders"] = 8
    settle(a, b, c)
    shell.heartbeat("c-1", -1)
    shell.clock.advance(SESSION_MS)
    a.heartbeat()
    shell.expire()  # b-1
    a.heartbeat()
    Client(shell, "d-1")
    shell.heartbeat("a-2", a.epoch, owned_partitions=tuple(sorted(a.owned)))  # asked to revoke
    shell.commit(None, -1, {("audit", 0): (1, "manual")}, group_id="other")
    return shell


def test_every_record_is_plain_data_that_survives_a_msgpack_round_trip():
    def plain(value):
        if isinstance(value, dict):
            return all(isinstance(k, str) and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (str, int, bool))

    shell = scenario()
    assert {r.key[0] for r in shell.log} == {"group", "member", "partition_metadata", "target", "target_epoch",
                                             "current", "offset"}
    for record in shell.log:
        assert all(isinstance(part, (str, int)) for part in record.key)
        assert record.value is None or plain(record.value), record
        assert Record.from_bytes(*record.to_bytes()) == record


def test_replaying_the_log_after_a_restart_rebuilds_an_equal_state():
    shell = scenario()
    state = rebuilt(shell.log)
    assert state.snapshot() == shell.state.snapshot()
    for group in ("g", "other"):
        assert state.describe_group(group) == shell.state.describe_group(group)


@pytest.mark.parametrize("keep_tombstones", [True, False], ids=["with-tombstones", "tombstones-expired"])
def test_replaying_a_compacted_log_rebuilds_an_equal_state(keep_tombstones):
    shell = scenario()
    log = compacted(shell.log, keep_tombstones)
    assert len(log) < len(shell.log)
    assert rebuilt(log).snapshot() == shell.state.snapshot()


def test_members_replayed_after_a_restart_get_a_fresh_session_from_replay_time():
    shell = Shell()
    Client(shell, "m1")
    restart_ms = shell.clock.now_ms + 10 * SESSION_MS
    state = rebuilt(shell.log, now_ms=restart_ms)
    assert state.next_deadline() == restart_ms + SESSION_MS
    assert state.expire() == []


def test_handlers_change_nothing_until_their_records_are_replayed():
    shell = Shell()
    m1 = Client(shell, "m1")
    before = shell.state.snapshot()
    shell.state.heartbeat(HeartbeatRequest("g", "m2", 0, subscribed_topics=("orders",)), shell.topics)
    shell.state.heartbeat(HeartbeatRequest("g", "m1", -1), shell.topics)
    shell.state.commit_offsets("g", "m1", m1.epoch, {("orders", 0): (1, "")})
    shell.clock.advance(SESSION_MS)
    assert shell.state.expire() != []
    assert shell.state.snapshot() == before


def test_replay_refuses_a_record_it_does_not_understand():
    state = GroupCoordinatorState(FakeClock())
    with pytest.raises(CorruptRecordError):
        state.replay(Record(("bogus", "g"), {}))
    with pytest.raises(CorruptRecordError):
        state.replay(Record(("group", "g"), {"no_epoch": 1}))
    with pytest.raises(CorruptRecordError):
        Record.from_bytes(b"\xc1", None)
    assert state.snapshot() == {}


# --- properties ---------------------------------------------------------------------------------

TOPIC_CHOICES = [("a",), ("b",), ("a", "b")]
REPORTS = st.sampled_from(["released", "still_revoking", "nothing"])


class GroupCoordinatorMachine(RuleBasedStateMachine):
    """Random joins (dynamic, static, by pattern), subscription changes, heartbeats that report
    or omit what they own, leaves, static restarts, clock jumps with expiry, topic growth and
    commits. After every step no partition has two owners, neither in the coordinator's state
    nor among the consumers, and replaying the log, whole or compacted, gives an equal state.

    A consumer here revokes the way a real one does: a partition a response takes away stays in
    its hands (it is committing, or finishing a batch) until it sends its next heartbeat."""

    def __init__(self):
        super().__init__()
        self.shell = Shell({"a": 3, "b": 2})
        # member id -> {"epoch", "owned": last response's assignment, "held": what it really holds, "fields"}
        self.clients: dict[str, dict] = {}
        self.away: dict[str, dict] = {}  # instance id -> join fields of a static member that left with -2
        self.next_id = 0

    def _join(self, fields: dict) -> None:
        member_id = f"m{self.next_id}"
        self.next_id += 1
        try:
            response = self.shell.join(member_id, **fields)
        except UnreleasedInstanceIdError:
            return
        instance = fields.get("instance_id")
        if instance is not None:
            self.away.pop(instance, None)
            for other, client in list(self.clients.items()):
                if client["fields"].get("instance_id") == instance:
                    del self.clients[other]  # replaced: that process is gone
        self.clients[member_id] = {"epoch": response.member_epoch, "owned": response.assignment,
                                   "held": response.assignment, "fields": fields}

    def _heartbeat(self, member_id: str, report: str = "released", **fields) -> None:
        """``report``: "released" finishes pending revocations and reports what is left;
        "still_revoking" reports everything still in hand; "nothing" sends owned_partitions=None."""
        client = self.clients[member_id]
        if report == "released":
            client["held"] = client["owned"]
        owned = None if report == "nothing" else tuple(sorted(client["held"]))
        try:
            response = self.shell.heartbeat(member_id, client["epoch"], owned_partitions=owned, **fields)
            client["fields"].update(fields)
        except (FencedMemberEpochError, UnknownMemberIdError):
            client["held"] = frozenset()  # what Kafka's consumer does: drop everything, rejoin under the same id
            try:
                response = self.shell.join(member_id, **client["fields"])
            except UnreleasedInstanceIdError:
                del self.clients[member_id]
                return
        client["epoch"], client["owned"] = response.member_epoch, response.assignment
        client["held"] = client["held"] | response.assignment

    @rule(topics=st.sampled_from(TOPIC_CHOICES), instance=st.sampled_from([None, None, "s1", "s2"]))
    def join(self, topics, instance):
        fields = {"subscribed_topics": topics}
        if instance is not None:
            fields["instance_id"] = instance
        self._join(fields)

    @rule()
    def join_by_pattern(self):
        self._join({"subscribed_pattern": "a|c"})

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), report=REPORTS)
    def heartbeat(self, data, report):
        self._heartbeat(data.draw(st.sampled_from(sorted(self.clients))), report)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), topics=st.sampled_from(TOPIC_CHOICES), report=REPORTS)
    def subscription_changes(self, data, topics, report):
        member_id = data.draw(st.sampled_from(sorted(self.clients)))
        self.clients[member_id]["fields"].pop("subscribed_pattern", None)
        self._heartbeat(member_id, report, subscribed_topics=topics)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.clients)))
        client = self.clients.pop(member_id)
        try:
            self.shell.heartbeat(member_id, -1)
        except UnknownMemberIdError:
            pass  # already expired
        instance = client["fields"].get("instance_id")
        if instance is not None:
            self.away.pop(instance, None)

    @precondition(lambda self: any(c["fields"].get("instance_id") for c in self.clients.values()))
    @rule(data=st.data())
    def static_member_stops_for_a_restart(self, data):
        static = sorted(m for m, c in self.clients.items() if c["fields"].get("instance_id"))
        member_id = data.draw(st.sampled_from(static))
        client = self.clients.pop(member_id)
        try:
            self.shell.heartbeat(member_id, -2, instance_id=client["fields"]["instance_id"])
        except UnknownMemberIdError:
            return
        self.away[client["fields"]["instance_id"]] = client["fields"]

    @precondition(lambda self: self.away)
    @rule(data=st.data())
    def static_member_comes_back(self, data):
        self._join(self.away[data.draw(st.sampled_from(sorted(self.away)))])

    @rule(ms=st.sampled_from([1_000, 20_000, SESSION_MS + 1]))
    def time_passes(self, ms):
        self.shell.clock.advance(ms)
        self.shell.expire()

    @rule(topic=st.sampled_from(["a", "b", "c"]))
    def topic_grows_or_appears(self, topic):
        self.shell.topics[topic] = min(self.shell.topics.get(topic, 0) + 1, 5)

    @precondition(lambda self: any(c["owned"] for c in self.clients.values()))
    @rule(data=st.data())
    def commit(self, data):
        member_id = data.draw(st.sampled_from(sorted(m for m, c in self.clients.items() if c["owned"])))
        client = self.clients[member_id]
        partition = data.draw(st.sampled_from(sorted(client["owned"])))
        try:
            self.shell.commit(member_id, client["epoch"], {partition: (data.draw(st.integers(0, 99)), "")})
        except (CommitFailedError, FencedMemberEpochError, UnknownMemberIdError):
            # Only a client that lags the coordinator may be refused.
            current = next((m for m in self.shell.group()["members"] if m["member_id"] == member_id), None)
            assert current is None or current["member_epoch"] != client["epoch"] or partition not in current["assigned"]

    @rule()
    def everyone_settles(self):
        """Without churn, honest members converge: all stable at the target epoch, every
        partition of every subscribed topic owned exactly once."""
        for fields in list(self.away.values()):
            self._join(fields)
        for _ in range(5):
            for member_id in sorted(self.clients):
                if member_id in self.clients:
                    self._heartbeat(member_id)
        if not self.clients:
            return
        group = self.shell.group()
        assert group["state"] == "stable", group
        subscribed = set()
        for m in group["members"]:
            if m["subscribed_pattern"]:
                subscribed |= {t for t in self.shell.topics if t in ("a", "c")}
            else:
                subscribed |= set(m["subscribed_topics"])
        expected = {(t, p) for t in subscribed & set(self.shell.topics) for p in range(self.shell.topics[t])}
        assert Counter(tp for m in group["members"] for tp in m["assigned"]) == Counter(expected)

    @invariant()
    def no_partition_has_two_owners(self):
        for summary in self.shell.state.list_groups():
            members = self.shell.state.describe_group(summary["group_id"])["members"]
            held = Counter(tp for m in members for tp in {*m["assigned"], *m["pending_revocation"]})
            assert all(n == 1 for n in held.values()), held

    @invariant()
    def no_consumer_holds_a_partition_another_member_holds(self):
        members = set(self.shell.member_ids()) if self.shell.state.list_groups() else set()
        held = Counter(tp for m, c in self.clients.items() if m in members for tp in c["held"])
        assert all(n == 1 for n in held.values()), held

    @invariant()
    def replay_rebuilds_an_equal_state(self):
        live = self.shell.state.snapshot()
        assert rebuilt(self.shell.log).snapshot() == live
        assert rebuilt(compacted(self.shell.log)).snapshot() == live
        assert rebuilt(compacted(self.shell.log, keep_tombstones=False)).snapshot() == live


GroupCoordinatorMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_group_coordinator_keeps_one_owner_per_partition_and_replays_to_an_equal_state = GroupCoordinatorMachine.TestCase
