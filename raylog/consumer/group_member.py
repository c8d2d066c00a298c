"""GroupMember: a consumer's side of KIP-848 consumer group membership.

Two threads share it. A heartbeat thread talks to the group's coordinator
every heartbeat interval (sooner when something changed): it reports the
partitions the consumer owns right now and learns the partitions it may own
(its whole assignment, not a delta) and its member epoch. The poll thread,
inside ``poll()``, reconciles, as Kafka's consumers do: it first gives up
partitions it may no longer own (committing their positions if auto-commit is
on, then ``on_partitions_revoked``, then it stops fetching them), and takes
the ones it was given (positions from the committed offsets, then
``on_partitions_assigned``); each step wakes the heartbeat thread so the
coordinator learns it at once. There is no group-wide barrier: partitions
that do not move are fetched throughout.

If the coordinator fences the member (its epoch is stale: it missed its
session, or took too long to give up partitions), the partitions it owned are
*lost*: ``on_partitions_lost`` runs (no commit: someone else may own them now)
and the member rejoins with epoch 0. A consumer that does not call poll() for
max_poll_interval_ms leaves the group (its partitions move on) and rejoins at
its next poll, its partitions then counted lost. ``close()`` leaves at once;
a static member (group_instance_id) leaves "temporarily" (epoch -2), so a
restart within session_timeout_ms gets the same partitions back.

The coordinator of a group is the GroupCoordinator actor of __consumer_offsets
partition ``coordinator_partition(group_id, partitions)`` (Kafka's mapping).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Iterable

import ray

from raylog import ray_calls
from raylog.config import ConsumerConfig
from raylog.errors import (
    CommitFailedError, CoordinatorNotAvailableError, FencedMemberEpochError, RaylogError, UnknownMemberIdError,
)
from raylog.naming import coordinator_actor_name
from raylog.producer.partitioner import coordinator_partition
from raylog.records import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
RETRY_BACKOFF_S = 0.2


class ConsumerRebalanceListener:
    """Callbacks that run inside poll() when the consumer's partitions change (kafka-python's and
    Kafka's names). Override what you need."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """These partitions move to another member: finish with them (commit, flush) now."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """These partitions are now this consumer's; fetching starts at their committed offsets."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """These partitions were taken away without a revocation (the member was fenced or left
        after max_poll_interval_ms); another member may already own them, so do not commit.
        By default the same as a revocation, as in Kafka."""
        self.on_partitions_revoked(lost)


def coordinator_for(cluster, group_id: str, timeout_s: float):
    """The coordinator actor owning ``group_id``, creating __consumer_offsets if needed."""
    partitions = getattr(cluster, "offsets_partitions", None)
    if partitions is None:
        partitions = ray_calls.get(cluster.controller.ensure_offsets_topic.remote(), timeout_s * 4)
        cluster.offsets_partitions = partitions
    name = coordinator_actor_name(coordinator_partition(group_id, partitions))
    try:
        return ray.get_actor(name, namespace=cluster.config.namespace)
    except ValueError:
        cluster.offsets_partitions = None
        raise CoordinatorNotAvailableError(f"group coordinator {name} is not running") from None


class GroupMember:
    def __init__(self, cluster, config: ConsumerConfig, listener: ConsumerRebalanceListener | None):
        self.cluster = cluster
        self.config = config
        self.group_id = config.group_id
        self.listener = listener or ConsumerRebalanceListener()
        self.member_id = uuid.uuid4().hex
        self.member_epoch = JOIN_EPOCH
        """The coordinator's latest answer; moved by the heartbeat thread at any time."""
        self.poll_epoch = JOIN_EPOCH
        """The member epoch ``owned`` was reconciled to: what the application's last poll fetched
        under. A heartbeat may already have moved ``member_epoch`` (or fenced the member)."""
        self.owned: set[TopicPartition] = set()
        """What the consumer fetches now; changed only by the poll thread (under the lock)."""
        self.topics: tuple[str, ...] | None = None
        self.pattern: str | None = None
        self._target: set[TopicPartition] | None = None
        self._lost = False
        self._left = False
        self._subscription_sent = False
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_poll = time.monotonic()
        self._interval_s = self._cap_interval(config.heartbeat_interval_ms / 1000)
        self._timeout_s = config.request_timeout_ms / 1000
        self._coordinator = None
        self._thread: threading.Thread | None = None
        self._client_host = ray.get_runtime_context().get_node_id()
        actor = ray.get_runtime_context().get_actor_id()
        self._client_id = f"{config.client_id}/{'actor ' + actor[:12] if actor else 'driver'}/pid {os.getpid()}"

    def _cap_interval(self, seconds: float) -> float:
        # At least three heartbeats per session, whatever the coordinator suggests.
        return min(seconds, self.config.heartbeat_interval_ms / 1000, self.config.session_timeout_ms / 3000)

    # --- subscription ---------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | None, pattern: str | None) -> None:
        with self._lock:
            self.topics = tuple(topics) if topics is not None else None
            self.pattern = pattern
            self._subscription_sent = False
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"raylog-heartbeat-{self.group_id}", daemon=True)
            self._thread.start()
        self._wake.set()

    # --- the heartbeat thread ---------------------------------------------------------------

    def _coordinator_handle(self):
        self.cluster.session.check()
        if self._coordinator is None:
            self._coordinator = coordinator_for(self.cluster, self.group_id, self._timeout_s)
        return self._coordinator

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.cluster.session.alive():
                # Ray was shut down under an open consumer: another call would start a new local Ray.
                # The next poll() raises why; the thread ends.
                self._error = self.cluster.session.ended()
                return
            if not self._left and time.monotonic() - self._last_poll > self.config.max_poll_interval_ms / 1000:
                # The application stopped polling: leave, so its partitions move to members that poll.
                self._send_leave(LEAVE_EPOCH)
                with self._lock:
                    self._left = True
                    self._lost = True
                    self._target = None
                log.warning("consumer %s left group %r: poll() was not called for max_poll_interval_ms (%d ms); "
                            "it rejoins at its next poll", self.member_id, self.group_id,
                            self.config.max_poll_interval_ms)
            if not self._left:
                try:
                    self._heartbeat()
                except (FencedMemberEpochError, UnknownMemberIdError) as exc:
                    log.warning("consumer %s of group %r was fenced (%s); rejoining", self.member_id,
                                self.group_id, exc)
                    with self._lock:
                        self.member_epoch = JOIN_EPOCH
                        self._lost = True
                        self._target = None
                        self._subscription_sent = False
                    continue
                except RaylogError as exc:
                    if not exc.retriable:
                        self._error = exc
                    self._forget_coordinator()
                    self._stop.wait(RETRY_BACKOFF_S)
                    continue
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def _heartbeat(self) -> None:
        with self._lock:
            request = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self.member_epoch,
                       "owned_partitions": sorted([tp.topic, tp.partition] for tp in self.owned)}
            if not self._subscription_sent:
                request.update(subscribed_topics=list(self.topics) if self.topics is not None else None,
                               subscribed_pattern=self.pattern)
            if self.member_epoch == JOIN_EPOCH:
                request.update(instance_id=self.config.group_instance_id,
                               rebalance_timeout_ms=self.config.max_poll_interval_ms,
                               session_timeout_ms=self.config.session_timeout_ms,
                               assignor=self.config.group_remote_assignor,
                               subscribed_topics=list(self.topics) if self.topics is not None else None,
                               subscribed_pattern=self.pattern, client_id=self._client_id,
                               client_host=self._client_host)
            sent_subscription = not self._subscription_sent
        response = ray_calls.get(self._coordinator_handle().heartbeat.remote(request), self._timeout_s)
        with self._lock:
            self.member_epoch = response["member_epoch"]
            self._target = {TopicPartition(t, p) for t, p in response["assignment"]}
            self._interval_s = self._cap_interval(response["heartbeat_interval_ms"] / 1000)
            if sent_subscription:
                self._subscription_sent = True

    def _send_leave(self, epoch: int) -> None:
        request = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                   "instance_id": self.config.group_instance_id}
        try:
            ray_calls.get(self._coordinator_handle().heartbeat.remote(request), self._timeout_s)
        except RaylogError as exc:
            log.info("leaving group %r: %s (the session timeout removes the member instead)", self.group_id, exc)

    # --- the poll thread ------------------------------------------------------------------------

    def poll_tick(self, consumer) -> None:
        """Called at the start of every poll(): note that the application polls, rejoin after a
        max_poll_interval leave, and reconcile the assignment."""
        self._last_poll = time.monotonic()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._left:
            with self._lock:
                self._left = False
                self.member_epoch = JOIN_EPOCH
                self._subscription_sent = False
            self._wake.set()
        self.reconcile(consumer)

    def reconcile(self, consumer) -> None:
        with self._lock:
            lost, self._lost = self._lost, False
            target = None if self._target is None else set(self._target)
            epoch = self.member_epoch
        changed = False
        if lost and self.owned:
            gone = set(self.owned)
            consumer._release(gone)
            with self._lock:
                self.owned -= gone
            self.listener.on_partitions_lost(gone)
            changed = True
        if target is not None:
            revoke = self.owned - target
            if revoke:
                if self.config.enable_auto_commit:
                    try:
                        # Behind any auto-commit still queued, which holds older positions.
                        consumer._commit_ordered(consumer._positions(revoke))
                    except RaylogError as exc:
                        log.warning("committing revoked partitions of group %r failed: %s", self.group_id, exc)
                self.listener.on_partitions_revoked(revoke)
                consumer._release(revoke)
                with self._lock:
                    self.owned -= revoke
                changed = True
        # What is owned now is part of the assignment at ``epoch`` (or nothing, when lost).
        self.poll_epoch = epoch
        if target is not None:
            add = target - self.owned
            if add:
                committed = self.fetch_committed(add)
                consumer._acquire(add, {tp: om.offset for tp, om in committed.items()})
                with self._lock:
                    self.owned |= add
                self.listener.on_partitions_assigned(add)
                changed = True
        if changed:
            self._wake.set()

    # --- offsets --------------------------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], as_member: bool = True,
               retry_s: float = 0.0) -> None:
        """Commit ``offsets``; CommitFailedError when the coordinator refuses (fenced or stale epoch,
        or a partition this member no longer owns). With ``retry_s`` a retriable error (the
        coordinator restarting, moving or not answering) is tried again, the coordinator looked up
        anew, until ``retry_s`` has passed, as Kafka's commitSync does within its timeout."""
        if not offsets:
            return
        payload = [[tp.topic, tp.partition, om.offset, om.metadata] for tp, om in offsets.items()]
        # Without retries the one attempt has the whole request timeout.
        deadline = time.monotonic() + (retry_s or self._timeout_s)

        def attempt() -> None:
            # Each attempt names the member's epoch as it is then, as Kafka's retries carry the
            # current generation: a rebalance meanwhile gets the refusal the coordinator gives.
            with self._lock:
                member_id = self.member_id if as_member else None
                epoch = self.member_epoch if as_member else -1
            timeout_s = max(ray_calls.RETRY_BACKOFF_S, min(self._timeout_s, deadline - time.monotonic()))
            try:
                ray_calls.get(self._coordinator_handle().commit_offsets.remote(self.group_id, member_id, epoch,
                                                                               payload), timeout_s)
            except (FencedMemberEpochError, UnknownMemberIdError) as exc:
                raise CommitFailedError(f"group {self.group_id!r} refused the commit: {exc}") from None

        ray_calls.with_retries(attempt, retry_s, on_retry=self._forget_coordinator)

    def _forget_coordinator(self) -> None:
        self._coordinator = None

    def fetch_committed(self, partitions: Iterable[TopicPartition],
                        timeout_s: float | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        wanted = [[tp.topic, tp.partition] for tp in partitions]
        rows = ray_calls.get(self._coordinator_handle().fetch_offsets.remote(self.group_id, wanted),
                             self._timeout_s if timeout_s is None else timeout_s)
        return {TopicPartition(t, p): OffsetAndMetadata(o, m) for t, p, o, m in rows}

    # --- leaving --------------------------------------------------------------------------------

    def close(self, consumer) -> None:
        """Leave the group at once (a static member leaves temporarily, keeping its partitions
        for session_timeout_ms) and stop heartbeating."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout_s)
            epoch = STATIC_LEAVE_EPOCH if self.config.group_instance_id else LEAVE_EPOCH
            if (self.member_epoch != JOIN_EPOCH or self.owned) and self.cluster.session.alive():
                self._send_leave(epoch)
        consumer._release(set(self.owned))
        self.owned.clear()
