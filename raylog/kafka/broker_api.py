"""The Kafka APIs a listener serves, answered with raylog's own client and replica calls.

One BrokerApi per listener. Requests arrive as kio entities (raylog/kafka/frames.py) and are
answered as kio entities of the version the client asked for: ``_make`` fills the fields that
version has from one set of values, so one handler serves every version of an API.

Produce converts each Kafka batch into a raylog batch (raylog/kafka/record_batch.py) and appends
it through the partition leader's actor with the client's acks; Fetch reads the leader's batches
and converts them back. A listener answers for every partition: Metadata names it leader of
each, and it forwards to the leader replica's actor wherever it runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import functools
import logging
import random
import time
import uuid
from typing import Callable

from kio.schema.errors import ErrorCode

from raylog import errors, produce_channel, ray_calls
from raylog.config import ASSIGNORS
from raylog.kafka import frames
from raylog.kafka import record_batch as kafka_batches
from raylog.kafka.classic_groups import ClassicGroups
from raylog.kafka.error_codes import error_code
from raylog.metadata import TopicInfo
from raylog.naming import INTERNAL_TOPICS

logger = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)
MAX_WAIT_MS = 30_000
"""A fetch's max_wait is capped here (Kafka's clients ask 500 ms; kcat 100 ms)."""
_CLIENT: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("kafka_client", default=("", ""))
"""(client id, host) of the request being answered: each connection is its own asyncio task."""
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
"""Kafka's config resource types."""
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
"""Kafka's config sources."""
SET, DELETE = 0, 1
"""IncrementalAlterConfigs' operations (APPEND 2 and SUBTRACT 3 are for list configs)."""
BROKERS_MAX_AGE_S = 2.0
"""The listeners' addresses are asked of the controller again after this long."""
GROUP_APIS = frozenset({8, 9, 11, 12, 13, 14, 15, 42, 47, 68, 69})
"""The APIs only the group-coordinating listener answers (others say NOT_COORDINATOR). ListGroups
is not one: admin clients ask every broker for the groups it coordinates, and the others have none."""
METADATA_MAX_AGE_S = 1.0
"""A partition's leader is looked up again after this long, or at once after a leadership error."""
COORDINATOR_RETRY_S = 0.2
"""An OffsetFetch tries a restarting coordinator again after this long."""
MAX_GROUPS_PER_REQUEST = 1000
"""Groups one ConsumerGroupDescribe or OffsetFetch answers for (each is a call to raylog's
coordinator); the rest of a request with more get INVALID_REQUEST rather than hold its connection
for minutes."""
CHANNEL_LOOKUP_S = 1.0
"""How long a produce or fetch waits for its leader's location (its same-node channel) before it
goes by Ray call; a paused leader holds up its own partition only, and only that long."""
CHANNEL_RECHECK_S = 5.0
"""A partition whose leader had no same-node channel is looked at again this often."""
MAX_CHANNELS = 64
"""Same-node channels a listener keeps open for produces, and as many for fetches (each is a socket
and two threads): partitions beyond them use Ray calls."""


_item, _make = frames.item_type, frames.make


