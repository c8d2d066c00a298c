"""Pure consumer-group coordinator state: KIP-848, "the next generation of the consumer
rebalance protocol".

A state machine in the shape of Kafka's ``GroupMetadataManager`` on the coordinator runtime:
each handler validates a request against the current state and returns the records that
express the change plus the response; the replicated state changes only in ``replay``, which is
also how a restarted coordinator rebuilds it from its compacted log topic. A response already
describes the state as it will be once its records are replayed. No Ray, no I/O, no asyncio,
no threads; time comes from an injected clock returning milliseconds. Not thread-safe: one
actor owns an instance and calls it from one thread.

KIP-848 in one paragraph: there is no group-wide barrier. Membership, subscription and
partition-count changes bump the *group epoch*; the coordinator then computes a *target
assignment* with a server-side assignor (``actors.assignors``) and stamps it with the *target
epoch*. Each member then reconciles on its own heartbeats: it first gives up the partitions it
owns that are not in its target (keeping its epoch), and once a heartbeat's owned partitions
show they are gone it moves to the target epoch and receives the target partitions that no
other member still holds. A partition therefore never has two owners.

Records (``Record(key, value)``; ``value=None`` is a tombstone; values are msgpack-able):

    ("group", g)                  {"epoch"}                              group epoch
    ("member", g, m)              {"instance_id", "client_id", "client_host",
                                   "subscribed_topics": [..] | None, "subscribed_pattern",
                                   "assignor", "rebalance_timeout_ms", "session_timeout_ms"}
    ("partition_metadata", g)     {"topics": {topic: partition_count}}   subscribed, existing topics
    ("target", g, m)              {"partitions": [[topic, p], ...]}
    ("target_epoch", g)           {"epoch"}
    ("current", g, m)             {"member_epoch", "previous_member_epoch", "state",
                                   "assigned": [[t, p], ...], "pending_revocation": [[t, p], ...]}
    ("offset", g, topic, p)       {"offset", "metadata", "commit_timestamp_ms"}

Why this survives compaction: every record carries a whole value, and replaying it sets (or,
for a tombstone, deletes) exactly one field of the state and reads nothing else. The state is
thus a function of the last record of each key, which is what compaction keeps; the order in
which those last records are replayed does not matter. Handlers emit tombstones for every key
a removal touches, instead of relying on replay to cascade.

Soft state, never logged: when each member last heartbeated and when it started owing a
revocation. After a restart every member gets a fresh session (and a fresh rebalance timeout
if it still owes a revocation) starting at replay time, as Kafka's coordinator reschedules its
timers when it loads a shard. A heartbeat that changes nothing returns no records, so the
heartbeat handler itself notes the member's heartbeat time in that soft state (Kafka likewise
schedules the session timer from the handler); that note is the only thing a handler writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar

import msgpack

from actors.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, PartitionId
from raylog.errors import (
    CommitFailedError, CorruptRecordError, FencedMemberEpochError, GroupIdNotFoundError, InvalidConfigError,
    InvalidGroupIdError, InvalidOffsetError, InvalidPartitionError, NonEmptyGroupError, StaleMemberEpochError,
    UnknownMemberIdError, UnreleasedInstanceIdError,
)
from raylog.naming import validate_topic_name

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
"""Kafka's special member epochs in ConsumerGroupHeartbeat."""

# A member's reconciliation state (Kafka's MemberState).
STABLE = "stable"
"""The member owns its whole target assignment, or is moving to it without a revocation."""
UNREVOKED_PARTITIONS = "unrevoked_partitions"
"""The member must give up partitions before it may move to the target epoch."""
UNRELEASED_PARTITIONS = "unreleased_partitions"
"""The member is at the target epoch but some target partitions are still held by others."""

# A group's state as describe_group and list_groups report it (Kafka's ConsumerGroupState).
EMPTY, ASSIGNING, RECONCILING = "empty", "assigning", "reconciling"

_KEY_LENGTHS = {"group": 2, "member": 3, "partition_metadata": 2, "target": 3, "target_epoch": 2,
                "current": 3, "offset": 4}


