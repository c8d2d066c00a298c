"""Pure replication state of one partition replica: role, epochs, ISR, high watermark.

No Ray, no I/O and no asyncio: the replica actor feeds it events (appends,
follower fetches, the controller's decisions) and acts on what it returns;
unit tests drive it directly with a fake clock.

Kafka's model (ReplicaManager, Partition, Replica):

- The **leader** learns each follower's log end offset from the offset the
  follower fetches at. The **high watermark** is the smallest log end offset
  over the ISR, the leader's included; it never moves backwards on the leader.
  Consumers read only below it, so no consumer sees a record that a leader
  change could remove.
- The **ISR** is owned by the controller. The leader *proposes* changes
  (``isr_to_propose``): a follower that caught up to the high watermark and to
  the start of the current leader epoch joins; a follower that has not caught
  up within replica_lag_time_max_ms leaves. While a proposal is pending the
  high watermark counts the *maximal* ISR (committed ISR plus pending joiners,
  leavers still included: KIP-497), so a proposal never lets it move too far.
- "Caught up", as Kafka's Replica.updateFetchState: a fetch at or past the
  leader's log end makes the follower caught up now; a fetch at or past where
  the leader's log ended at the follower's previous fetch makes it caught up
  as of that previous fetch.
- The high watermark moves only while the ISR holds at least ``min_insync_replicas`` (KIP-966):
  a member that leaves an ISR below that minimum then holds every committed record, so the
  controller may elect it (its *eligible leader replicas*) when no ISR member is left.
- A **follower** keeps its high watermark at min(the leader's, its own end).

Invariant: log_start_offset <= high_watermark <= log_end_offset (the leader's own).
"""

from __future__ import annotations

from typing import Callable

from raylog.storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochCache

LEADER, FOLLOWER, NONE = "leader", "follower", "none"