class SubmitOrder:
    """One connection's produce requests, answered concurrently, issue their appends in the order
    they came: a request's appends go to the leaders only once every earlier request has issued
    its own (or ended without). That keeps a partition's batches in the producer's order (an
    idempotent producer's sequence numbers) while one request's append runs and the next one's
    batches are decoded."""

    def __init__(self):
        self._tickets = 0
        self._issued = 0
        """Requests below this ticket have issued their appends or ended."""
        self._ended: set[int] = set()
        self._waiting: dict[int, asyncio.Future] = {}
        self.via: dict[tuple[str, int], produce_channel.ProduceChannel | None] = {}
        """(topic, partition) -> how this connection's last append there went: a same-node channel,
        or None for a Ray call."""
        self.appending: dict[tuple[str, int], int] = {}
        """(topic, partition) -> this connection's appends there not answered yet."""
        self._quiet = asyncio.Condition()

    def ticket(self) -> int:
        """A place in line, taken in the order the requests came."""
        self._tickets += 1
        return self._tickets - 1

    async def turn(self, ticket: int) -> None:
        if self._issued < ticket:
            waiter = self._waiting[ticket] = asyncio.get_running_loop().create_future()
            await waiter

    def done(self, ticket: int) -> None:
        """``ticket`` has issued its appends, or will issue none; safe to call twice."""
        if ticket < self._issued:
            return
        self._ended.add(ticket)
        while self._issued in self._ended:
            self._ended.remove(self._issued)
            self._issued += 1
        waiter = self._waiting.pop(self._issued, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def settle(self, keys: list[tuple[str, int]]) -> None:
        """Until none of ``keys`` has an append of this connection in flight: a partition moves
        between Ray calls and its channel only then (batches on two transports could overtake
        each other)."""
        async with self._quiet:
            await self._quiet.wait_for(lambda: not any(self.appending.get(k) for k in keys))

    def issued(self, key: tuple[str, int], via: produce_channel.ProduceChannel | None) -> None:
        self.via[key] = via
        self.appending[key] = self.appending.get(key, 0) + 1

    async def answered(self, key: tuple[str, int]) -> None:
        self.appending[key] -= 1
        if not self.appending[key]:
            async with self._quiet:
                self._quiet.notify_all()


async def _answered(answer: tuple) -> tuple:
    return answer


_TURN: contextvars.ContextVar[tuple[SubmitOrder, int] | None] = contextvars.ContextVar("kafka_turn", default=None)
"""The produce request being answered's place in its connection's SubmitOrder, when pipelined."""


class BrokerApi:
    """Answers one request at a time per call; calls run concurrently on the listener's loop.
    ``cluster`` is a raylog Cluster; ``node_id``, ``host`` and ``port`` are this listener's."""

    def __init__(self, cluster, node_id: int, host: str, port: int, head_node_id: int | None = None):
        self.cluster = cluster
        self.node_id, self.host, self.port = node_id, host, port
        self.head_node_id = node_id if head_node_id is None else head_node_id
        """Classic groups live on the head node's listener: the others answer NOT_COORDINATOR."""
        self.coordinates_groups = self.head_node_id == node_id
        self._cluster_id: str | None = None
        self._brokers: list[dict] = []
        self._brokers_at = float("-inf")
        self.groups = ClassicGroups()
        self._topic_names: dict[uuid.UUID, str] = {}
        """Topic id -> name of every topic this listener has named by id (Metadata, assignments)."""
        self._lookups: dict[str, asyncio.Future] = {}
        """Group -> the coordinator lookup under way (one thread per group, however many ask)."""
        self._abandoned: set[asyncio.Task] = set()
        """What is being done about coordinator calls given up on but carried out (see
        _coordinator_call's ``abandoned``)."""
        self._channels: dict[tuple[str, int], tuple[int, produce_channel.ProduceChannel | None, float]] = {}
        """(topic, partition) -> (leader epoch, the same-node produce channel to that leader or None
        for Ray calls, when it was looked up)."""
        self._fetch_channels: dict[tuple[str, int], tuple[int, produce_channel.ProduceChannel | None, float]] = {}
        """The same for fetches, on connections of their own: a fetch parked at the leader must not
        hold a produce's place among a connection's requests in flight."""
        self.fetches_by_channel = 0
        self.fetches_by_call = 0
        """Partition fetches sent to leaders over a same-node channel, and by Ray call."""
        self._ray_node: str | None = None
        self._handlers: dict[int, Callable] = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata, 8: self.offset_commit,
            9: self.offset_fetch, 10: self.find_coordinator, 11: self.join_group, 12: self.heartbeat,
            13: self.leave_group, 14: self.sync_group, 15: self.describe_groups, 16: self.list_groups,
            18: self.api_versions, 19: self.create_topics, 20: self.delete_topics, 21: self.delete_records,
            22: self.init_producer_id, 23: self.offset_for_leader_epoch, 32: self.describe_configs,
            33: self.alter_configs, 37: self.create_partitions, 42: self.delete_groups,
            44: self.incremental_alter_configs, 47: self.offset_delete, 60: self.describe_cluster,
            68: self.consumer_group_heartbeat, 69: self.consumer_group_describe,
        }

    async def handle(self, request: frames.Request, client_host: str = "",
                     turn: tuple[SubmitOrder, int] | None = None):
        """The response entity for ``request``, or None where Kafka sends none (acks=0). ``turn``:
        a produce request's place in its connection's order, when answered beside others."""
        cls = frames.response_class(request.api_key, request.api_version)
        _CLIENT.set((request.client_id or "", client_host))
        _TURN.set(turn)
        if request.api_key in GROUP_APIS and not self.coordinates_groups:
            return _not_coordinator(cls, request.body)
        return await self._handlers[request.api_key](request.body, cls)

    async def brokers(self) -> list[dict]:
        """Every node's listener ({"node_id", "host", "port"}, the head's first), as the controller
        last said (BROKERS_MAX_AGE_S); this one alone while the controller does not answer."""
        now = time.monotonic()
        if now - self._brokers_at > BROKERS_MAX_AGE_S:
            try:
                self._brokers = await self.cluster.controller.kafka_brokers.remote()
                self._brokers_at = now
            except Exception:  # noqa: BLE001 - the controller restarting: this listener still serves
                logger.warning("kafka listener: the controller did not list the brokers", exc_info=True)
        here = {"node_id": self.node_id, "host": self.host, "port": self.port}
        return self._brokers if any(b["node_id"] == self.node_id for b in self._brokers) else [here, *self._brokers]

    async def user_credentials(self, name: str) -> dict | None:
        """A Kafka listener user's stored SCRAM credentials (for SASL logins), None if no such user."""
        return await self.cluster.controller.user_credentials.remote(name)

    async def expire_members_forever(self, interval_s: float = 0.5) -> None:
        """Remove classic-group members silent past their session timeout (the listener runs it)."""
        while True:
            await asyncio.sleep(interval_s)
            for group, member in self.groups.expire():
                logger.info("event=classic_member_expired group=%s member=%s", group, member)

    # --- metadata ----------------------------------------------------------------------------

    async def _cluster_id_now(self) -> str:
        # The controller's own answer: the admin client's adds this listener's address, asked of itself.
        return (await self.cluster.controller.describe_cluster.remote())["cluster_id"]

    async def _topic(self, name: str) -> TopicInfo:
        # Fresh metadata is answered on the loop: a thread hop per partition of every produce and
        # fetch would cost more than the lookup.
        info = self.cluster.metadata.cached(name, METADATA_MAX_AGE_S)
        if info is not None:
            return info
        return await asyncio.to_thread(self.cluster.metadata.topic, name, METADATA_MAX_AGE_S)

    async def api_versions(self, body, cls):
        return _make(cls, error_code=ErrorCode.none, api_keys=frames.api_keys(cls), throttle_time=NO_THROTTLE,
                     supported_features=(), finalized_features_epoch=-1, finalized_features=(),
                     zk_migration_ready=False)

    async def metadata(self, body, cls):
        if self._cluster_id is None:
            self._cluster_id = await self._cluster_id_now()
        unknown_ids, by_id = [], set()
        if body.topics is None or (cls.__version__ == 0 and not body.topics):  # v0: empty means all
            names = await asyncio.to_thread(self.cluster.admin().list_topics)
        else:
            names = []
            for t in body.topics:
                if t.name is not None:
                    names.append(t.name)
                    continue
                # v12: a topic named by id alone (a KIP-848 member resolving its assignment).
                name = await self._topic_name(getattr(t, "topic_id", None))
                if name is None:
                    unknown_ids.append(t.topic_id)
                else:
                    names.append(name)
                    by_id.add(name)
        # Kafka clients send allow_auto_topic_creation=True unless told otherwise, so a wire client's
        # True is not an explicit ask: it creates a topic only where the cluster says any client may.
        asked = None if getattr(body, "allow_auto_topic_creation", True) else False
        create = self.cluster.auto_creator(asked)
        topic_cls, part_cls = _item(cls, "topics"), _item(_item(cls, "topics"), "partitions")
        topics = []
        for name in names:
            try:
                info = await asyncio.to_thread(self.cluster.metadata.topic, name, 0.0,
                                               None if name in by_id else create)
            except errors.RaylogError as exc:
                topics.append(_make(topic_cls, error_code=error_code(exc), name=name, topic_id=None,
                                    is_internal=False, partitions=(), topic_authorized_operations=-2147483648))
                continue
            topics.append(info)
        broker_cls = _item(cls, "brokers")
        listed = await self.brokers()
        brokers = tuple(_make(broker_cls, node_id=b["node_id"], host=b["host"], port=b["port"], rack=None)
                        for b in listed)
        ids = {b["node_id"] for b in listed}
        topics = [self._topic_entity(topic_cls, part_cls, t, ids) if isinstance(t, TopicInfo) else t for t in topics]
        topics += [_make(topic_cls, error_code=ErrorCode.unknown_topic_id, name=None, topic_id=i, is_internal=False,
                         partitions=(), topic_authorized_operations=-2147483648) for i in unknown_ids]
        return _make(cls, throttle_time=NO_THROTTLE, brokers=brokers, cluster_id=self._cluster_id,
                     controller_id=listed[0]["node_id"], topics=tuple(topics))

    def _topic_entity(self, topic_cls, part_cls, info: TopicInfo, brokers: set[int]):
        """A partition's leader is the listener on its leader replica's node (any listener serves
        it; that one forwards over no network), this one while that node has none."""
        desc = info.description
        parts = []
        for p in desc.partitions:
            node_of = {r.replica_id: r.node_id for r in p.replicas}
            offline = p.leader is None
            leader = -1 if offline else (p.leader.node_id if p.leader.node_id in brokers else self.node_id)
            parts.append(_make(
                part_cls, error_code=ErrorCode.leader_not_available if offline else ErrorCode.none,
                partition_index=p.partition, leader_id=leader,
                leader_epoch=p.leader_epoch, replica_nodes=tuple(r.node_id for r in p.replicas),
                isr_nodes=tuple(node_of[r] for r in p.isr if r in node_of), offline_replicas=()))
        return _make(topic_cls, error_code=ErrorCode.none, name=desc.name, topic_id=self._topic_uuid(desc),
                     is_internal=desc.internal or desc.name in INTERNAL_TOPICS, partitions=tuple(parts),
                     topic_authorized_operations=-2147483648)

    def _topic_uuid(self, desc) -> uuid.UUID | None:
        """A topic's raylog id as Kafka's topic id (KIP-516), remembered for the way back."""
        if not desc.topic_id:
            return None
        topic_id = uuid.UUID(hex=desc.topic_id)
        self._topic_names[topic_id] = desc.name
        return topic_id

    async def _topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with Kafka id ``topic_id``; None if no topic has it (deleted, or
        deleted and created again under its name: a new id)."""
        if topic_id is None:
            return None
        if topic_id not in self._topic_names:
            for desc in await asyncio.to_thread(self.cluster.admin().describe_topics):
                self._topic_uuid(desc)
        name = self._topic_names.get(topic_id)
        if name is None:
            return None
        try:
            current = (await self._topic(name)).description.topic_id
        except errors.UnknownTopicOrPartitionError:
            current = None
        if current != topic_id.hex:
            self._topic_names.pop(topic_id, None)
            return None
        return name

    async def _leader(self, topic: str, partition: int):
        return self._leader_in(await self._topic(topic), topic, partition)

    @staticmethod
    def _leader_in(info: TopicInfo, topic: str, partition: int):
        """The leader actor of ``partition`` in ``info`` (a topic description already looked up)."""
        if not 0 <= partition < info.num_partitions:
            raise errors.UnknownTopicOrPartitionError(f"{topic} has no partition {partition}")
        leader = info.leaders[partition]
        if leader is None:
            raise errors.LeaderNotAvailableError(f"{topic}-{partition} has no leader now")
        return leader

    def _forget(self, topic: str, exc: BaseException) -> None:
        if isinstance(exc, errors.RaylogError) and exc.retriable or isinstance(exc, errors.ActorCallError):
            self.cluster.metadata.invalidate(topic)

    # --- produce -----------------------------------------------------------------------------

    async def init_producer_id(self, body, cls):
        if body.transactional_id is not None:
            # raylog has no transactions: Kafka's own answer for a broker that has none configured.
            return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed,
                         producer_id=-1, producer_epoch=-1)
        return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     producer_id=random.getrandbits(62), producer_epoch=0)

    async def produce(self, body, cls):
        topic_cls = _item(cls, "responses")
        part_cls = _item(topic_cls, "partition_responses")
        if body.transactional_id is not None:
            code = ErrorCode.transactional_id_authorization_failed
            return _make(cls, throttle_time=NO_THROTTLE, responses=tuple(
                _make(topic_cls, name=t.name, partition_responses=tuple(
                    self._produced(part_cls, p.index, code) for p in t.partition_data)) for t in body.topic_data))
        acks = body.acks
        timeout_ms = max(int(body.timeout.total_seconds() * 1000), 1)
        wanted = [(t.name, p.index, p.records) for t in body.topic_data for p in t.partition_data]
        turn = _TURN.get()
        try:
            prepared = await asyncio.gather(*(self._prepare(name, index, records, acks)
                                              for name, index, records in wanted))
            if turn is not None:
                await turn[0].turn(turn[1])
            channels = [self._channel_of(name, index, self._channels) for name, index, _ in wanted]
            if turn is not None:
                moving = [(name, index) for (name, index, _), channel in zip(wanted, channels)
                          if turn[0].via.get((name, index), channel) is not channel]
                if moving:
                    await turn[0].settle(moving)  # holding the turn: the requests behind it wait too
                    channels = [self._channel_of(name, index, self._channels) for name, index, _ in wanted]
            # Issued together, in order, before anything is awaited: the leaders get this request's
            # batches before the next request's.
            calls = [self._issue(name, index, leader_or_failure, channel, acks, timeout_ms, turn)
                     for (name, index, _), leader_or_failure, channel in zip(wanted, prepared, channels)]
        finally:
            if turn is not None:
                turn[0].done(turn[1])
        results = await asyncio.gather(*calls)
        if acks == 0:
            return None
        by_topic: dict[str, list] = {}
        for (name, index, _), (code, base, log_start, message) in zip(wanted, results):
            by_topic.setdefault(name, []).append(self._produced(part_cls, index, code, base, log_start, message))
        return _make(cls, throttle_time=NO_THROTTLE, responses=tuple(
            _make(topic_cls, name=name, partition_responses=tuple(parts)) for name, parts in by_topic.items()))

    @staticmethod
    def _produced(part_cls, index: int, code: ErrorCode, base: int = -1, log_start: int = -1,
                  message: str | None = None):
        return _make(part_cls, index=index, error_code=code, base_offset=base, log_append_time=None,
                     log_start_offset=log_start, record_errors=(), error_message=message)

    async def _prepare(self, topic: str, partition: int, records, acks: int) -> tuple:
        """(leader actor, raylog batch) of one partition's Kafka batch, or (None, failure) where
        failure is what _issue answers: (error code, -1, -1, error message)."""
        if acks not in (-1, 0, 1):
            return None, (ErrorCode.invalid_required_acks, -1, -1, f"acks {acks} is not -1, 0 or 1")
        try:
            if records is None:
                raise errors.CorruptRecordError("a produce request's records are null")
            info = await self._topic(topic)
            batches = kafka_batches.decode(records, info.max_message_bytes)
            if len(batches) != 1:
                raise errors.CorruptRecordError(f"a produce request carries {len(batches)} batches for one "
                                                "partition; Kafka's v2 format takes exactly one")
            converted = kafka_batches.to_raylog(batches[0])
            leader = self._leader_in(info, topic, partition)
            await self._look_up_channel(topic, partition, info, leader, self._channels)
            return leader, converted
        except Exception as exc:  # noqa: BLE001 - every failure is the partition's error code
            return None, self._failure(topic, exc)

    async def _look_up_channel(self, topic: str, partition: int, info: TopicInfo, leader, channels: dict) -> None:
        """Opens a same-node channel (raylog/produce_channel.py) to the partition's leader, kept in
        ``channels`` (produce's or fetch's), when it runs on this listener's node: a batch then
        crosses a Unix socket, not Ray's object store. Looked up once per leader epoch, again after
        it breaks, and every CHANNEL_RECHECK_S while there is none."""
        key = (topic, partition)
        epoch = info.description.partitions[partition].leader_epoch
        entry = channels.get(key)
        now = time.monotonic()
        if entry is not None and entry[0] == epoch and (
                entry[1] is None and now - entry[2] < CHANNEL_RECHECK_S or entry[1] is not None and entry[1].broken is None):
            return
        open_channels = sum(1 for _, c, _ in channels.values() if c is not None and c.broken is None)
        channels[key] = (epoch, None, now)  # the requests that come meanwhile use Ray calls
        if not produce_channel.available or open_channels >= MAX_CHANNELS:
            return
        channel = None
        try:
            node, _, name, secret = await asyncio.wait_for(leader.read_location.remote(), CHANNEL_LOOKUP_S)
            if self._ray_node is None:
                import ray

                self._ray_node = ray.get_runtime_context().get_node_id()
            if name and node == self._ray_node:
                channel = produce_channel.ProduceChannel(name, bytes.fromhex(secret))
        except Exception:  # noqa: BLE001 - no channel (a leader gone or paused, another node): Ray calls
            pass
        old = channels.get(key)
        if old is not None and old[1] is not None and old[1] is not channel:
            old[1].close()
        channels[key] = (epoch, channel, time.monotonic())

    def _channel_of(self, topic: str, partition: int, channels: dict) -> produce_channel.ProduceChannel | None:
        entry = channels.get((topic, partition))
        return entry[1] if entry is not None and entry[1] is not None and entry[1].broken is None else None

    def _issue(self, topic: str, partition: int, prepared: tuple, channel: produce_channel.ProduceChannel | None,
               acks: int, timeout_ms: int, turn: tuple[SubmitOrder, int] | None):
        """The append of one prepared batch, issued now, over ``channel`` or by Ray call; awaiting
        it gives (error code, base offset, log start offset, error message)."""
        leader, converted = prepared
        if leader is None:
            return _answered(converted)
        try:
            if channel is not None:
                call = asyncio.wrap_future(channel.produce(converted, acks, None, timeout_ms))
            else:
                call = leader.produce.remote(converted, acks, None, timeout_ms)
        except Exception as exc:  # noqa: BLE001 - every failure is the partition's error code
            return _answered(self._failure(topic, exc))
        order = None if turn is None else turn[0]
        if order is not None:
            order.issued((topic, partition), channel)
        return self._appended(topic, call, order, (topic, partition))

    async def _appended(self, topic: str, call, order: SubmitOrder | None, key: tuple[str, int]) -> tuple:
        try:
            response = await call
            return ErrorCode.none, response[0], response[3], None
        except Exception as exc:  # noqa: BLE001 - every failure is the partition's error code
            return self._failure(topic, exc)
        finally:
            if order is not None:
                await order.answered(key)

    def _failure(self, topic: str, exc: BaseException) -> tuple:
        exc = ray_calls.translate(exc)
        self._forget(topic, exc)
        return self._code_of(topic, exc), -1, -1, str(exc)[:500]

    # --- fetch -------------------------------------------------------------------------------

    async def fetch(self, body, cls):
        topic_cls = _item(cls, "responses")
        part_cls = _item(topic_cls, "partitions")
        wanted = [(t.topic, p) for t in body.topics for p in t.partitions]
        max_wait_ms = min(int(body.max_wait.total_seconds() * 1000), MAX_WAIT_MS)
        deadline = time.monotonic() + max_wait_ms / 1000
        limit = getattr(body, "max_bytes", 0) or 2**31 - 1
        while True:
            answers = await asyncio.gather(*(self._fetch_one(t, p, 0) for t, p in wanted))
            total = sum(len(a[4]) for a in answers)
            remaining = deadline - time.monotonic()
            if total >= max(body.min_bytes, 1) or remaining <= 0 or not wanted:
                break
            # Park on every partition's leader at once; the first with data ends the wait.
            waits = [asyncio.ensure_future(self._fetch_one(t, p, int(remaining * 1000))) for t, p in wanted]
            done, pending = await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            if not any(len(task.result()[4]) or task.result()[0] != ErrorCode.none for task in done):
                break
        by_topic: dict[str, list] = {}
        used = 0
        for (topic, p), (code, hw, log_start, _end, records) in zip(wanted, answers):
            if used and used + len(records) > limit:
                records = b""  # Kafka's max_bytes: past the first data, what does not fit waits
            used += len(records)
            by_topic.setdefault(topic, []).append(_make(
                part_cls, partition_index=p.partition, error_code=code, high_watermark=hw, last_stable_offset=hw,
                log_start_offset=log_start, aborted_transactions=(), preferred_read_replica=-1,
                records=records))
        return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=tuple(
            _make(topic_cls, topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))

    async def _fetch_one(self, topic: str, p, max_wait_ms: int) -> tuple:
        """(error code, high watermark, log start, log end, Kafka batches) of one partition: over the
        same-node channel when the leader runs on this node and the fetch does not wait (a parked
        fetch goes by Ray call, and holds no channel's place meanwhile), else by Ray call."""
        try:
            info = await self._topic(topic)
            leader = self._leader_in(info, topic, p.partition)
            epoch = getattr(p, "current_leader_epoch", -1)
            max_bytes = max(p.partition_max_bytes, 1)
            channel = None
            if max_wait_ms == 0:
                await self._look_up_channel(topic, p.partition, info, leader, self._fetch_channels)
                channel = self._channel_of(topic, p.partition, self._fetch_channels)
            if channel is not None:
                self.fetches_by_channel += 1
                call = asyncio.wrap_future(channel.fetch(p.fetch_offset, max_bytes, 0, 1, epoch))
            else:
                self.fetches_by_call += 1
                call = leader.fetch.remote(p.fetch_offset, max_bytes, max_wait_ms, 1, -1, epoch)
            data, hw, log_start, log_end = await call
            return ErrorCode.none, hw, log_start, log_end, kafka_batches.from_raylog_log(data)
        except Exception as exc:  # noqa: BLE001 - every failure is the partition's error code
            code = self._failure(topic, exc)[0]
            return code, -1, -1, -1, b""

    # --- offsets -----------------------------------------------------------------------------

    async def list_offsets(self, body, cls):
        topic_cls = _item(cls, "topics")
        part_cls = _item(topic_cls, "partitions")
        topics = []
        for t in body.topics:
            parts = await asyncio.gather(*(self._list_one(t.name, p, part_cls) for p in t.partitions))
            topics.append(_make(topic_cls, name=t.name, partitions=tuple(parts)))
        return _make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    async def _list_one(self, topic: str, p, part_cls):
        try:
            leader = await self._leader(topic, p.partition_index)
            offset, found_ts, epoch = await leader.list_offsets.remote(p.timestamp)
            code = ErrorCode.none
        except Exception as exc:  # noqa: BLE001 - every failure is the partition's error code
            code, offset, found_ts, epoch = self._failure(topic, exc)[0], -1, -1, -1
        return _make(part_cls, partition_index=p.partition_index, error_code=code, timestamp=found_ts,
                     offset=offset, leader_epoch=epoch)


    # --- groups (Kafka's classic protocol) ---------------------------------------------------

    async def find_coordinator(self, body, cls):
        keys = getattr(body, "coordinator_keys", None)
        key_type = getattr(body, "key_type", 0)
        # Transactions (key type 1) are refused as Kafka refuses a transactional id the client may
        # not use: at once and for good, not with a retriable code the client would wait out.
        code = ErrorCode.none if key_type == 0 else ErrorCode.transactional_id_authorization_failed
        message = None if key_type == 0 else "raylog has no transactions"
        coordinator = None
        if code == ErrorCode.none:
            coordinator = next((b for b in await self.brokers() if b["node_id"] == self.head_node_id), None)
            if coordinator is None:
                code, message = ErrorCode.coordinator_not_available, "the head node's listener is not running"
        here = dict(node_id=coordinator["node_id"] if coordinator else -1, host=coordinator["host"] if coordinator else "",
                    port=coordinator["port"] if coordinator else -1, error_code=code, error_message=message)
        if keys is not None:
            entry = _item(cls, "coordinators")
            return _make(cls, throttle_time=NO_THROTTLE, coordinators=tuple(_make(entry, key=k, **here) for k in keys))
        return _make(cls, throttle_time=NO_THROTTLE, **here)

    async def join_group(self, body, cls):
        session_ms = int(body.session_timeout.total_seconds() * 1000)
        rebalance = getattr(body, "rebalance_timeout", None)
        rebalance_ms = session_ms if rebalance is None else int(rebalance.total_seconds() * 1000)
        result = await self.groups.join(body.group_id, body.member_id, getattr(body, "group_instance_id", None),
                                        body.protocol_type, [(p.name, bytes(p.metadata)) for p in body.protocols],
                                        session_ms, rebalance_ms, *_CLIENT.get())
        member_cls = _item(cls, "members")
        return _make(cls, throttle_time=NO_THROTTLE, error_code=result.error, generation_id=result.generation_id,
                     protocol_type=result.protocol_type, protocol_name=result.protocol_name or "",
                     leader=result.leader, member_id=result.member_id, skip_assignment=False,
                     members=tuple(_make(member_cls, member_id=m, group_instance_id=i, metadata=meta)
                                   for m, i, meta in result.members))

    async def sync_group(self, body, cls):
        code, assignment = await self.groups.sync(body.group_id, body.member_id, body.generation_id,
                                                  {a.member_id: bytes(a.assignment) for a in body.assignments})
        group = self.groups.group(body.group_id)
        return _make(cls, throttle_time=NO_THROTTLE, error_code=code, assignment=assignment,
                     protocol_type=group.protocol_type if group else None,
                     protocol_name=group.protocol_name if group else None)

    async def heartbeat(self, body, cls):
        code = self.groups.heartbeat(body.group_id, body.member_id, body.generation_id)
        return _make(cls, throttle_time=NO_THROTTLE, error_code=code)

    async def leave_group(self, body, cls):
        members = getattr(body, "members", None)
        if members is None:
            code = self.groups.leave(body.group_id, [body.member_id])[body.member_id]
            return _make(cls, throttle_time=NO_THROTTLE, error_code=code)
        codes = self.groups.leave(body.group_id, [m.member_id for m in members])
        entry = _item(cls, "members")
        return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, members=tuple(
            _make(entry, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=codes[m.member_id])
            for m in members))

    async def _coordinator_call(self, group_id: str, method: str, *args, wait_s: float | None = None,
                                retry: bool = False, abandoned=None):
        """``method(*args)`` of raylog's coordinator of ``group_id`` (actors/coordinator.py), within
        ``wait_s`` in all (offsets_commit_timeout_ms unless given); ``retry``: a retriable failure
        (the coordinator restarting) is tried again until then. A call given up on still runs at the
        coordinator: ``abandoned(answer)`` is then called with its answer, if it succeeds."""
        from raylog.consumer.group_member import coordinator_for

        if wait_s is None:
            wait_s = self.cluster.config.offsets_commit_timeout_ms / 1000
        deadline = time.monotonic() + wait_s
        while True:
            lookup = self._lookups.get(group_id)
            if lookup is None:
                lookup = self._lookups[group_id] = asyncio.ensure_future(asyncio.to_thread(
                    coordinator_for, self.cluster, group_id, self.cluster.config.request_timeout_ms / 1000))
                lookup.add_done_callback(lambda _: self._lookups.pop(group_id, None))
            call = None
            try:
                coordinator = await asyncio.wait_for(asyncio.shield(lookup), max(deadline - time.monotonic(), 0.001))
                call = asyncio.wrap_future(getattr(coordinator, method).remote(*args).future())
                return await asyncio.wait_for(asyncio.shield(call), max(deadline - time.monotonic(), 0.001))
            except asyncio.CancelledError:  # the client's connection closed meanwhile
                self._give_up(call, abandoned)
                raise
            except asyncio.TimeoutError:
                self._give_up(call, abandoned)
                raise errors.CoordinatorNotAvailableError(
                    f"the coordinator of group {group_id!r} did not answer within {wait_s} s") from None
            except Exception as exc:  # noqa: BLE001 - raised as raylog's error unless tried again
                failure = ray_calls.translate(exc)
                if not (retry and isinstance(failure, errors.RaylogError) and failure.retriable
                        and time.monotonic() + COORDINATOR_RETRY_S < deadline):
                    raise failure from None
            await asyncio.sleep(COORDINATOR_RETRY_S)

    def _give_up(self, call: asyncio.Future | None, abandoned) -> None:
        """Stop waiting on a coordinator call that still runs: its outcome is read when it comes
        (a failure nobody reads would be logged as such), and a success goes to ``abandoned``."""
        def settle(done: asyncio.Future) -> None:
            if done.cancelled() or done.exception() is not None or abandoned is None:
                return
            task = asyncio.ensure_future(abandoned(done.result()))
            self._abandoned.add(task)
            task.add_done_callback(self._abandoned.discard)

        if call is not None:
            call.add_done_callback(settle)

    async def _leave_unseen_member(self, group_id: str, instance_id: str | None, answer: dict) -> None:
        """A KIP-848 join answered after its client had been told COORDINATOR_NOT_AVAILABLE: the
        member it made, whose id the client never saw, leaves the group."""
        request = {"group_id": group_id, "member_id": answer["member_id"], "member_epoch": -1, "instance_id": instance_id}
        try:
            await self._coordinator_call(group_id, "heartbeat", request,
                                         wait_s=self.cluster.config.request_timeout_ms / 1000, retry=True)
            logger.info("kafka listener: member %s of group %r, joined after its client stopped waiting, left",
                        answer["member_id"], group_id)
        except Exception as exc:  # noqa: BLE001 - the member's session timeout removes it instead
            logger.warning("kafka listener: member %s of group %r, joined after its client stopped waiting, "
                           "could not leave (%r); its session timeout removes it", answer["member_id"], group_id, exc)

    @staticmethod
    def _code_of(subject: str, exc: BaseException, retriable: ErrorCode | None = None) -> ErrorCode:
        """A failure as Kafka's code, one not of raylog's own logged; ``retriable``: the code for
        any retriable failure (what a group's client retries on)."""
        exc = ray_calls.translate(exc)
        if not isinstance(exc, errors.RaylogError):
            logger.warning("kafka listener: %s failed: %r", subject, exc)
        elif exc.retriable and retriable is not None:
            return retriable
        return error_code(exc)

    async def consumer_group_heartbeat(self, body, cls):
        """KIP-848's ConsumerGroupHeartbeat: raylog's own coordinator runs such groups (its
        heartbeat is this API's), so the listener only names topics by id on the way in and out."""
        try:
            return await self._consumer_group_heartbeat(body, cls)
        except Exception as exc:  # noqa: BLE001 - the member's error code
            exc = ray_calls.translate(exc)
            return _make(cls, throttle_time=NO_THROTTLE,
                         error_code=self._code_of(body.group_id, exc, ErrorCode.coordinator_not_available),
                         error_message=str(exc)[:500], member_id=None, member_epoch=-1,
                         heartbeat_interval=datetime.timedelta(0), assignment=None)

    async def _consumer_group_heartbeat(self, body, cls):
        owned = None
        if body.topic_partitions is not None:
            owned = []
            for t in body.topic_partitions:
                name = await self._topic_name(t.topic_id)
                owned.extend([name, p] for p in t.partitions if name is not None)
        client_id, client_host = _CLIENT.get()
        request = {"group_id": body.group_id, "member_id": body.member_id or uuid.uuid4().hex,
                   "member_epoch": body.member_epoch, "instance_id": body.instance_id,
                   "subscribed_topics": body.subscribed_topic_names,
                   # librdkafka sends an empty regex beside topic names: no pattern.
                   "subscribed_pattern": getattr(body, "subscribed_topic_regex", None) or None,
                   "assignor": body.server_assignor, "owned_partitions": owned,
                   "client_id": client_id, "client_host": client_host}
        if body.rebalance_timeout.total_seconds() > 0:
            request["rebalance_timeout_ms"] = int(body.rebalance_timeout.total_seconds() * 1000)
        if body.server_assignor is not None and body.server_assignor not in ASSIGNORS:
            return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_assignor,
                         error_message=f"assignors served: {', '.join(ASSIGNORS)}", member_id=None, member_epoch=-1,
                         heartbeat_interval=datetime.timedelta(0), assignment=None)
        abandoned = None
        if body.member_epoch == 0 and not body.member_id:
            # The member id is this listener's, and the client never learns it if the answer comes
            # too late: it joins again under a new one. The member the late join made would hold
            # partitions until its session expired; it leaves instead.
            abandoned = functools.partial(self._leave_unseen_member, body.group_id, body.instance_id)
        answer = await self._coordinator_call(body.group_id, "heartbeat", request, abandoned=abandoned)
        by_topic: dict[str, list[int]] = {}
        for t, p in answer["assignment"]:
            by_topic.setdefault(t, []).append(p)
        assignment_cls = _item(cls, "assignment")
        part_cls = _item(assignment_cls, "topic_partitions")
        ids = {t: self._topic_uuid((await self._topic(t)).description) for t in by_topic}
        assignment = _make(assignment_cls, topic_partitions=tuple(
            _make(part_cls, topic_id=ids[t], partitions=tuple(sorted(ps))) for t, ps in sorted(by_topic.items())))
        return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                     member_id=answer["member_id"], member_epoch=answer["member_epoch"],
                     heartbeat_interval=datetime.timedelta(milliseconds=answer["heartbeat_interval_ms"]),
                     assignment=None if body.member_epoch < 0 else assignment)

    async def offset_commit(self, body, cls):
        generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        classic = self.groups.group(body.group_id)
        member, epoch, code = None, -1, ErrorCode.none
        if body.member_id and generation >= 0 and (classic is None or not classic.members):
            # A KIP-848 member (or a classic one its group no longer has): raylog's coordinator
            # checks its member epoch, and answers for a member it does not know.
            member, epoch = body.member_id, generation
        else:
            code = self.groups.check_commit(body.group_id, body.member_id, generation)
        rows = [[t.name, p.partition_index, p.committed_offset, p.committed_metadata or ""]
                for t in body.topics for p in t.partitions]
        if code == ErrorCode.none and rows:
            try:
                await self._coordinator_call(body.group_id, "commit_offsets", body.group_id, member, epoch, rows)
            except Exception as exc:  # noqa: BLE001 - the commit's error code, for every partition
                code = self._code_of(body.group_id, exc, ErrorCode.coordinator_not_available)
        topic_cls = _item(cls, "topics")
        part_cls = _item(topic_cls, "partitions")
        return _make(cls, throttle_time=NO_THROTTLE, topics=tuple(
            _make(topic_cls, name=t.name, partitions=tuple(
                _make(part_cls, partition_index=p.partition_index, error_code=code) for p in t.partitions))
            for t in body.topics))

    async def offset_fetch(self, body, cls):
        if not hasattr(body, "groups"):
            code, topics = await self._committed(body.group_id, body.topics, _item(cls, "topics"))
            return _make(cls, throttle_time=NO_THROTTLE, error_code=code, topics=topics)
        # v8 on: several groups, each answered on its own (each may have its own coordinator
        # actor); v9 adds the asking member, whom a KIP-848 group checks.
        group_cls = _item(cls, "groups")
        topic_cls = _item(group_cls, "topics")
        served, refused = body.groups[:MAX_GROUPS_PER_REQUEST], body.groups[MAX_GROUPS_PER_REQUEST:]
        answers = await asyncio.gather(*(
            self._committed(g.group_id, g.topics, topic_cls, batched=True,
                            member_id=getattr(g, "member_id", None) or None, member_epoch=getattr(g, "member_epoch", -1))
            for g in served))
        answers += [(ErrorCode.invalid_request, ())] * len(refused)
        return _make(cls, throttle_time=NO_THROTTLE, groups=tuple(
            _make(group_cls, group_id=g.group_id, error_code=code, topics=topics)
            for g, (code, topics) in zip(body.groups, answers)))

    async def _committed(self, group_id: str, asked, topic_cls, batched: bool = False,
                         member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorCode, tuple]:
        """One group's OffsetFetch answer: its error code and its topics (of ``topic_cls``), for the
        partitions ``asked`` (kio's request topics, or None: all the group has)."""
        part_cls = _item(topic_cls, "partitions")
        wanted = None if asked is None else [[t.name, p] for t in asked for p in t.partition_indexes]
        if self.groups.group(group_id) is not None:
            # A classic group's members are this listener's: Kafka's classic groups let anyone
            # read their offsets, and raylog's coordinator does not know them. (librdkafka sends
            # a classic member's id and generation, and "" for a consumer outside any group.)
            member_id, member_epoch = None, -1
        try:
            # A failed OffsetFetch costs far more than a slow one: librdkafka leaves the partitions it
            # asked for unread until the next rebalance. So it waits out a coordinator restarting
            # or paused (Kafka's coordinator answers it from memory).
            rows = await self._coordinator_call(group_id, "fetch_offsets", group_id, wanted, member_id, member_epoch,
                                                wait_s=self.cluster.config.request_timeout_ms / 1000, retry=True)
            code = ErrorCode.none
        except Exception as exc:  # noqa: BLE001 - the group's error code
            # Kafka's answer while a coordinator loads, which clients retry.
            rows, code = [], self._code_of(group_id, exc, ErrorCode.coordinator_load_in_progress)
            if batched:  # the group's own error code says it all, as Kafka answers v8 on
                return code, ()
        found = {(t, p): (o, m) for t, p, o, m in rows}
        if wanted is None:
            wanted = [[t, p] for t, p in found]
        by_topic: dict[str, list] = {}
        for t, p in wanted:
            offset, meta = found.get((t, p), (-1, ""))
            # The error on each partition too: v1 has no other place for it, and no client may take
            # -1 ("nothing committed") from an answer that failed.
            by_topic.setdefault(t, []).append(_make(part_cls, partition_index=p, committed_offset=offset,
                                                    committed_leader_epoch=-1, metadata=meta, error_code=code))
        return code, tuple(_make(topic_cls, name=t, partitions=tuple(parts)) for t, parts in by_topic.items())

    async def offset_delete(self, body, cls):
        """Kafka's OffsetDelete: a group's committed offsets of topics no member subscribes to."""
        topic_cls = _item(cls, "topics")
        part_cls = _item(topic_cls, "partitions")
        subscribed = self.groups.subscribed_topics(body.group_id)
        codes: dict[str, ErrorCode] = {}
        try:
            if subscribed is None:
                raise errors.NonEmptyGroupError(f"group {body.group_id!r} has members of another protocol")
            committed = {t for t, *_ in await self._coordinator_call(body.group_id, "fetch_offsets", body.group_id, None)}
            if not committed and self.groups.group(body.group_id) is None:
                raise errors.GroupIdNotFoundError(f"group {body.group_id!r} has no members and no offsets")
            codes = {t.name: ErrorCode.group_subscribed_to_topic for t in body.topics if t.name in subscribed}
            deleted = [[t.name, p.partition_index, None] for t in body.topics if t.name not in codes
                       for p in t.partitions]
            if deleted:
                await self._coordinator_call(body.group_id, "reset_offsets", body.group_id, deleted)
            code = ErrorCode.none
        except Exception as exc:  # noqa: BLE001 - the group's error code
            code = self._code_of(body.group_id, exc)
        return _make(cls, throttle_time=NO_THROTTLE, error_code=code, topics=() if code != ErrorCode.none else tuple(
            _make(topic_cls, name=t.name, partitions=tuple(
                _make(part_cls, partition_index=p.partition_index, error_code=codes.get(t.name, ErrorCode.none))
                for p in t.partitions)) for t in body.topics))

    async def list_groups(self, body, cls):
        """The classic groups this listener runs and, on the coordinating listener, the groups of
        raylog's own coordinator (KIP-848 members, raylog's consumers, or only committed offsets)
        with their KIP-848 state names; v5's group type is "classic" or "consumer". Filters match
        without regard to case, as Kafka's group coordinator matches them."""
        states = {s.lower() for s in getattr(body, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
        entry = _item(cls, "groups")
        groups = [(g.group_id, g.protocol_type or "consumer", g.state, "classic") for g in self.groups.groups.values()]
        if self.coordinates_groups and (not types or "consumer" in types):
            try:
                coordinated = await asyncio.to_thread(self.cluster.admin().list_consumer_groups)
            except Exception as exc:  # noqa: BLE001 - the whole answer's error code
                return _make(cls, throttle_time=NO_THROTTLE, error_code=self._code_of(
                    "ListGroups", exc, ErrorCode.coordinator_not_available), groups=())
            classic = {g for g, *_ in groups}
            groups += [(g["group_id"], "consumer", g["state"].capitalize(), "consumer") for g in coordinated
                       if g["group_id"] not in classic]
        return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(
            _make(entry, group_id=g, protocol_type=t, group_state=st, group_type=kind) for g, t, st, kind in groups
            if (not states or st.lower() in states) and (not types or kind in types)))

    async def consumer_group_describe(self, body, cls):
        """KIP-848's ConsumerGroupDescribe: raylog's coordinator's groups. A classic group this
        listener runs, or a group nobody has, is GROUP_ID_NOT_FOUND, on which admin clients
        describe it with DescribeGroups instead (as against Kafka)."""
        group_cls = _item(cls, "groups")
        member_cls = _item(group_cls, "members")
        assignment_cls = member_cls.__dataclass_fields__["assignment"].type
        part_cls = _item(assignment_cls, "topic_partitions")

        async def assignment(pairs) -> object:
            by_topic: dict[str, list[int]] = {}
            for t, p in pairs:
                by_topic.setdefault(t, []).append(p)
            parts = []
            for t, ps in sorted(by_topic.items()):
                try:
                    topic_id = self._topic_uuid((await self._topic(t)).description)
                except errors.RaylogError:
                    continue  # deleted meanwhile
                parts.append(_make(part_cls, topic_id=topic_id, topic_name=t, partitions=tuple(sorted(ps))))
            return _make(assignment_cls, topic_partitions=tuple(parts))

        out = []
        for i, group_id in enumerate(body.group_ids):
            if i >= MAX_GROUPS_PER_REQUEST:
                out.append(_undescribed_group(group_cls, group_id, ErrorCode.invalid_request,
                                              f"at most {MAX_GROUPS_PER_REQUEST} groups are described per request"))
                continue
            if self.groups.describe(group_id) is not None:
                out.append(_undescribed_group(group_cls, group_id, ErrorCode.group_id_not_found,
                                              f"group {group_id!r} is a classic group"))
                continue
            try:
                d = await asyncio.to_thread(self.cluster.admin().describe_consumer_groups, [group_id])
            except errors.GroupIdNotFoundError:
                out.append(_undescribed_group(group_cls, group_id, ErrorCode.group_id_not_found,
                                              f"group {group_id!r} does not exist"))
                continue
            except Exception as exc:  # noqa: BLE001 - the group's error code
                code = self._code_of(group_id, exc, ErrorCode.coordinator_not_available)
                out.append(_undescribed_group(group_cls, group_id, code, str(ray_calls.translate(exc))[:500]))
                continue
            d = d[0]
            members = []
            for m in d["members"]:
                members.append(_make(
                    member_cls, member_id=m["member_id"], instance_id=m["instance_id"], rack_id=None,
                    member_epoch=m["member_epoch"], client_id=m["client_id"] or "", client_host=m["client_host"] or "",
                    subscribed_topic_names=tuple(m["subscribed_topics"] or ()),
                    subscribed_topic_regex=m["subscribed_pattern"], assignment=await assignment(m["assigned"]),
                    target_assignment=await assignment(m["target"])))
            out.append(_make(group_cls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                             group_state=d["state"].capitalize(), group_epoch=d["group_epoch"],
                             assignment_epoch=d["target_epoch"], assignor_name=d["assignor"] or "",
                             members=tuple(members), authorized_operations=-2147483648))
        return _make(cls, throttle_time=NO_THROTTLE, groups=tuple(out))

    async def describe_groups(self, body, cls):
        group_cls = _item(cls, "groups")
        member_cls = _item(group_cls, "members")
        out = []
        for group_id in body.groups:
            d = self.groups.describe(group_id) or {"state": "Dead", "protocol_type": "", "protocol": "", "members": []}
            out.append(_make(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=d["state"],
                             protocol_type=d["protocol_type"], protocol_data=d["protocol"],
                             authorized_operations=-2147483648, members=tuple(
                                 _make(member_cls, member_id=m["member_id"], group_instance_id=m["instance_id"],
                                       client_id=m["client_id"], client_host=m["client_host"],
                                       member_metadata=m["metadata"], member_assignment=m["assignment"])
                                 for m in d["members"])))
        return _make(cls, throttle_time=NO_THROTTLE, groups=tuple(out))

    # --- admin -------------------------------------------------------------------------------

    async def _admin(self, call: Callable, *args, **kwargs) -> tuple[ErrorCode, str | None]:
        """Run a (blocking) admin call; its error as Kafka's code and message."""
        try:
            await asyncio.to_thread(call, *args, **kwargs)
            return ErrorCode.none, None
        except Exception as exc:  # noqa: BLE001 - every failure is the resource's error code
            return self._code_of(getattr(call, "__name__", "an admin call"), exc), str(ray_calls.translate(exc))[:500]

    async def create_topics(self, body, cls):
        from raylog.admin import NewTopic

        admin = self.cluster.admin()
        entry = _item(cls, "topics")
        out = []
        for t in body.topics:
            if t.assignments:
                code, message = ErrorCode.invalid_request, "raylog places replicas itself: give no assignments"
            else:
                new = NewTopic(t.name, t.num_partitions, t.replication_factor, {c.name: c.value for c in t.configs})
                code, message = await self._admin(admin.create_topics, [new], validate_only=body.validate_only)
            out.append(_make(entry, name=t.name, topic_id=None, error_code=code, error_message=message,
                             topic_config_error_code=0, num_partitions=t.num_partitions,
                             replication_factor=t.replication_factor, configs=()))
        return _make(cls, throttle_time=NO_THROTTLE, topics=tuple(out))

    async def delete_topics(self, body, cls):
        admin = self.cluster.admin()
        names = getattr(body, "topic_names", None)
        if names is None:
            names = [t.name for t in body.topics]
        entry = _item(cls, "responses")
        out = []
        for name in names:
            code, message = await self._admin(admin.delete_topics, [name])
            self.cluster.metadata.invalidate(name)
            out.append(_make(entry, name=name, topic_id=None, error_code=code, error_message=message))
        return _make(cls, throttle_time=NO_THROTTLE, responses=tuple(out))

    async def create_partitions(self, body, cls):
        admin = self.cluster.admin()
        entry = _item(cls, "results")
        out = []
        for t in body.topics:
            if t.assignments:
                code, message = ErrorCode.invalid_request, "raylog places partitions itself: give no assignments"
            else:
                code, message = await self._admin(admin.create_partitions, {t.name: t.count},
                                                  validate_only=body.validate_only)
            out.append(_make(entry, name=t.name, error_code=code, error_message=message))
        return _make(cls, throttle_time=NO_THROTTLE, results=tuple(out))

    async def describe_configs(self, body, cls):
        admin = self.cluster.admin()
        result_cls = _item(cls, "results")
        entry_cls = _item(result_cls, "configs")
        out = []
        for r in body.resources:
            entries, code, message = [], ErrorCode.none, None
            if r.resource_type == TOPIC_RESOURCE:
                try:
                    described = await asyncio.to_thread(admin.describe_topic_config, r.resource_name)
                    wanted = None if r.configuration_keys is None else set(r.configuration_keys)
                    entries = [e for e in described if wanted is None or e.name in wanted]
                except Exception as exc:  # noqa: BLE001 - the resource's error code
                    code, _, _, message = self._failure(r.resource_name, exc)
            elif r.resource_type != BROKER_RESOURCE:
                code, message = ErrorCode.invalid_request, f"resource type {r.resource_type} has no configs here"
            out.append(_make(result_cls, error_code=code, error_message=message, resource_type=r.resource_type,
                             resource_name=r.resource_name, configs=tuple(
                                 _make(entry_cls, name=e.name, value=e.value, read_only=e.read_only,
                                       config_source=DEFAULT_CONFIG if e.is_default else DYNAMIC_TOPIC_CONFIG,
                                       is_default=e.is_default, is_sensitive=False, synonyms=(), config_type=0,
                                       documentation=e.documentation or None)
                                 for e in entries)))
        return _make(cls, throttle_time=NO_THROTTLE, results=tuple(out))

    async def alter_configs(self, body, cls):
        return await self._alter(body, cls, incremental=False)

    async def incremental_alter_configs(self, body, cls):
        return await self._alter(body, cls, incremental=True)

    async def _alter(self, body, cls, incremental: bool):
        admin = self.cluster.admin()
        entry = _item(cls, "responses")
        out = []
        for r in body.resources:
            if r.resource_type != TOPIC_RESOURCE:
                code, message = ErrorCode.invalid_request, "raylog alters topic configs only"
            elif incremental and any(c.config_operation not in (SET, DELETE) for c in r.configs):
                code, message = ErrorCode.invalid_config, "raylog's topic configs are not lists: SET or DELETE them"
            else:
                values = {c.name: c.value for c in r.configs
                          if not incremental or c.config_operation == SET}
                deleted = [c.name for c in r.configs if incremental and c.config_operation == DELETE]
                code, message = await self._admin(admin._alter_config, r.resource_name, values, deleted,
                                                  body.validate_only, not incremental)
            out.append(_make(entry, error_code=code, error_message=message, resource_type=r.resource_type,
                             resource_name=r.resource_name))
        return _make(cls, throttle_time=NO_THROTTLE, responses=tuple(out))

    async def delete_records(self, body, cls):
        topic_cls = _item(cls, "topics")
        part_cls = _item(topic_cls, "partitions")
        out = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                try:
                    leader = await self._leader(t.name, p.partition_index)
                    low = await leader.delete_records.remote(p.offset)
                    code = ErrorCode.none
                except Exception as exc:  # noqa: BLE001 - the partition's error code
                    code, low = self._failure(t.name, exc)[0], -1
                parts.append(_make(part_cls, partition_index=p.partition_index, low_watermark=low, error_code=code))
            out.append(_make(topic_cls, name=t.name, partitions=tuple(parts)))
        return _make(cls, throttle_time=NO_THROTTLE, topics=tuple(out))

    async def describe_cluster(self, body, cls):
        if self._cluster_id is None:
            self._cluster_id = await self._cluster_id_now()
        broker = _item(cls, "brokers")
        listed = await self.brokers()
        return _make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                     endpoint_type=1, cluster_id=self._cluster_id, controller_id=listed[0]["node_id"],
                     brokers=tuple(_make(broker, broker_id=b["node_id"], host=b["host"], port=b["port"], rack=None)
                                   for b in listed),
                     cluster_authorized_operations=-2147483648)

    async def offset_for_leader_epoch(self, body, cls):
        topic_cls = _item(cls, "topics")
        part_cls = _item(topic_cls, "partitions")
        out = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                try:
                    leader = await self._leader(t.topic, p.partition)
                    epoch, end = await leader.end_offset_for_epoch.remote(p.leader_epoch,
                                                                          getattr(p, "current_leader_epoch", -1))
                    code = ErrorCode.none
                except Exception as exc:  # noqa: BLE001 - the partition's error code
                    code, epoch, end = self._failure(t.topic, exc)[0], -1, -1
                parts.append(_make(part_cls, error_code=code, partition=p.partition, leader_epoch=epoch,
                                   end_offset=end))
            out.append(_make(topic_cls, topic=t.topic, partitions=tuple(parts)))
        return _make(cls, throttle_time=NO_THROTTLE, topics=tuple(out))

    async def delete_groups(self, body, cls):
        admin = self.cluster.admin()
        entry = _item(cls, "results")
        out = []
        for group_id in body.groups_names:
            code = self.groups.delete(group_id)
            if code == ErrorCode.none:
                code, _ = await self._admin(admin.delete_consumer_groups, [group_id])
            out.append(_make(entry, group_id=group_id, error_code=code))
        return _make(cls, throttle_time=NO_THROTTLE, results=tuple(out))