# --- records ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of the coordinator's compacted log: ``key`` is a tuple of str/int starting with
    the record type; ``value`` is a dict of plain msgpack-able values, or None for a tombstone."""

    key: tuple
    value: dict | None

    def to_bytes(self) -> tuple[bytes, bytes | None]:
        key = msgpack.packb(list(self.key), use_bin_type=True)
        return key, None if self.value is None else msgpack.packb(self.value, use_bin_type=True)

    @classmethod
    def from_bytes(cls, key: bytes, value: bytes | None) -> Record:
        try:
            decoded_key = msgpack.unpackb(key, raw=False, use_list=True)
            decoded_value = None if value is None else msgpack.unpackb(value, raw=False, use_list=True)
        except (ValueError, TypeError) as e:
            raise CorruptRecordError(f"group record does not decode as msgpack: {e}") from None
        if not isinstance(decoded_key, list) or not decoded_key or not isinstance(decoded_key[0], str):
            raise CorruptRecordError(f"group record key must be a list starting with its type, got {decoded_key!r}")
        if decoded_value is not None and not isinstance(decoded_value, dict):
            raise CorruptRecordError(f"group record value must be a map, got {type(decoded_value).__name__}")
        return cls(tuple(decoded_key), decoded_value)


# --- config, requests, responses ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """Coordinator-wide settings; validated at construction (InvalidConfigError)."""

    heartbeat_interval_ms: int = 3000
    """How often members are told to heartbeat. Kafka's group.consumer.heartbeat.interval.ms is
    5000; raylog uses kafka-python's heartbeat_interval_ms default."""
    min_session_timeout_ms: int = 1000
    """Smallest session timeout a member may ask for. In KIP-848 the broker alone sets the
    session timeout; raylog lets members ask within these bounds, as the classic protocol did
    (group.min.session.timeout.ms, Kafka: 6000; raylog: 1 s, because Ray actors that run group
    members restart in about a second and users want their partitions back that fast). A
    member heartbeats at least three times per session, whatever interval this coordinator
    suggests (raylog/consumer/group_member.py)."""
    max_session_timeout_ms: int = 1_800_000
    """Largest session timeout a member may ask for (group.max.session.timeout.ms, Kafka: 30 min)."""
    offset_metadata_max_bytes: int = 4096
    """Longest metadata string, in UTF-8 bytes, an offset commit may carry (offset.metadata.max.bytes,
    Kafka: 4096): the string lives in every offset record."""

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval_ms", "min_session_timeout_ms", "max_session_timeout_ms",
                     "offset_metadata_max_bytes"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise InvalidConfigError(f"{name} must be an int >= 1, got {value!r}")
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise InvalidConfigError(
                f"min_session_timeout_ms ({self.min_session_timeout_ms}) exceeds max_session_timeout_ms "
                f"({self.max_session_timeout_ms})")


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """KIP-848's ConsumerGroupHeartbeat request. Fields documented as "None = unchanged" may be
    left out once the member has sent them."""

    group_id: str
    member_id: str
    """Generated by the client (a uuid) and kept for the consumer's lifetime (KIP-1082)."""
    member_epoch: int
    """0 joins, -1 leaves, -2 is a static member's temporary leave, >0 is the member's epoch."""
    instance_id: str | None = None
    """group.instance.id of a static member; None = dynamic member (or unchanged)."""
    rebalance_timeout_ms: int = 300_000
    """How long the member may take to revoke partitions (max.poll.interval.ms, Kafka: 5 min).
    Read at the join only, like session_timeout_ms, client_id and client_host."""
    session_timeout_ms: int = 45_000
    """The member is removed when it has not heartbeated for this long (Kafka: 45 s)."""
    subscribed_topics: tuple[str, ...] | None = None
    """Topic names; replaces a pattern subscription. None = unchanged."""
    subscribed_pattern: str | None = None
    """A Python regular expression matched with re.fullmatch against topic names (Kafka uses
    RE2/J syntax); replaces a topic-name subscription. None = unchanged."""
    assignor: str | None = None
    """A name in ASSIGNORS. On a join None means "uniform"; afterwards None = unchanged."""
    owned_partitions: tuple[tuple[str, int], ...] | None = None
    """What the member owns right now; None = unchanged since its last heartbeat."""
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[PartitionId]
    """The partitions the member may own now: its whole assignment, not a delta."""


# --- replicated state: each field is set by exactly one record type ----------------------


@dataclass(frozen=True, slots=True)
class Member:
    """A member's subscription and settings: the value of its ("member", group, member) record."""

    instance_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...] | None
    subscribed_pattern: str | None
    assignor: str
    rebalance_timeout_ms: int
    session_timeout_ms: int

    def same_subscription(self, other: Member) -> bool:
        """What the target assignment depends on; a change bumps the group epoch (KIP-848)."""
        return (self.subscribed_topics, self.subscribed_pattern, self.assignor) == (
            other.subscribed_topics, other.subscribed_pattern, other.assignor)

    def resolve(self, topics: Iterable[str]) -> frozenset[str]:
        """The names among ``topics`` that this member subscribes to."""
        if self.subscribed_pattern is not None:
            pattern = re.compile(self.subscribed_pattern)
            return frozenset(t for t in topics if pattern.fullmatch(t))
        wanted = self.subscribed_topics or ()
        return frozenset(t for t in topics if t in wanted)


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """Where a member is in its reconciliation: its ("current", group, member) record."""

    member_epoch: int
    previous_member_epoch: int
    state: str
    assigned: frozenset[PartitionId]
    """Partitions the member may own now: what its heartbeat responses carry."""
    pending_revocation: frozenset[PartitionId]
    """Partitions the member was told to give up and has not yet reported gone."""


_JOINING = CurrentAssignment(JOIN_GROUP_MEMBER_EPOCH, JOIN_GROUP_MEMBER_EPOCH, STABLE, frozenset(), frozenset())


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(slots=True)
class Group:
    """One group's replicated state. None / empty means "no record for that key"."""

    group_id: str
    epoch: int | None = None
    partition_metadata: dict[str, int] | None = None
    target_epoch: int | None = None
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, frozenset[PartitionId]] = field(default_factory=dict)
    current: dict[str, CurrentAssignment] = field(default_factory=dict)
    offsets: dict[PartitionId, OffsetAndMetadata] = field(default_factory=dict)

    def is_gone(self) -> bool:
        return (self.epoch is None and self.partition_metadata is None and self.target_epoch is None
                and not self.members and not self.target and not self.current and not self.offsets)

    def state(self) -> str:
        if not self.members:
            return EMPTY
        target_epoch = self.target_epoch or 0
        if (self.epoch or 0) != target_epoch:
            return ASSIGNING
        for member_id in self.members:
            current = self.current.get(member_id, _JOINING)
            if current.state != STABLE or current.member_epoch != target_epoch:
                return RECONCILING
        return STABLE


# --- reconciliation (Kafka's CurrentAssignmentBuilder) -----------------------------------


