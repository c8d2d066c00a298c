"""Kafka's classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) with
client-side assignment, as kafka-python, aiokafka and librdkafka run groups. No Ray: the listener
drives it on its event loop, and the group's committed offsets go to raylog's coordinator.

Follows Kafka's GroupCoordinator for the classic protocol, simplified to one coordinator:

- A group is Empty, PreparingRebalance, CompletingRebalance or Stable.
- A join by a new member (or a known one with other protocols) starts a rebalance; a rebalance
  completes when every member has joined again, or when the longest rebalance timeout of its
  members has passed (who did not join is removed). Completing it starts a new generation: the
  leader (the previous one if it joined again, else the first to join) gets every member's
  subscription metadata, the others none.
- The leader's SyncGroup hands out the assignments; a follower's SyncGroup waits for it.
- Heartbeats keep a member; a heartbeat during a rebalance answers REBALANCE_IN_PROGRESS (rejoin).
  A member silent for its session timeout is removed and the others rebalance, except while it
  waits in a join (its join is its heartbeat; its session starts again when the join completes).
- LeaveGroup removes members at once (no session timeout to wait out).
- A commit names its generation and member, and is taken while the group is stable or preparing
  a rebalance (a member commits before it rejoins), not while the new generation's assignment is
  on its way; a generation -1 and no member is a standalone consumer's commit, taken only while
  the group has no members.

Errors are Kafka's codes (kio ErrorCode), returned, not raised: they are answers.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

logger = logging.getLogger(__name__)

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
INITIAL_REBALANCE_DELAY_S = 0.3
"""A new group's first rebalance waits this long for more members (Kafka's
group.initial.rebalance.delay.ms is 3 s); consumers started together then share one generation."""
MIN_SESSION_MS, MAX_SESSION_MS = 1_000, 300_000
"""Kafka's group.min/max.session.timeout.ms (6 s minimum there; 1 s here for tests' short sessions)."""


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_seen: float = field(default_factory=time.monotonic)
    assignment: bytes = b""
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple = ()
    """(member id, instance id, metadata) of every member, for the leader only."""


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance: asyncio.TimerHandle | None = None
    delaying: bool = False
    """In a new group's initial rebalance delay."""


