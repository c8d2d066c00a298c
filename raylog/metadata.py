"""Client-side cache: per topic, its partitions, its record size limit and each leader's actor handle."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from raylog import ray_calls
from raylog.errors import InvalidPartitionError, LeaderNotAvailableError, UnknownTopicOrPartitionError
from raylog.naming import validate_topic_name
from raylog.protocol import TopicDescription


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the clients need of a topic, as the controller last described it."""

    description: TopicDescription
    leaders: list
    """Leader actor handle per partition."""
    num_partitions: int
    max_message_bytes: int
    loaded_at: float
    """time.monotonic() of the controller call that produced it."""


class Metadata:
    """Thread-safe; loaded from the controller on first use, after retriable errors (``invalidate``)
    and when older than the caller's metadata_max_age_ms."""

    def __init__(self, controller, timeout_s: float, session: ray_calls.Session):
        self._controller = controller
        self.session = session
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._topics: dict[str, TopicInfo] = {}
        self._invalidated_at: dict[str, float] = {}
        """When each topic's cache was last dropped as wrong: an answer asked before then is not cached."""

    def topic(self, topic: str, max_age_s: float | None = None,
              create: Callable[[str], None] | None = None) -> TopicInfo:
        """The topic's metadata; a topic that does not exist is created first by ``create`` when
        given (auto-creation), else UnknownTopicOrPartitionError."""
        info = self._topics.get(topic)
        if info is None or (max_age_s is not None and time.monotonic() - info.loaded_at > max_age_s):
            try:
                info = self._load(topic)
            except UnknownTopicOrPartitionError:
                if create is None:
                    raise
                create(topic)
                info = self._load(topic)
        return info

    def cached(self, topic: str, max_age_s: float) -> TopicInfo | None:
        """The topic's metadata if loaded less than ``max_age_s`` ago, without any call."""
        info = self._topics.get(topic)
        if info is None or time.monotonic() - info.loaded_at > max_age_s:
            return None
        return info

    def _load(self, topic: str) -> TopicInfo:
        validate_topic_name(topic)  # before any call: an invalid name never reaches the controller
        self.session.check()
        loaded_at = time.monotonic()
        return self._install(topic, ray_calls.get(self._controller.topic_metadata.remote(topic), self._timeout_s),
                             loaded_at)

    def _install(self, topic: str, answer, loaded_at: float) -> TopicInfo:
        """Cache ``answer`` (asked at ``loaded_at``), unless what is cached was asked later: an
        answer a LeaderWatch collects late may predate an election a newer load already shows."""
        description, leaders = answer
        info = TopicInfo(description, leaders, len(leaders),
                         int(description.config.get("max_message_bytes", 1 << 62)), loaded_at)
        with self._lock:
            cached = self._topics.get(topic)
            if cached is not None and cached.loaded_at > loaded_at:
                return cached
            if loaded_at < self._invalidated_at.get(topic, 0.0):
                return info  # asked before the cache was found wrong: not cached, only answered
            self._topics[topic] = info
        return info

    def refresh_later(self, topic: str) -> "PendingRefresh":
        """Ask the controller for the topic's metadata without waiting (a client thread that must
        not block on a busy controller, as a producer's sender): ``PendingRefresh.done`` installs
        the answer once it has come."""
        validate_topic_name(topic)
        self.session.check()
        return PendingRefresh(self, topic, self._controller.topic_metadata.remote(topic), time.monotonic())

    def describe(self, topic: str) -> TopicDescription:
        return self.topic(topic).description

    def partition_count(self, topic: str) -> int:
        return self.topic(topic).num_partitions

    def leader(self, topic: str, partition: int):
        """The partition leader's actor handle; LeaderNotAvailableError (retriable) while offline."""
        self.session.check()
        leaders = self.topic(topic).leaders
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < len(leaders):
            raise InvalidPartitionError(f"topic {topic!r} has partitions 0..{len(leaders) - 1}, not {partition!r}")
        handle = leaders[partition]
        if handle is None:
            reason = self.topic(topic).description.partitions[partition].offline_reason
            self.invalidate(topic)
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader now: "
                                          f"{reason or 'an election is under way'}")
        return handle

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self.topic(topic).description.partitions[partition].leader_epoch

    def invalidate(self, topic: str | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            for name in list(self._topics) if topic is None else [topic]:
                self._topics.pop(name, None)
                self._invalidated_at[name] = now


WATCH_INTERVAL_S = 0.25
"""How often a client looks up again the leaders of a topic whose calls go unanswered. Each look
is one small call to the controller, made without waiting for it, and only while a call is late:
a quarter second puts the new leader within reach that much after the controller fenced the old
one (a second did before; issue 31's failover target is session + 2 s)."""


class LeaderWatch:
    """Looks up, without blocking the client thread on a busy controller, the leaders of topics
    whose calls go unanswered: a paused or cut-off leader is fenced after the session timeout and
    its lease lapsed before that, so it can answer nothing, and waiting out request_timeout_ms for
    it (as Kafka's clients do) only delays the new leader."""

    def __init__(self, metadata: Metadata, give_up_s: float, interval_s: float = WATCH_INTERVAL_S):
        """Each watched topic is looked up again once its last answer is ``interval_s`` old, or
        when the controller has not answered for ``give_up_s`` (a controller that busy was replaced)."""
        self._metadata, self._interval_s, self._give_up_s = metadata, interval_s, give_up_s
        self._pending: dict[str, PendingRefresh] = {}

    def look(self, topics: set[str], now: float) -> dict[str, TopicInfo]:
        """The latest answer for each of ``topics`` that has one; stops watching the others."""
        for topic in list(self._pending):
            if topic not in topics:
                del self._pending[topic]
        answered = {}
        for topic in topics:
            pending, info = self._pending.get(topic), None
            if pending is not None:
                try:
                    info = pending.done()
                except Exception:  # noqa: BLE001 - the controller failed the request: ask again
                    pending = None
            if pending is None or now - pending.asked_at >= (self._interval_s if info else self._give_up_s):
                self._pending[topic] = self._metadata.refresh_later(topic)
            if info is not None:
                answered[topic] = info
        return answered


class PendingRefresh:
    """A metadata request under way (Metadata.refresh_later)."""

    def __init__(self, metadata: Metadata, topic: str, ref, asked_at: float):
        self._metadata, self.topic, self._ref, self.asked_at = metadata, topic, ref, asked_at
        self._info: TopicInfo | None = None

    def done(self) -> TopicInfo | None:
        """The new metadata once the controller answered (installed for every user of the cache
        the first time), else None; raises the controller's error."""
        if self._info is None:
            import ray

            ready, _ = ray.wait([self._ref], timeout=0)
            if ready:
                self._info = self._metadata._install(self.topic, ray_calls.get(self._ref, 0), self.asked_at)
        return self._info