def reconcile(current: CurrentAssignment, target: frozenset[PartitionId], target_epoch: int,
              owned: frozenset[PartitionId] | None,
              held_by_others: Callable[[], frozenset[PartitionId]]) -> CurrentAssignment:
    """The member's next step towards its target, given what its heartbeat says it owns
    (``owned``; None = unchanged, so assume it still owns everything it was given).
    ``held_by_others()`` returns the partitions other members own or still owe a revocation of;
    it is called only when the member has partitions to receive."""
    if current.pending_revocation and (owned is None or owned & current.pending_revocation):
        # Still owns something it must give up: nothing moves until it does, whatever the target.
        return current
    if current.state == STABLE and current.member_epoch == target_epoch:
        return current
    keep = current.assigned & target
    revoke = current.assigned - target
    if revoke and (owned is None or owned & revoke):
        # Revoke first, at the member's current epoch: the new owners of these partitions wait
        # for them (unreleased_partitions) until a later heartbeat shows them gone.
        return CurrentAssignment(current.member_epoch, current.previous_member_epoch, UNREVOKED_PARTITIONS,
                                 keep, revoke)
    wanted = target - keep
    unreleased = wanted & held_by_others() if wanted else frozenset()
    previous_epoch = current.member_epoch if current.member_epoch != target_epoch else current.previous_member_epoch
    return CurrentAssignment(target_epoch, previous_epoch, UNRELEASED_PARTITIONS if unreleased else STABLE,
                             keep | (wanted - unreleased), frozenset())


# --- a handler's pending changes ------------------------------------------------------------

K = TypeVar("K")
V = TypeVar("V")


class _Overlay(Generic[K, V]):
    """A dict as a handler wants it to become: reads see the pending writes; the base dict (the
    replicated state) is never touched. ``changes()`` lists the writes that differ from it."""

    __slots__ = ("_base", "_writes")

    def __init__(self, base: Mapping[K, V]):
        self._base = base
        self._writes: dict[K, V | None] = {}

    def get(self, key: K) -> V | None:
        if key in self._writes:
            return self._writes[key]
        return self._base.get(key)

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def __setitem__(self, key: K, value: V) -> None:
        self._writes[key] = value

    def __delitem__(self, key: K) -> None:
        self._writes[key] = None

    def keys(self) -> list[K]:
        alive = {k for k in self._base if k not in self._writes}
        alive.update(k for k, v in self._writes.items() if v is not None)
        return sorted(alive)  # type: ignore[type-var]

    def changes(self) -> Iterator[tuple[K, V | None]]:
        for key in sorted(self._writes):  # type: ignore[type-var]
            value = self._writes[key]
            if value is None and key in self._base:
                yield key, None
            elif value is not None and self._base.get(key) != value:
                yield key, value


class _GroupChange:
    """The group as one handler wants it; ``records()`` expresses the difference."""

    def __init__(self, group: Group):
        self._group = group
        self.group_id = group.group_id
        self.epoch = group.epoch or 0
        self.partition_metadata: dict[str, int] = dict(group.partition_metadata or {})
        self.target_epoch = group.target_epoch or 0
        self.members: _Overlay[str, Member] = _Overlay(group.members)
        self.target: _Overlay[str, frozenset[PartitionId]] = _Overlay(group.target)
        self.current: _Overlay[str, CurrentAssignment] = _Overlay(group.current)

    def remove_member(self, member_id: str) -> None:
        del self.members[member_id]
        del self.target[member_id]
        del self.current[member_id]

    def current_of(self, member_id: str) -> CurrentAssignment:
        return self.current.get(member_id) or _JOINING

    def records(self) -> list[Record]:
        g, old = self.group_id, self._group
        out = [Record(("member", g, m), None if v is None else _member_value(v)) for m, v in self.members.changes()]
        if self.partition_metadata != (old.partition_metadata or {}):
            out.append(Record(("partition_metadata", g), {"topics": dict(self.partition_metadata)}))
        if self.epoch != (old.epoch or 0):
            out.append(Record(("group", g), {"epoch": self.epoch}))
        out += [Record(("target", g, m), None if v is None else {"partitions": _partition_list(v)})
                for m, v in self.target.changes()]
        if self.target_epoch != (old.target_epoch or 0):
            out.append(Record(("target_epoch", g), {"epoch": self.target_epoch}))
        out += [Record(("current", g, m), None if v is None else _current_value(v)) for m, v in self.current.changes()]
        return out


# --- the state machine ---------------------------------------------------------------------------