class ReplicaState:
    def __init__(self, replica_id: int, log_start_offset: int, log_end_offset: int, high_watermark: int,
                 clock: Callable[[], int]):
        self.replica_id = replica_id
        self._now = clock
        self.role = NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        self.pending_isr: frozenset[int] | None = None
        """An ISR proposed to the controller and not yet answered."""
        self.ineligible: frozenset[int] = frozenset()
        """Replicas the controller adds to no ISR for now (on a draining node: KIP-841)."""
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = max(log_start_offset, min(high_watermark, log_end_offset))
        self.epoch_start_offset = log_end_offset
        """Where the current leader epoch began (the leader's log end when it was elected)."""
        self.min_insync_replicas = 1
        """The topic's: below it in the ISR, the high watermark stays where it is."""
        self.follower_end: dict[int, int] = {}
        self.caught_up_ms: dict[int, int] = {}
        self._last_fetch_leader_end: dict[int, int] = {}
        self._last_fetch_ms: dict[int, int] = {}

    # --- the controller's decisions -------------------------------------------------------

    def is_newer(self, leader_epoch: int, partition_epoch: int) -> bool:
        """Whether a partition state from the controller is newer than the one held."""
        return (leader_epoch, partition_epoch) > (self.leader_epoch, self.partition_epoch)

    def set_ineligible(self, ineligible, leader_epoch: int, partition_epoch: int) -> bool:
        """The replicas the controller would not add to the ISR, as of a state no older than the one
        held (a drain starts and ends without a new epoch); returns whether one became eligible. A
        leader that proposed them anyway would be answered with the same ISR at a new epoch, and
        propose again at once: a storm of metadata records for as long as the drain lasts."""
        if (leader_epoch, partition_epoch) < (self.leader_epoch, self.partition_epoch):
            return False
        ineligible = frozenset(ineligible)
        freed = bool(self.ineligible - ineligible)
        self.ineligible = ineligible
        return freed

    def become_leader(self, leader_epoch: int, partition_epoch: int, replicas, isr) -> None:
        now = self._now()
        new_epoch = leader_epoch != self.leader_epoch or self.role != LEADER
        self.role, self.leader_id = LEADER, self.replica_id
        self.leader_epoch, self.partition_epoch = leader_epoch, partition_epoch
        self.replicas, self.isr, self.pending_isr = tuple(replicas), frozenset(isr), None
        if new_epoch:
            self.epoch_start_offset = self.log_end_offset
            # Followers' positions are unknown until they fetch; the ISR members get a full lag
            # window to do so before the leader proposes to drop them.
            self.follower_end = {r: -1 for r in self.replicas if r != self.replica_id}
            self.caught_up_ms = {r: now for r in self.replicas if r != self.replica_id}
            self._last_fetch_leader_end, self._last_fetch_ms = {}, {}
        else:
            for r in self.replicas:
                if r != self.replica_id:
                    self.follower_end.setdefault(r, -1)
                    self.caught_up_ms.setdefault(r, now)
        self._advance()

    def become_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas, isr) -> None:
        self.role, self.leader_id = FOLLOWER, leader_id
        self.leader_epoch, self.partition_epoch = leader_epoch, partition_epoch
        self.replicas, self.isr, self.pending_isr = tuple(replicas), frozenset(isr), None
        self.follower_end, self.caught_up_ms = {}, {}

    def become_none(self) -> None:
        """Offline or deleted: neither lead nor follow until the controller says."""
        self.role, self.leader_id = NONE, -1

    def on_isr_committed(self, isr: list[int], partition_epoch: int, replicas: list[int] | None = None) -> bool:
        """The controller's answer to this leader's proposal; returns whether it was applied. An
        answer no newer than the state held is dropped: a push of a later change (Ray does not order
        calls) may have arrived first, and applying the answer would roll the ISR back."""
        if partition_epoch <= self.partition_epoch:
            return False
        self.isr, self.partition_epoch, self.pending_isr = frozenset(isr), partition_epoch, None
        if replicas is not None:
            self.replicas = tuple(replicas)
        self._advance()
        return True

    def on_isr_refused(self) -> None:
        self.pending_isr = None

    # --- leader events ----------------------------------------------------------------------

    def maximal_isr(self) -> frozenset[int]:
        return self.isr | self.pending_isr if self.pending_isr is not None else self.isr

    def on_leader_append(self, log_end_offset: int) -> bool:
        """The leader's log grew; returns whether the high watermark moved."""
        self.log_end_offset = log_end_offset
        return self._advance()

    def on_follower_fetch(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetched at ``fetch_offset`` (its log end); returns whether the HW moved."""
        now = self._now()
        if fetch_offset >= self.log_end_offset:
            self.caught_up_ms[replica_id] = now
        elif fetch_offset >= self._last_fetch_leader_end.get(replica_id, 1 << 62):
            self.caught_up_ms[replica_id] = max(self.caught_up_ms.get(replica_id, 0),
                                                self._last_fetch_ms[replica_id])
        self._last_fetch_leader_end[replica_id] = self.log_end_offset
        self._last_fetch_ms[replica_id] = now
        self.follower_end[replica_id] = fetch_offset
        return self._advance()

    def isr_to_propose(self, lag_time_max_ms: int) -> frozenset[int] | None:
        """The ISR the leader should ask the controller for now, or None (no change, or a
        proposal already pending)."""
        if self.role != LEADER or self.pending_isr is not None:
            return None
        now = self._now()
        isr = set(self.isr)
        for r in self.replicas:
            if r == self.replica_id:
                continue
            end = self.follower_end.get(r, -1)
            lagging = now - self.caught_up_ms.get(r, now) > lag_time_max_ms
            # Joining needs a recent catch-up too: a follower that stopped fetching while nothing was
            # written still sits at the high watermark, and must not flap back in on every check.
            if r not in isr and r not in self.ineligible and not lagging and end >= self.high_watermark \
                    and end >= self.epoch_start_offset and end >= 0:
                isr.add(r)
            elif r in isr and lagging:
                isr.discard(r)
        isr.add(self.replica_id)
        return frozenset(isr) if isr != set(self.isr) else None

    def propose(self, isr: frozenset[int]) -> None:
        self.pending_isr = isr

    def next_lag_deadline_ms(self, lag_time_max_ms: int) -> int | None:
        """When an ISR follower would next count as lagging, if nothing changes."""
        times = [self.caught_up_ms.get(r, 0) for r in self.isr if r != self.replica_id]
        return min(times) + lag_time_max_ms + 1 if times and self.role == LEADER else None

    def _advance(self) -> bool:
        if self.role != LEADER or len(self.isr) < self.min_insync_replicas:
            return False
        ends = [self.log_end_offset]
        for r in self.maximal_isr():
            if r != self.replica_id:
                ends.append(self.follower_end.get(r, -1))
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    # --- follower and log events ----------------------------------------------------------

    def on_follower_append(self, log_end_offset: int, leader_high_watermark: int) -> None:
        self.log_end_offset = log_end_offset
        self.high_watermark = max(self.log_start_offset, min(leader_high_watermark, log_end_offset))

    def on_truncate(self, log_start_offset: int, log_end_offset: int) -> None:
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = max(log_start_offset, min(self.high_watermark, log_end_offset))

    def on_log_start_moved(self, log_start_offset: int) -> None:
        self.log_start_offset = log_start_offset
        self.high_watermark = max(self.high_watermark, log_start_offset)


def out_of_range_target(log_end_offset: int, leader_log_start: int, leader_log_end: int) -> tuple[str, int] | None:
    """What a follower whose fetch at its log end was out of range at the leader must do (Kafka's
    ReplicaFetcherThread.handleOutOfRangeError): ``("start_at", offset)`` when the leader's log starts
    above our end (retention or delete_records removed what we lack: start an empty log there);
    ``("truncate_to", offset)`` when our log runs past the leader's end (an unclean election elected a
    replica with less): cut to it, or the next fetch fails the same way until the leader's log grows
    past our end and the two logs then differ for good; None when the offset is in range by now
    (re-check by epoch)."""
    if log_end_offset < leader_log_start:
        return "start_at", leader_log_start
    if 0 <= leader_log_end < log_end_offset:
        return "truncate_to", leader_log_end
    return None


def truncation_offset(epochs: LeaderEpochCache, log_end_offset: int, latest_epoch: int, leader_epoch: int,
                      leader_end: int, high_watermark: int) -> int:
    """Where a follower must cut its log, from the leader's answer for the follower's latest epoch
    (KIP-101 with KIP-279's refinement). The leader ended ``leader_epoch`` (the largest epoch it
    knows that is <= ours) at ``leader_end``; if that is an older epoch than our latest, our own log
    also ended it somewhere, and the smaller of the two ends is where the logs agree."""
    if leader_epoch == UNDEFINED_EPOCH:
        return min(high_watermark, log_end_offset)  # the leader knows none of our epochs (Kafka's fallback)
    if leader_epoch < latest_epoch:
        _, ours = epochs.end_offset_for(leader_epoch, log_end_offset)
        return min(leader_end, ours, log_end_offset)
    return min(leader_end, log_end_offset)
