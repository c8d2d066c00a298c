"""GroupCoordinator: the actor that owns the consumer groups of one __consumer_offsets partition.

A thin shell around ``GroupCoordinatorState`` (group_state.py), in the shape
of Kafka's coordinator runtime: each request runs the state's handler, writes
the records it returns to this coordinator's partition of __consumer_offsets
(acks='all', so a commit survives what the topic's replication survives),
replays them, and only then answers. Requests are served one at a time (an
asyncio lock), so records reach the log in the order the state saw them. On
start (and after Ray restarts it) the coordinator reads its partition from the
beginning and replays every record, which compaction keeps to the last per
key, before it answers anything.

Fencing: the coordinator writes as an idempotent producer with a producer id
fixed per partition and an epoch one above the highest found in the log, so
when a coordinator comes back while an old one still runs (a zombie on a lost
node), the replica refuses the old one's writes (InvalidProducerEpochError)
and the old one stops serving. A paused coordinator is killed by the
controller, which pings it, and restarted by Ray.

A write whose outcome is unknown (its acks='all' wait timed out, the leader
moved while it was in flight) may be in the log. It stays *pending*: before
anything else is written, the same bytes (same producer sequence) are sent
again until the replica says where they are (a duplicate answer) or that it
appended them now, and only then are its records replayed. A write never
reuses a pending write's sequence for other records: the replica would answer
"duplicate" with the first write's offsets and the coordinator would
acknowledge records that are not in the log. When the replica no longer
knows the sequence (state lost in an unclean election), the coordinator
reloads its whole partition instead.

Timers (session timeouts, revocation timeouts) come from the state's
``next_deadline``; an idle coordinator with no members sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import ray

from actors import arguments as args
from actors.group_state import GroupCoordinatorState, HeartbeatRequest, Record
from actors.metrics import GROUP_METRICS_INTERVAL_S, GroupMetrics
from raylog.config import ClusterConfig
from raylog.errors import (
    ActorCallError, CoordinatorNotAvailableError, DuplicateSequenceError, FencedMemberEpochError,
    InvalidProducerEpochError, OutOfOrderSequenceError, RaylogError, UnknownMemberIdError,
)
from raylog.logs import configure_actor_logging, get_logger, log_event
from raylog.metadata import WATCH_INTERVAL_S
from raylog.naming import CONTROLLER_ACTOR_NAME, OFFSETS_TOPIC
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.ray_calls import translate
from raylog.storage import batch as record_batch
from raylog.storage.log import wall_clock_ms
from raylog.storage.producer_state import SEQUENCE_MASK

PRODUCER_ID_BASE = 1 << 62
"""Coordinator producer ids: PRODUCER_ID_BASE + partition. Clients draw theirs below 2**62."""
TOPICS_TTL_S = 1.0
"""How long the cluster's topic list (for pattern subscriptions and partition counts) is reused."""
RETRY_BACKOFF_S = 0.1
LEADER_WATCH_S = 1.0
"""A call to the offsets partition's leader unanswered this long has the leader looked up again,
then every WATCH_INTERVAL_S while it waits (as the clients' LeaderWatch does, raylog/metadata.py)."""
_REPLACED = object()

logger = get_logger(__name__)