class GroupCoordinatorState:
    """Every consumer group of one coordinator. See the module docstring for the contract."""

    def __init__(self, clock: Callable[[], int], config: GroupCoordinatorConfig | None = None):
        self._clock = clock
        self.config = config or GroupCoordinatorConfig()
        self._groups: dict[str, Group] = {}
        # Soft state (not logged): keyed by (group_id, member_id).
        self._last_heartbeat_ms: dict[tuple[str, str], int] = {}
        self._revoking_since_ms: dict[tuple[str, str], int] = {}

    # --- handlers: validate, return (records, response) -----------------------------------

    def heartbeat(self, req: HeartbeatRequest, topics: Mapping[str, int]) -> tuple[list[Record], HeartbeatResponse]:
        """KIP-848's ConsumerGroupHeartbeat. ``topics`` is the cluster's topic -> partition count.

        Raises InvalidGroupIdError, UnknownMemberIdError (epoch != 0 from a member the group does
        not have), FencedMemberEpochError (wrong epoch: rejoin with 0), UnreleasedInstanceIdError
        (instance id held by a live member), InvalidConfigError / InvalidTopicError /
        InvalidPartitionError (malformed request)."""
        _validate_heartbeat(req, self.config)
        now = self._clock()
        change = _GroupChange(self._groups.get(req.group_id) or Group(req.group_id))
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            self._existing_member(change, req)
            self._remove_members(change, [req.member_id], topics)
            return change.records(), self._response(req.member_id, LEAVE_GROUP_MEMBER_EPOCH, frozenset())
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return self._static_leave(change, req, now)

        owned = None if req.owned_partitions is None else frozenset(
            _partition_id(tp, "owned_partitions") for tp in req.owned_partitions)
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            bump = self._join(change, req, now)
            owned = owned or frozenset()  # a joining consumer owns nothing yet
        else:
            bump = self._update(change, req, owned)
        if self._refresh_partition_metadata(change, topics):
            bump = True
        if bump:
            change.epoch += 1
        self._assign_if_behind(change)
        current = self._reconcile(change, req.member_id, owned)
        records = change.records()
        self._touch(req.group_id, req.member_id, now)
        return records, self._response(req.member_id, current.member_epoch, current.assigned)

    def _join(self, change: _GroupChange, req: HeartbeatRequest, now: int) -> bool:
        """Epoch 0: a new member, a fenced member rejoining under its id (a fresh start), or a
        static member's new incarnation taking over its instance id. Returns whether the group
        epoch must move."""
        if req.subscribed_topics is None and req.subscribed_pattern is None:
            raise InvalidConfigError(
                f"member {req.member_id!r} joins group {req.group_id!r} without subscribed_topics or "
                "subscribed_pattern; a join must name its subscription")
        joining = _member_from_request(None, req)
        holder = self._static_holder(change, req.instance_id, req.member_id)
        if holder is None:
            self._check_assignor(change, req.member_id, joining.assignor)
            change.members[req.member_id] = joining
            change.current[req.member_id] = _JOINING
            return True
        # KIP-848 static membership: the new member id takes over the old one's epoch, target and
        # current assignment, so a restarted static consumer gets its partitions back without a
        # group epoch bump and without moving anybody else's partitions.
        holder_member = change.members.get(holder)
        holder_current = change.current_of(holder)
        assert holder_member is not None
        if self._is_alive(change.group_id, holder, holder_member, holder_current, now):
            raise UnreleasedInstanceIdError(
                f"instance id {req.instance_id!r} of group {req.group_id!r} is held by live member {holder!r}; "
                f"member {req.member_id!r} may take it over once that member leaves with epoch -2 or its "
                "session expires")
        if req.member_id in change.members:
            raise UnreleasedInstanceIdError(
                f"member {req.member_id!r} is already in group {req.group_id!r}; it cannot also take over "
                f"instance id {req.instance_id!r} from member {holder!r}")
        self._check_assignor(change, holder, joining.assignor)
        epoch = (holder_current.previous_member_epoch
                 if holder_current.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH else holder_current.member_epoch)
        change.members[req.member_id] = joining
        change.current[req.member_id] = replace(holder_current, member_epoch=epoch, previous_member_epoch=epoch)
        holder_target = change.target.get(holder)
        if holder_target:
            change.target[req.member_id] = holder_target
        change.remove_member(holder)
        return not holder_member.same_subscription(joining)

    def _update(self, change: _GroupChange, req: HeartbeatRequest, owned: frozenset[PartitionId] | None) -> bool:
        """A heartbeat at epoch > 0. Returns whether the group epoch must move."""
        member, current = self._existing_member(change, req)
        _check_member_epoch(req, current, owned)
        updated = _member_from_request(member, req)
        if updated != member:
            if updated.assignor != member.assignor:
                self._check_assignor(change, req.member_id, updated.assignor)
            change.members[req.member_id] = updated
        return not updated.same_subscription(member)

    def _static_leave(self, change: _GroupChange, req: HeartbeatRequest,
                      now: int) -> tuple[list[Record], HeartbeatResponse]:
        """Epoch -2: a static member shutting down for a restart. KIP-848 keeps it, and its
        assignment, without a group epoch bump until its session expires; its epoch becomes -2
        (the epoch it had is kept as previous_member_epoch for its successor). Partitions it was
        revoking are released: the consumer is closing and gives up everything it owns."""
        if req.instance_id is None:
            raise InvalidConfigError(
                f"member {req.member_id!r} sent member_epoch -2 (static temporary leave) without an instance_id")
        _, current = self._existing_member(change, req)
        if current.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            change.current[req.member_id] = replace(
                current, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, previous_member_epoch=current.member_epoch,
                pending_revocation=frozenset())
        records = change.records()
        self._touch(req.group_id, req.member_id, now)
        return records, self._response(req.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH, frozenset())

    def expire(self) -> list[Record]:
        """Remove every member whose session expired (static members too, a temporary leave
        included) or that still owes a revocation after its rebalance timeout; bump the group
        epochs and recompute targets. The shell calls this when ``next_deadline()`` passes."""
        now = self._clock()
        records: list[Record] = []
        for group_id in sorted(self._groups):
            group = self._groups[group_id]
            doomed = [m for m in sorted(group.members) if self._deadline(group, m) <= now]
            if doomed:
                change = _GroupChange(group)
                # No cluster topic map here: the remaining members subscribe to a subset of what
                # the stored partition metadata already resolved.
                self._remove_members(change, doomed, group.partition_metadata or {})
                records += change.records()
        return records

    def next_deadline(self) -> int | None:
        """The clock time (ms) at which ``expire()`` next has work, or None without members."""
        deadlines = [self._deadline(g, m) for g in self._groups.values() for m in g.members]
        return min(deadlines, default=None)

    def commit_offsets(self, group_id: str, member_id: str | None, member_epoch: int,
                       offsets: Mapping[tuple[str, int], tuple[int, str]]) -> tuple[list[Record], None]:
        """Store committed offsets: one ("offset", group, topic, partition) record each.

        With a member id the member must be in the group (else UnknownMemberIdError) and
        ``member_epoch`` must equal its current epoch: a smaller one is StaleMemberEpochError (a
        CommitFailedError: the member moved on since, e.g. its response was lost), a larger one
        FencedMemberEpochError (the coordinator never gave that epoch; as Kafka's
        ConsumerGroup.validateOffsetCommit decides). Each partition must be one the member owns
        or is still revoking (it commits before giving a partition up), else CommitFailedError.
        With ``member_id=None`` (a consumer using manual assign, or an admin) ``member_epoch`` is
        ignored and the group must have no members, else CommitFailedError. Offsets must be
        ints >= 0 (InvalidOffsetError)."""
        _validate_group_id(group_id)
        entries = self._validated_offsets(offsets)
        group = self._groups.get(group_id) or Group(group_id)
        if member_id is None:
            if group.members:
                raise CommitFailedError(
                    f"group {group_id!r} has {len(group.members)} member(s); a commit without a member id "
                    "(manual assign) is only allowed while the group is empty")
        else:
            current = _member_at_epoch(group, member_id, member_epoch, "committed")
            may_commit = current.assigned | current.pending_revocation
            for (topic, partition), _, _ in entries:
                if (topic, partition) not in may_commit:
                    raise CommitFailedError(
                        f"member {member_id!r} of group {group_id!r} does not own {topic}-{partition}; "
                        "it was reassigned, offsets not committed")
        now = self._clock()
        return [Record(("offset", group_id, t, p), {"offset": o, "metadata": md, "commit_timestamp_ms": now})
                for (t, p), o, md in entries], None

    def reset_offsets(self, group_id: str,
                      offsets: Mapping[tuple[str, int], int | None]) -> tuple[list[Record], None]:
        """Set (or, with None, delete) committed offsets of a group with no members; creates
        the group's offsets even if the group never existed. NonEmptyGroupError otherwise."""
        _validate_group_id(group_id)
        group = self._groups.get(group_id) or Group(group_id)
        if group.members:
            raise NonEmptyGroupError(
                f"group {group_id!r} has {len(group.members)} member(s); stop them before resetting offsets")
        now = self._clock()
        records = []
        for tp, offset in sorted(((_partition_id(tp, "reset_offsets"), o) for tp, o in offsets.items()),
                                 key=lambda item: item[0]):
            if offset is None:
                if tp in group.offsets:
                    records.append(Record(("offset", group_id, *tp), None))
                continue
            _check_offset(offset, tp)
            records.append(Record(("offset", group_id, *tp),
                                  {"offset": offset, "metadata": "", "commit_timestamp_ms": now}))
        return records, None

    def delete_group(self, group_id: str) -> tuple[list[Record], None]:
        """Tombstones for every key of a group without members, offsets included.
        GroupIdNotFoundError if unknown, NonEmptyGroupError if it has members."""
        group = self._group(group_id)
        if group.members:
            raise NonEmptyGroupError(f"group {group_id!r} has {len(group.members)} member(s); it cannot be deleted")
        keys: list[tuple] = []
        if group.epoch is not None:
            keys.append(("group", group_id))
        if group.partition_metadata is not None:
            keys.append(("partition_metadata", group_id))
        if group.target_epoch is not None:
            keys.append(("target_epoch", group_id))
        keys += [("target", group_id, m) for m in sorted(group.target)]
        keys += [("current", group_id, m) for m in sorted(group.current)]
        keys += [("offset", group_id, t, p) for t, p in sorted(group.offsets)]
        return [Record(k, None) for k in keys], None

    # --- queries ------------------------------------------------------------------------

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None,
                      member_id: str | None = None,
                      member_epoch: int = -1) -> dict[tuple[str, int], tuple[int, str]]:
        """Committed (offset, metadata) per partition; partitions without a committed offset (or
        of an unknown group) are absent. ``partitions=None`` returns all of the group's.

        In a group with members, a member id or an epoch >= 0 (a KIP-848 member asking) must name
        a member at its current epoch, checked as commit_offsets checks it, as Kafka's
        ConsumerGroup.validateOffsetFetch decides. Neither (an admin, or a consumer that assigns its
        own partitions) reads whoever asks, and so does anyone in a group without members: that is
        also how a classic group looks here, whose members Kafka never checks on a fetch."""
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        if (member_id is not None or member_epoch >= 0) and group is not None and group.members:
            _member_at_epoch(group, member_id, member_epoch, "fetched offsets")
        stored = group.offsets if group else {}
        wanted = sorted(stored) if partitions is None else sorted(
            {_partition_id(tp, "fetch_offsets") for tp in partitions})
        return {tp: (stored[tp].offset, stored[tp].metadata) for tp in wanted if tp in stored}

    def describe_group(self, group_id: str) -> dict[str, Any]:
        group = self._group(group_id)
        members = []
        for member_id in sorted(group.members):
            member = group.members[member_id]
            current = group.current.get(member_id, _JOINING)
            members.append({
                "member_id": member_id,
                "instance_id": member.instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_epoch": current.member_epoch,
                "state": current.state,
                "assigned": sorted(current.assigned),
                "pending_revocation": sorted(current.pending_revocation),
                "target": sorted(group.target.get(member_id, ())),
                "subscribed_topics": None if member.subscribed_topics is None else list(member.subscribed_topics),
                "subscribed_pattern": member.subscribed_pattern,
            })
        return {
            "group_id": group_id,
            "state": group.state(),
            "group_epoch": group.epoch or 0,
            "target_epoch": group.target_epoch or 0,
            "assignor": _group_assignor(group.members.values()),
            "members": members,
        }

    def list_groups(self) -> list[dict[str, Any]]:
        return [{"group_id": g.group_id, "state": g.state(), "member_count": len(g.members)}
                for _, g in sorted(self._groups.items())]

    def snapshot(self) -> dict[str, Any]:
        """The replicated state as plain values, for equality checks (soft state excluded)."""
        return {
            group_id: {
                "epoch": g.epoch,
                "partition_metadata": g.partition_metadata,
                "target_epoch": g.target_epoch,
                "members": {m: _member_value(v) for m, v in sorted(g.members.items())},
                "target": {m: _partition_list(v) for m, v in sorted(g.target.items())},
                "current": {m: _current_value(v) for m, v in sorted(g.current.items())},
                "offsets": {tp: (o.offset, o.metadata, o.commit_timestamp_ms) for tp, o in sorted(g.offsets.items())},
            }
            for group_id, g in sorted(self._groups.items())
        }

    # --- state changes -------------------------------------------------------------------

    def replay(self, record: Record) -> None:
        """Apply one record: set or delete the one field its key names. CorruptRecordError for a
        key or value this coordinator does not understand; the state is then left as it was."""
        key, value = record.key, record.value
        if not key or _KEY_LENGTHS.get(key[0]) != len(key) or not isinstance(key[1], str):
            raise CorruptRecordError(f"unknown group coordinator record key {key!r}")
        kind, group_id = key[0], key[1]
        group = self._groups.get(group_id)
        if group is None:
            if value is None:
                return
            group = self._groups[group_id] = Group(group_id)
        try:
            self._apply(group, kind, key, value)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptRecordError(f"group coordinator record {key!r} has a bad value {value!r}: {e!r}") from None
        finally:
            if group.is_gone():
                del self._groups[group_id]

    def _apply(self, group: Group, kind: str, key: tuple, value: dict | None) -> None:
        if kind == "group":
            group.epoch = None if value is None else int(value["epoch"])
        elif kind == "partition_metadata":
            group.partition_metadata = None if value is None else {str(t): int(n) for t, n in value["topics"].items()}
        elif kind == "target_epoch":
            group.target_epoch = None if value is None else int(value["epoch"])
        elif kind == "member":
            soft_key = (group.group_id, key[2])
            if value is None:
                group.members.pop(key[2], None)
                self._last_heartbeat_ms.pop(soft_key, None)
            else:
                group.members[key[2]] = _member_from_value(value)
                self._last_heartbeat_ms[soft_key] = self._clock()
        elif kind == "target":
            if value is None:
                group.target.pop(key[2], None)
            else:
                group.target[key[2]] = _partition_set(value["partitions"])
        elif kind == "current":
            soft_key = (group.group_id, key[2])
            if value is None:
                group.current.pop(key[2], None)
                self._revoking_since_ms.pop(soft_key, None)
                return
            new = _current_from_value(value)  # decoded before anything changes
            old = group.current.get(key[2])
            group.current[key[2]] = new
            if not new.pending_revocation:
                self._revoking_since_ms.pop(soft_key, None)
            elif old is None or old.pending_revocation != new.pending_revocation:
                # KIP-848: the rebalance timeout runs from the moment a revocation is asked for.
                self._revoking_since_ms[soft_key] = self._clock()
        elif kind == "offset":
            tp = (key[2], key[3])
            if value is None:
                group.offsets.pop(tp, None)
            else:
                group.offsets[tp] = OffsetAndMetadata(
                    int(value["offset"]), str(value["metadata"]), int(value["commit_timestamp_ms"]))

    # --- helpers --------------------------------------------------------------------------

    def _group(self, group_id: str) -> Group:
        _validate_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"no consumer group {group_id!r}")
        return group

    def _response(self, member_id: str, epoch: int, assignment: frozenset[PartitionId]) -> HeartbeatResponse:
        return HeartbeatResponse(member_id, epoch, self.config.heartbeat_interval_ms, assignment)

    def _touch(self, group_id: str, member_id: str, now: int) -> None:
        """Note a heartbeat (soft state). A member that is not yet in the replicated state gets
        its session when its member record is replayed."""
        group = self._groups.get(group_id)
        if group is not None and member_id in group.members:
            self._last_heartbeat_ms[(group_id, member_id)] = now

    def _deadline(self, group: Group, member_id: str) -> int:
        key = (group.group_id, member_id)
        member = group.members[member_id]
        deadline = self._last_heartbeat_ms[key] + member.session_timeout_ms
        revoking_since = self._revoking_since_ms.get(key)
        if revoking_since is not None:
            deadline = min(deadline, revoking_since + member.rebalance_timeout_ms)
        return deadline

    def _is_alive(self, group_id: str, member_id: str, member: Member, current: CurrentAssignment, now: int) -> bool:
        """Heartbeated within its session and did not leave temporarily: its instance id is taken."""
        if current.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return False
        last = self._last_heartbeat_ms.get((group_id, member_id), now)
        return now < last + member.session_timeout_ms

    @staticmethod
    def _existing_member(change: _GroupChange, req: HeartbeatRequest) -> tuple[Member, CurrentAssignment]:
        member = change.members.get(req.member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"group {req.group_id!r} has no member {req.member_id!r} (it left, timed out or never joined); "
                "join with member_epoch 0")
        if req.instance_id is not None and req.instance_id != member.instance_id:
            raise InvalidConfigError(
                f"member {req.member_id!r} of group {req.group_id!r} joined with instance_id "
                f"{member.instance_id!r} and now sends {req.instance_id!r}; an instance id cannot change")
        return member, change.current_of(req.member_id)

    @staticmethod
    def _static_holder(change: _GroupChange, instance_id: str | None, member_id: str) -> str | None:
        if instance_id is None:
            return None
        for other in change.members.keys():
            member = change.members.get(other)
            if other != member_id and member is not None and member.instance_id == instance_id:
                return other
        return None

    @staticmethod
    def _check_assignor(change: _GroupChange, member_id: str, assignor: str) -> None:
        """KIP-848 lets members prefer different server assignors; raylog requires one per group
        so the target never depends on which member happened to join first."""
        for other in change.members.keys():
            if other != member_id:
                used = change.members.get(other).assignor  # type: ignore[union-attr]
                if used != assignor:
                    raise InvalidConfigError(
                        f"group {change.group_id!r} uses assignor {used!r}; member {member_id!r} asked for "
                        f"{assignor!r}, and all members of a group must use the same one")
                return

    def _remove_members(self, change: _GroupChange, member_ids: list[str], topics: Mapping[str, int]) -> None:
        """Leave or expiry: tombstones, a group epoch bump, and a new target for the rest."""
        for member_id in member_ids:
            change.remove_member(member_id)
        self._refresh_partition_metadata(change, topics)
        change.epoch += 1
        self._assign_if_behind(change)

    @staticmethod
    def _refresh_partition_metadata(change: _GroupChange, topics: Mapping[str, int]) -> bool:
        """Partition counts of the existing topics the members subscribe to; a change (a new
        topic matching a pattern, added partitions, a deleted topic) bumps the group epoch."""
        names: set[str] = set()
        patterns: set[str] = set()
        for member_id in change.members.keys():
            member = change.members.get(member_id)
            assert member is not None
            if member.subscribed_pattern is not None:
                patterns.add(member.subscribed_pattern)
            else:
                names.update(member.subscribed_topics or ())
        selected = {t for t in names if t in topics}
        for pattern in patterns:
            compiled = re.compile(pattern)
            selected.update(t for t in topics if compiled.fullmatch(t))
        metadata = {t: int(topics[t]) for t in sorted(selected)}
        if metadata == change.partition_metadata:
            return False
        change.partition_metadata = metadata
        return True

    @staticmethod
    def _assign_if_behind(change: _GroupChange) -> None:
        """Recompute the target when the group epoch is ahead of it, in the same handler."""
        if change.epoch <= change.target_epoch:
            return
        member_ids = change.members.keys()
        if member_ids:
            members = {m: change.members.get(m) for m in member_ids}
            assignor = ASSIGNORS[_group_assignor(members.values())]  # type: ignore[arg-type,index]
            topic_names = list(change.partition_metadata)
            subscriptions = {m: member.resolve(topic_names)  # type: ignore[union-attr]
                             for m, member in members.items()}
            previous = {m: change.target.get(m) or frozenset() for m in member_ids}
            target = assignor(subscriptions, change.partition_metadata, previous)
            for member_id in member_ids:
                if target[member_id] != previous[member_id]:
                    change.target[member_id] = target[member_id]
        change.target_epoch = change.epoch

    @staticmethod
    def _reconcile(change: _GroupChange, member_id: str, owned: frozenset[PartitionId] | None) -> CurrentAssignment:
        current = change.current_of(member_id)

        def held_by_others() -> frozenset[PartitionId]:
            held: set[PartitionId] = set()
            for other in change.current.keys():
                if other != member_id:
                    c = change.current_of(other)
                    held |= c.assigned
                    held |= c.pending_revocation
            return frozenset(held)

        new = reconcile(current, change.target.get(member_id) or frozenset(), change.target_epoch, owned,
                        held_by_others)
        if new != current or member_id not in change.current:
            change.current[member_id] = new
        return new

    def _validated_offsets(self, offsets: Mapping[tuple[str, int], tuple[int, str]]
                           ) -> list[tuple[PartitionId, int, str]]:
        entries = []
        for tp, value in offsets.items():
            tp = _partition_id(tp, "commit_offsets")
            try:
                offset, metadata = value
            except (TypeError, ValueError):
                raise InvalidOffsetError(
                    f"offset for {tp[0]}-{tp[1]} must be (offset, metadata), got {value!r}") from None
            _check_offset(offset, tp)
            if not isinstance(metadata, str):
                raise InvalidOffsetError(f"metadata for {tp[0]}-{tp[1]} must be a string, got {metadata!r}")
            size = len(metadata.encode())
            if size > self.config.offset_metadata_max_bytes:
                raise InvalidOffsetError(
                    f"metadata for {tp[0]}-{tp[1]} is {size} bytes; offset_metadata_max_bytes is "
                    f"{self.config.offset_metadata_max_bytes}")
            entries.append((tp, offset, metadata))
        return sorted(entries)