def _undescribed_group(entry, group_id: str, code: ErrorCode, message: str | None = None):
    """A ConsumerGroupDescribe answer for a group that is not described: its error only."""
    return _make(entry, error_code=code, error_message=message, group_id=group_id, group_state="", group_epoch=-1,
                 assignment_epoch=-1, assignor_name="", members=(), authorized_operations=-2147483648)


def _not_coordinator(cls, body):
    """NOT_COORDINATOR in the shape of ``cls``: the client finds the coordinator again."""
    code = ErrorCode.not_coordinator
    fields = cls.__dataclass_fields__
    values = {"throttle_time": NO_THROTTLE, "error_code": code, "generation_id": -1, "leader": "", "member_id": "",
              "members": (), "assignment": b"", "protocol_type": None, "protocol_name": "", "groups": (),
              "results": (), "topics": (), "skip_assignment": False}
    if "heartbeat_interval" in fields:  # ConsumerGroupHeartbeat: no member, no assignment
        values.update(member_id=None, member_epoch=-1, heartbeat_interval=datetime.timedelta(0), assignment=None,
                      error_message=None)
    if "groups" in fields and getattr(body, "groups", None):  # DescribeGroups, OffsetFetch v8 on: each group's
        entry = _item(cls, "groups")
        values["groups"] = tuple(_make(entry, error_code=code, group_id=getattr(g, "group_id", g), group_state="",
                                       protocol_type="", protocol_data="", members=(), topics=(),
                                       authorized_operations=-2147483648)
                                 for g in body.groups)
    if "groups" in fields and getattr(body, "group_ids", None):  # ConsumerGroupDescribe
        entry = _item(cls, "groups")
        values["groups"] = tuple(_undescribed_group(entry, g, code) for g in body.group_ids)
    if "results" in fields and getattr(body, "groups_names", None):  # DeleteGroups
        entry = _item(cls, "results")
        values["results"] = tuple(_make(entry, group_id=g, error_code=code) for g in body.groups_names)
    if "topics" in fields and getattr(body, "topics", None):
        topic_cls = _item(cls, "topics")
        part_cls = _item(topic_cls, "partitions")
        values["topics"] = tuple(_make(topic_cls, name=t.name, partitions=tuple(
            _make(part_cls, partition_index=p.partition_index, error_code=code, committed_offset=-1,
                  committed_leader_epoch=-1, metadata=None)
            for p in getattr(t, "partitions", ()))) for t in body.topics)
    return _make(cls, **values)