class ClassicGroups:
    """Every classic group this listener coordinates. ``now`` is injectable for tests."""

    def __init__(self, now=time.monotonic):
        self.groups: dict[str, Group] = {}
        self._now = now

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    # --- JoinGroup ---------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
                   client_id: str, client_host: str) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id)
        if not MIN_SESSION_MS <= session_timeout_ms <= MAX_SESSION_MS:
            return JoinResult(ErrorCode.invalid_session_timeout)
        if not protocols or not protocol_type:
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        group = self.groups.setdefault(group_id, Group(group_id))
        if group.protocol_type is not None and group.members and protocol_type != group.protocol_type:
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        if group.members and not _common_protocols(group, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        if member_id and member_id not in group.members:
            return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
        member = group.members.get(member_id)
        if member is None:
            member_id = f"{client_id or 'consumer'}-{uuid.uuid4()}"
            member = Member(member_id, client_id, client_host, instance_id, session_timeout_ms,
                            max(rebalance_timeout_ms, session_timeout_ms), protocol_type, list(protocols))
            group.members[member_id] = member
            self._prepare(group)
        elif member.protocols != list(protocols) or group.state == STABLE and member_id == group.leader:
            # Other subscriptions, or the leader asking again (its metadata may have changed): rebalance.
            member.protocols = list(protocols)
            self._prepare(group)
        elif group.state in (STABLE, COMPLETING):
            # A member that rejoins the generation it is in (it lost the answer): the same answer.
            return self._join_result(group, member)
        else:
            self._prepare(group)
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, max(rebalance_timeout_ms,
                                                                                          session_timeout_ms)
        member.last_seen = self._now()
        if member.join is not None and not member.join.done():
            member.join.set_result(JoinResult(ErrorCode.unknown_member_id))  # superseded by this join
        member.join = asyncio.get_running_loop().create_future()
        self._maybe_complete(group)
        return await member.join

    def _prepare(self, group: Group) -> None:
        if group.state == PREPARING:
            return
        for m in group.members.values():
            if m.sync is not None and not m.sync.done():
                m.sync.set_result((ErrorCode.rebalance_in_progress, b""))
        first = group.state == EMPTY
        group.state = PREPARING
        if group.rebalance is not None:
            group.rebalance.cancel()
        loop = asyncio.get_running_loop()
        if first:
            group.delaying = True
            group.rebalance = loop.call_later(INITIAL_REBALANCE_DELAY_S, self._initial_delay_over, group)
        else:
            group.rebalance = loop.call_later(self._rebalance_timeout_s(group), self._rebalance_timed_out, group)

    @staticmethod
    def _rebalance_timeout_s(group: Group) -> float:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000

    def _initial_delay_over(self, group: Group) -> None:
        group.delaying = False
        group.rebalance = asyncio.get_running_loop().call_later(self._rebalance_timeout_s(group),
                                                                self._rebalance_timed_out, group)
        self._maybe_complete(group)

    def _rebalance_timed_out(self, group: Group) -> None:
        group.rebalance = None
        if group.state != PREPARING:
            return
        for member_id, m in list(group.members.items()):
            if m.join is None or m.join.done():
                del group.members[member_id]
        self._maybe_complete(group)

    def _maybe_complete(self, group: Group) -> None:
        if group.state != PREPARING or group.delaying:
            return
        if not group.members:
            self._empty(group)
            return
        if any(m.join is None or m.join.done() for m in group.members.values()):
            return
        if group.rebalance is not None:
            group.rebalance.cancel()
            group.rebalance = None
        group.generation_id += 1
        group.state = COMPLETING
        group.protocol_type = next(iter(group.members.values())).protocol_type
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol_name = _choose_protocol(group)
        logger.info("event=classic_group_generation group=%s generation=%d members=%d protocol=%s leader=%s",
                    group.group_id, group.generation_id, len(group.members), group.protocol_name, group.leader)
        now = self._now()
        for m in group.members.values():
            m.assignment = b""
            # The wait in the join was its heartbeat: its session starts again now, as Kafka's
            # completeAndScheduleNextHeartbeatExpiration does (else one that waited past it for a
            # slow member is expired as the generation forms, and the group rebalances again).
            m.last_seen = now
            m.join.set_result(self._join_result(group, m))

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members = ()
        if member.member_id == group.leader:
            members = tuple((m.member_id, m.instance_id, dict(m.protocols)[group.protocol_name])
                            for m in group.members.values())
        return JoinResult(ErrorCode.none, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader or "", member.member_id, members)

    def _empty(self, group: Group) -> None:
        if group.rebalance is not None:
            group.rebalance.cancel()
            group.rebalance = None
        group.delaying = False
        group.state, group.leader, group.protocol_name = EMPTY, None, None
        group.generation_id += 1

    # --- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------

    def _check(self, group_id: str, member_id: str, generation_id: int) -> tuple[Group | None, ErrorCode]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return group, ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return group, ErrorCode.illegal_generation
        group.members[member_id].last_seen = self._now()
        return group, ErrorCode.none

    async def sync(self, group_id: str, member_id: str, generation_id: int,
                   assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes]:
        group, error = self._check(group_id, member_id, generation_id)
        if error != ErrorCode.none:
            return error, b""
        if group.state == PREPARING:
            return ErrorCode.rebalance_in_progress, b""
        member = group.members[member_id]
        if group.state == STABLE:
            return ErrorCode.none, member.assignment
        if member_id == group.leader:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            group.state = STABLE
            for m in group.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result((ErrorCode.none, m.assignment))
            return ErrorCode.none, member.assignment
        member.sync = asyncio.get_running_loop().create_future()
        return await member.sync

    def heartbeat(self, group_id: str, member_id: str, generation_id: int) -> ErrorCode:
        group, error = self._check(group_id, member_id, generation_id)
        if error != ErrorCode.none:
            return error
        if group.state == PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, member_ids: list[str]) -> dict[str, ErrorCode]:
        group = self.groups.get(group_id)
        out = {}
        for member_id in member_ids:
            if group is None or member_id not in group.members:
                out[member_id] = ErrorCode.unknown_member_id
                continue
            self._remove(group, member_id)
            out[member_id] = ErrorCode.none
        return out

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        logger.info("event=classic_member_removed group=%s member=%s", group.group_id, member_id)
        for future in (member.join, member.sync):
            if future is not None and not future.done():
                future.set_result(JoinResult(ErrorCode.unknown_member_id) if future is member.join
                                  else (ErrorCode.unknown_member_id, b""))
        if not group.members:
            self._empty(group)
        elif group.state == PREPARING:
            self._maybe_complete(group)
        else:
            self._prepare(group)

    def expire(self) -> list[tuple[str, str]]:
        """Remove members silent past their session timeout (not those waiting in a join);
        returns (group, member) of each."""
        now = self._now()
        gone = []
        for group in self.groups.values():
            for member_id, m in list(group.members.items()):
                waiting = m.join is not None and not m.join.done()
                if not waiting and now - m.last_seen > m.session_timeout_ms / 1000:
                    self._remove(group, member_id)
                    gone.append((group.group_id, member_id))
        return gone

    def check_commit(self, group_id: str, member_id: str, generation_id: int) -> ErrorCode:
        """Whether a commit with this member and generation may be stored."""
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            return ErrorCode.none if group is None or not group.members else ErrorCode.unknown_member_id
        group, error = self._check(group_id, member_id, generation_id)
        if error != ErrorCode.none:
            return error
        if group.state == COMPLETING:
            return ErrorCode.rebalance_in_progress
        # Stable, or a rebalance starting: a member still in its generation commits what it read
        # before rejoining (its revocation callback), as Kafka lets it.
        return ErrorCode.none

    def describe(self, group_id: str) -> dict | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        return {"state": group.state, "protocol_type": group.protocol_type or "", "protocol": group.protocol_name or "",
                "generation_id": group.generation_id, "leader": group.leader or "",
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
                             "client_host": m.client_host,
                             "metadata": dict(m.protocols).get(group.protocol_name, b""), "assignment": m.assignment}
                            for m in group.members.values()]}

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the group's members subscribe to, from their consumer-protocol metadata; None
        for a group of another protocol type with members (Kafka cannot tell what it reads)."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return set()
        if group.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for m in group.members.values():
            metadata = dict(m.protocols).get(group.protocol_name, b"")
            try:
                topics.update(_subscription_topics(metadata))
            except (struct.error, UnicodeDecodeError):
                return None  # metadata the group's own members wrote but no consumer can read
        return topics

    def delete(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.non_empty_group
        self.groups.pop(group_id, None)
        return ErrorCode.none


def _common_protocols(group: Group, protocols: list[tuple[str, bytes]]) -> set[str]:
    names = {n for n, _ in protocols}
    for m in group.members.values():
        names &= {n for n, _ in m.protocols}
    return names


def _choose_protocol(group: Group) -> str:
    """The protocol every member supports that most members rank highest (Kafka's vote)."""
    common = None
    for m in group.members.values():
        names = {n for n, _ in m.protocols}
        common = names if common is None else common & names
    votes: dict[str, int] = {}
    for m in group.members.values():
        best = next(n for n, _ in m.protocols if n in common)
        votes[best] = votes.get(best, 0) + 1
    leader_order = [n for n, _ in group.members[group.leader].protocols if n in common]
    return max(leader_order, key=lambda n: (votes.get(n, 0), -leader_order.index(n)))


def _subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (every version starts: int16 version, then an
    array of int16-length strings; the user data and owned partitions after them are not read)."""
    (count,) = struct.unpack_from(">i", metadata, 2)
    if not 0 <= count <= (len(metadata) - 6) // 2:
        raise struct.error(f"a subscription claims {count} topics")
    at, topics = 6, []
    for _ in range(count):
        (size,) = struct.unpack_from(">h", metadata, at)
        if size < 0 or at + 2 + size > len(metadata):
            raise struct.error("a subscription's topic name runs past its end")
        topics.append(metadata[at + 2:at + 2 + size].decode())
        at += 2 + size
    return topics