# --- validation --------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate_group_id(group_id: object) -> None:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError(f"group_id must be a non-empty string, got {group_id!r}")


def _check_offset(offset: object, tp: PartitionId) -> None:
    if not _is_int(offset) or offset < 0:  # type: ignore[operator]
        raise InvalidOffsetError(f"offset for {tp[0]}-{tp[1]} must be an int >= 0, got {offset!r}")


def _partition_id(value: object, what: str) -> PartitionId:
    try:
        topic, partition = value  # type: ignore[misc]
    except (TypeError, ValueError):
        raise InvalidPartitionError(f"{what}: expected a (topic, partition) pair, got {value!r}") from None
    validate_topic_name(topic)
    if not _is_int(partition) or partition < 0:
        raise InvalidPartitionError(f"{what}: partition of {topic!r} must be an int >= 0, got {partition!r}")
    return topic, partition


def _validate_heartbeat(req: HeartbeatRequest, config: GroupCoordinatorConfig) -> None:
    _validate_group_id(req.group_id)
    if not isinstance(req.member_id, str) or not req.member_id:
        raise UnknownMemberIdError(f"member_id must be a non-empty string (the client's uuid), got {req.member_id!r}")
    if not _is_int(req.member_epoch):
        raise InvalidConfigError(f"member_epoch must be an int, got {req.member_epoch!r}")
    if req.instance_id is not None and (not isinstance(req.instance_id, str) or not req.instance_id):
        raise InvalidConfigError(f"instance_id must be None or a non-empty string, got {req.instance_id!r}")
    if not _is_int(req.rebalance_timeout_ms) or req.rebalance_timeout_ms < 1:
        raise InvalidConfigError(f"rebalance_timeout_ms must be an int >= 1, got {req.rebalance_timeout_ms!r}")
    if (not _is_int(req.session_timeout_ms)
            or not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms):
        raise InvalidConfigError(
            f"session_timeout_ms must be an int in [{config.min_session_timeout_ms}, "
            f"{config.max_session_timeout_ms}], got {req.session_timeout_ms!r}")
    if req.subscribed_topics is not None and req.subscribed_pattern is not None:
        raise InvalidConfigError("give subscribed_topics or subscribed_pattern, not both")
    if req.subscribed_topics is not None:
        if isinstance(req.subscribed_topics, (str, bytes)) or not isinstance(req.subscribed_topics, (tuple, list)):
            raise InvalidConfigError(f"subscribed_topics must be a tuple of topic names, got {req.subscribed_topics!r}")
        for topic in req.subscribed_topics:
            validate_topic_name(topic)
    if req.subscribed_pattern is not None:
        if not isinstance(req.subscribed_pattern, str):
            raise InvalidConfigError(f"subscribed_pattern must be a string, got {req.subscribed_pattern!r}")
        try:
            re.compile(req.subscribed_pattern)
        except re.error as e:
            raise InvalidConfigError(
                f"subscribed_pattern {req.subscribed_pattern!r} is not a valid regex: {e}") from None
    if req.assignor is not None and req.assignor not in ASSIGNORS:
        raise InvalidConfigError(f"unknown assignor {req.assignor!r}; known: {', '.join(sorted(ASSIGNORS))}")
    if req.owned_partitions is not None and isinstance(req.owned_partitions, (str, bytes)):
        raise InvalidConfigError(f"owned_partitions must be (topic, partition) pairs, got {req.owned_partitions!r}")
    for name in ("client_id", "client_host"):
        if not isinstance(getattr(req, name), str):
            raise InvalidConfigError(f"{name} must be a string, got {getattr(req, name)!r}")