class GroupCoordinator:
    def __init__(self, partition: int, cluster: dict):
        configure_actor_logging()
        self.partition = partition
        self.config = ClusterConfig(**cluster)
        self.state = GroupCoordinatorState(wall_clock_ms)
        self.producer_id = PRODUCER_ID_BASE + partition
        self._epoch = 0
        self._sequence = 0
        self._pending: tuple[np.ndarray, list[Record]] | None = None
        """A written batch whose outcome is unknown, and its records (see the module doc)."""
        self._loaded: asyncio.Task | None = None
        self._lock: asyncio.Lock | None = None
        self._timer = None
        self._leader = None
        self._leader_epoch = -1
        self._topics: tuple[float, dict] = (0.0, {})
        self._fenced: BaseException | None = None
        self.metrics = GroupMetrics()
        self._metrics_task: asyncio.Task | None = None
        self._reported_groups: set[str] = set()

    # --- start-up: replay the partition -----------------------------------------------------

    async def _ready(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._metrics_task = asyncio.get_running_loop().create_task(self._report_metrics_forever())
        if self._loaded is None or (self._loaded.done() and self._loaded.exception() is not None):
            # First call, or the last load failed (no leader, or a new leader not yet able to say
            # where its log ends): load again rather than fail every request for good.
            self._loaded = asyncio.get_running_loop().create_task(self._load())
        await asyncio.shield(self._loaded)
        if self._fenced is not None:
            raise CoordinatorNotAvailableError(
                f"coordinator {self.partition} was replaced by a newer one: {self._fenced}")

    def _controller(self):
        return ray.get_actor(CONTROLLER_ACTOR_NAME, namespace=self.config.namespace)

    async def _refresh_leader(self) -> None:
        description, leaders = await self._controller().topic_metadata.remote(OFFSETS_TOPIC)
        self._leader = leaders[self.partition]
        self._leader_epoch = description.partitions[self.partition].leader_epoch
        if self._leader is None:
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC}-{self.partition} has no leader now")

    async def _call_leader(self, method: str, *args, with_epoch: bool = False, **kwargs):
        """Call the offsets partition's leader, following it through leader changes. With
        ``with_epoch`` each attempt names the leader epoch of the leader it goes to (``leader_epoch=``),
        so a retry after a leader change is not fenced for the epoch the first attempt saw."""
        timeout_s = self.config.request_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._leader is None:
                    await self._refresh_leader()
                extra = {"leader_epoch": self._leader_epoch} if with_epoch else {}
                answer = await self._unless_replaced(getattr(self._leader, method).remote(*args, **kwargs, **extra),
                                                     self._leader_epoch)
                if answer is not _REPLACED:
                    return answer
                # Each replacement is a new leader epoch: the new leader gets a whole request timeout.
                self._leader, deadline = None, time.monotonic() + timeout_s
                continue
            except Exception as exc:  # noqa: BLE001 - sorted below
                err = translate(exc)
                if not getattr(err, "retriable", False) or time.monotonic() > deadline:
                    raise err from None
                self._leader = None
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _unless_replaced(self, ref, epoch: int):
        """The call's answer, or _REPLACED once the controller names a leader of a newer epoch while
        it waits. A paused leader is fenced after the session timeout and its lease lapsed before
        that, so it can acknowledge nothing: waiting for its answer only holds every request of the
        coordinator's groups until it wakes. The write is then resent, same sequence, to the new
        leader, whose producer state answers a duplicate."""
        call = asyncio.ensure_future(ref)
        try:
            wait_s = LEADER_WATCH_S
            while True:
                done, _ = await asyncio.wait({call}, timeout=wait_s)
                wait_s = WATCH_INTERVAL_S
                if done:
                    return call.result()
                try:
                    description, _ = await asyncio.wait_for(
                        self._controller().topic_metadata.remote(OFFSETS_TOPIC), LEADER_WATCH_S)
                except (asyncio.TimeoutError, ray.exceptions.RayError, ValueError):
                    continue  # the controller busy or restarting: look again
                if description.partitions[self.partition].leader_epoch > epoch:
                    return _REPLACED
        finally:
            call.cancel()

    async def _load(self) -> None:
        self.state = GroupCoordinatorState(wall_clock_ms)
        self._pending = None
        offset = (await self._call_leader("list_offsets", EARLIEST_TIMESTAMP))[0]
        end = (await self._call_leader("list_offsets", LATEST_TIMESTAMP))[0]
        highest_epoch = -1
        while offset < end:
            response = await self._call_leader("fetch", offset, 8 * 1024 * 1024, 0, 1)
            data = response[0]
            if len(data) == 0:
                break
            for batch in record_batch.iter_batches(data):
                if batch.producer_id == self.producer_id:
                    highest_epoch = max(highest_epoch, batch.producer_epoch)
                cols = batch.columns()
                for off, key, value in zip(batch.offsets(cols).tolist(), cols.keys.to_pylist(),
                                           cols.values.to_pylist()):
                    if off >= offset:
                        self.state.replay(Record.from_bytes(key, value))
                offset = batch.next_offset
        self._epoch = highest_epoch + 1
        self._sequence = 0
        self._schedule_timer()

    # --- writing records ------------------------------------------------------------------------

    async def _write(self, records: list[Record]) -> None:
        """Write records as the next batch of this coordinator's producer sequence, then replay them.
        On an unknown outcome the batch stays pending (and the error is raised)."""
        encoded = [r.to_bytes() for r in records]
        buf = record_batch.build([v for _, v in encoded], keys=[k for k, _ in encoded],
                                 timestamps_ms=wall_clock_ms(), producer_id=self.producer_id,
                                 producer_epoch=self._epoch, base_sequence=self._sequence)
        self._pending = (np.frombuffer(buf, dtype=np.uint8), records)
        await self._settle_pending()

    async def _settle_pending(self) -> None:
        """Send the pending batch (again) until the replica says where it is; then replay its records
        and move the sequence past it."""
        if self._pending is None:
            return
        buf, records = self._pending
        try:
            await self._call_leader("produce", buf, -1, timeout_ms=self.config.request_timeout_ms, with_epoch=True)
        except InvalidProducerEpochError as exc:
            self._fenced = exc
            log_event(logger, "coordinator_fenced", logging.WARNING, coordinator=self.partition,
                      producer_epoch=self._epoch, reason="newer_coordinator")
            raise CoordinatorNotAvailableError(
                f"coordinator {self.partition} was replaced by a newer one") from None
        except (OutOfOrderSequenceError, DuplicateSequenceError, ActorCallError) as exc:
            # The replica no longer knows this producer's sequences (an unclean election), or failed
            # in a way that says nothing of the batch: whether it is in the log can only be read there.
            self._loaded = None
            raise CoordinatorNotAvailableError(
                f"coordinator {self.partition} lost track of its last write ({exc}); reloading its partition") from None
        except RaylogError as exc:
            if exc.retriable:
                raise
            # Rejected for good (validation: never in the log): the replica counts its sequence as used.
            self._pending = None
            self._sequence = (self._sequence + len(records)) & SEQUENCE_MASK
            raise
        self._pending = None
        self._sequence = (self._sequence + len(records)) & SEQUENCE_MASK
        for record in records:
            self.state.replay(record)
        self._record_events(records)

    def _record_events(self, records: list[Record]) -> None:
        """Log and count the rebalances (group epoch bumps) a written batch holds."""
        removed: dict[str, list[str]] = {}
        for record in records:
            if record.key[0] == "member" and record.value is None:
                removed.setdefault(record.key[1], []).append(record.key[2])
        for record in records:
            if record.key[0] == "group" and record.value is not None:
                group = record.key[1]
                self.metrics.rebalance(group)
                members = next((g["member_count"] for g in self.state.list_groups() if g["group_id"] == group), 0)
                log_event(logger, "rebalance", group=group, group_epoch=record.value["epoch"], members=members,
                          removed_members=removed.get(group, []), coordinator=self.partition)

    async def _handle(self, handler):
        """Run a handler, persist its records, replay them, answer: one request at a time."""
        await self._ready()
        async with self._lock:
            await self._ready()  # a reload may have been asked for while this request waited
            await self._settle_pending()
            records, response = handler()
            if records:
                await self._write(records)
            self._schedule_timer()
            return response

    # --- timers -----------------------------------------------------------------------------------

    def _schedule_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.state.next_deadline()
        if deadline is not None:
            delay = max(0.0, (deadline - wall_clock_ms()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        asyncio.get_running_loop().create_task(self._expire())

    async def _expire(self) -> None:
        def expire():
            records = self.state.expire()
            for record in records:
                if record.key[0] == "member" and record.value is None:
                    log_event(logger, "member_expired", group=record.key[1], member=record.key[2],
                              reason="session_or_rebalance_timeout", coordinator=self.partition)
            return records, None

        try:
            await self._handle(expire)
        except RaylogError:
            await asyncio.sleep(RETRY_BACKOFF_S)
            self._schedule_timer()

    async def _cluster_topics(self) -> dict:
        fetched_at, topics = self._topics
        if time.monotonic() - fetched_at > TOPICS_TTL_S:
            topics = await self._controller().topic_partition_counts.remote()
            self._topics = (time.monotonic(), topics)
        return topics

    # --- requests (Kafka's names) ---------------------------------------------------------------

    async def heartbeat(self, request: dict) -> dict:
        """KIP-848's ConsumerGroupHeartbeat, as plain dicts over the wire."""
        req = _heartbeat_request(request)
        topics = await self._cluster_topics()
        try:
            response = await self._handle(lambda: self.state.heartbeat(req, topics))
        except (FencedMemberEpochError, UnknownMemberIdError) as exc:
            log_event(logger, "member_fenced", group=req.group_id, member=req.member_id,
                      member_epoch=req.member_epoch, error=type(exc).__name__, coordinator=self.partition)
            raise
        return {"member_id": response.member_id, "member_epoch": response.member_epoch,
                "heartbeat_interval_ms": response.heartbeat_interval_ms,
                "assignment": sorted(list(tp) for tp in response.assignment)}

    async def commit_offsets(self, group_id: str, member_id: str | None, member_epoch: int,
                             offsets: list) -> None:
        """``offsets``: [[topic, partition, offset, metadata], ...]."""
        args.optional_text("member_id", member_id)
        args.integer("member_epoch", member_epoch, -2, args.INT32_MAX)
        request = {(args.text("topic", t, 249), args.integer("partition", p, 0, args.INT32_MAX)):
                   (args.integer("offset", o, 0), args.text("metadata", m, 4096, empty=True))
                   for t, p, o, m in args.rows("offsets", offsets, 4)}
        await self._handle(lambda: self.state.commit_offsets(group_id, member_id, member_epoch, request))

    async def fetch_offsets(self, group_id: str, partitions: list | None = None, member_id: str | None = None,
                            member_epoch: int = -1) -> list:
        """[[topic, partition, offset, metadata], ...] committed; a member asking names itself and
        its epoch (group_state.GroupCoordinatorState.fetch_offsets). Answered in turn with the
        writes: a commit that arrived first (one a listener stopped waiting for included) is
        stored before this reads, so a partition's next owner never starts from an older offset
        and commits it over a newer one (tests/unit/actors/test_coordinator_reads_after_writes.py)."""
        wanted = None if partitions is None else [
            (args.text("topic", t, 249), args.integer("partition", p, 0, args.INT32_MAX))
            for t, p in args.rows("partitions", partitions, 2)]
        args.optional_text("member_id", member_id)
        args.integer("member_epoch", member_epoch, -2, args.INT32_MAX)
        found = await self._handle(lambda: ([], self.state.fetch_offsets(group_id, wanted, member_id, member_epoch)))
        return [[t, p, o, m] for (t, p), (o, m) in sorted(found.items())]

    async def describe_group(self, group_id: str) -> dict:
        await self._ready()
        return self.state.describe_group(group_id)

    async def list_groups(self) -> list[dict]:
        await self._ready()
        return self.state.list_groups()

    async def delete_group(self, group_id: str) -> None:
        await self._handle(lambda: self.state.delete_group(group_id))

    async def reset_offsets(self, group_id: str, offsets: list) -> None:
        """``offsets``: [[topic, partition, offset or None], ...] (None deletes the commit)."""
        request = {(args.text("topic", t, 249), args.integer("partition", p, 0, args.INT32_MAX)):
                   args.optional_integer("offset", o, 0) for t, p, o in args.rows("offsets", offsets, 3)}
        await self._handle(lambda: self.state.reset_offsets(group_id, request))

    async def ping(self) -> int:
        import os

        return os.getpid()

    # --- metrics ----------------------------------------------------------------------------------

    async def _report_metrics_forever(self) -> None:
        while True:
            await asyncio.sleep(GROUP_METRICS_INTERVAL_S)
            try:
                await self._report_metrics()
            except Exception as exc:  # noqa: BLE001 - the controller restarts: report next round
                logger.debug("group metrics not reported: %r", exc)

    async def _report_metrics(self) -> None:
        """Set each group's members gauge and, per committed partition, its lag behind the high
        watermark the partition's leader last sent the controller."""
        groups = {g["group_id"]: g["member_count"] for g in self.state.list_groups()}
        for group in self._reported_groups - set(groups):
            self.metrics.members(group, 0)
        self._reported_groups = set(groups)
        committed = {}
        for group, count in groups.items():
            self.metrics.members(group, count)
            committed[group] = self.state.fetch_offsets(group, None)
        topics = sorted({t for offsets in committed.values() for t, _ in offsets})
        if not topics:
            return
        high_watermarks = await self._controller().high_watermarks.remote(topics)
        for group, offsets in committed.items():
            for (topic, p), (offset, _) in offsets.items():
                hw = high_watermarks.get((topic, p))
                if hw is not None:
                    self.metrics.lag(group, topic, p, max(0, hw - offset))


_HEARTBEAT_FIELDS = frozenset(HeartbeatRequest.__dataclass_fields__)


def _heartbeat_request(request) -> HeartbeatRequest:
    """A HeartbeatRequest from the plain dict the client sends (lists for tuples)."""
    request = dict(args.mapping("heartbeat request", request, ("group_id", "member_id", "member_epoch"),
                                _HEARTBEAT_FIELDS))
    args.text("member_id", request["member_id"])
    args.integer("member_epoch", request["member_epoch"], -2, args.INT32_MAX)
    for name in ("instance_id", "subscribed_pattern", "assignor"):
        args.optional_text(name, request.get(name))
    for name in ("client_id", "client_host"):
        args.text(name, request.get(name, ""), empty=True)
    for name in ("rebalance_timeout_ms", "session_timeout_ms"):
        if name in request:
            args.integer(name, request[name], 1, args.INT32_MAX)
    if request.get("subscribed_topics") is not None:
        request["subscribed_topics"] = tuple(args.text("topic", t, 249)
                                             for t in args.sequence("subscribed_topics", request["subscribed_topics"]))
    if request.get("owned_partitions") is not None:
        request["owned_partitions"] = tuple(
            (args.text("topic", t, 249), args.integer("partition", p, 0, args.INT32_MAX))
            for t, p in args.rows("owned_partitions", request["owned_partitions"], 2))
    return HeartbeatRequest(**request)