def _member_at_epoch(group: Group, member_id: str | None, member_epoch: int, doing: str) -> CurrentAssignment:
    """The current assignment of ``member_id``, which asks at ``member_epoch``: UnknownMemberIdError
    if the group has no such member, FencedMemberEpochError for an epoch the coordinator never
    gave it (it must rejoin), StaleMemberEpochError for one it has moved on from."""
    member = group.members.get(member_id) if member_id is not None else None
    if member is None:
        raise UnknownMemberIdError(f"group {group.group_id!r} has no member {member_id!r}; nothing {doing}")
    if not _is_int(member_epoch):
        raise InvalidConfigError(f"member_epoch must be an int, got {member_epoch!r}")
    current = group.current.get(member_id, _JOINING)
    if member_epoch > current.member_epoch:
        raise FencedMemberEpochError(
            f"member {member_id!r} of group {group.group_id!r} {doing} at epoch {member_epoch}, ahead of its "
            f"epoch {current.member_epoch}; it must rejoin")
    if member_epoch < current.member_epoch:
        raise StaleMemberEpochError(
            f"member {member_id!r} of group {group.group_id!r} {doing} at epoch {member_epoch}, behind its "
            f"epoch {current.member_epoch}")
    return current


def _check_member_epoch(req: HeartbeatRequest, current: CurrentAssignment,
                        owned: frozenset[PartitionId] | None) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: only the member's current epoch is accepted, or its
    previous one when it owns a subset of its assignment (the response that moved it to the
    new epoch may have been lost, and such a member cannot hold anything it should not)."""
    if req.member_epoch == current.member_epoch:
        return
    if (req.member_epoch == current.previous_member_epoch and req.member_epoch < current.member_epoch
            and owned is not None and owned <= current.assigned):
        return
    raise FencedMemberEpochError(
        f"member {req.member_id!r} of group {req.group_id!r} sent epoch {req.member_epoch}; its epoch is "
        f"{current.member_epoch}. It must give up its partitions and rejoin with epoch 0")


# --- record values ------------------------------------------------------------------------------


def _member_from_request(base: Member | None, req: HeartbeatRequest) -> Member:
    """The member as the request describes it; fields the request leaves None keep ``base``'s.
    The timeouts, client_id and client_host are taken at the join only: the request's defaults
    cannot say "unchanged" (Kafka's -1), so a later heartbeat that omits them must not reset them."""
    if req.subscribed_topics is not None:
        topics, pattern = tuple(sorted(set(req.subscribed_topics))), None
    elif req.subscribed_pattern is not None:
        topics, pattern = None, req.subscribed_pattern
    else:
        assert base is not None  # a join without a subscription was refused before
        topics, pattern = base.subscribed_topics, base.subscribed_pattern
    if base is None:
        return Member(req.instance_id, req.client_id, req.client_host, topics, pattern,
                      req.assignor or DEFAULT_ASSIGNOR, req.rebalance_timeout_ms, req.session_timeout_ms)
    return replace(base, subscribed_topics=topics, subscribed_pattern=pattern, assignor=req.assignor or base.assignor)


def _group_assignor(members: Iterable[Member]) -> str | None:
    for member in members:
        return member.assignor
    return None


def _partition_list(partitions: Iterable[PartitionId]) -> list[list]:
    return [[t, p] for t, p in sorted(partitions)]


def _partition_set(partitions: Iterable[list]) -> frozenset[PartitionId]:
    return frozenset((str(t), int(p)) for t, p in partitions)


def _member_value(member: Member) -> dict:
    return {
        "instance_id": member.instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topics": None if member.subscribed_topics is None else list(member.subscribed_topics),
        "subscribed_pattern": member.subscribed_pattern,
        "assignor": member.assignor,
        "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "session_timeout_ms": member.session_timeout_ms,
    }


def _member_from_value(value: dict) -> Member:
    topics = value["subscribed_topics"]
    return Member(value["instance_id"], value["client_id"], value["client_host"],
                  None if topics is None else tuple(topics), value["subscribed_pattern"], value["assignor"],
                  int(value["rebalance_timeout_ms"]), int(value["session_timeout_ms"]))


def _current_value(current: CurrentAssignment) -> dict:
    return {
        "member_epoch": current.member_epoch,
        "previous_member_epoch": current.previous_member_epoch,
        "state": current.state,
        "assigned": _partition_list(current.assigned),
        "pending_revocation": _partition_list(current.pending_revocation),
    }


def _current_from_value(value: dict) -> CurrentAssignment:
    return CurrentAssignment(int(value["member_epoch"]), int(value["previous_member_epoch"]), str(value["state"]),
                             _partition_set(value["assigned"]), _partition_set(value["pending_revocation"]))
