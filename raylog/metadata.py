"""Client-side cache: topic -> partition count and each partition's leader actor handle."""

from __future__ import annotations

import threading

from raylog import ray_calls
from raylog.errors import InvalidPartitionError
from raylog.naming import validate_topic_name
from raylog.protocol import TopicDescription


class Metadata:
    """Thread-safe; refreshed from the controller on first use and after retriable errors."""

    def __init__(self, controller, timeout_s: float):
        self._controller = controller
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[TopicDescription, list]] = {}

    def _load(self, topic: str) -> tuple[TopicDescription, list]:
        entry = self._topics.get(topic)
        if entry is None:
            validate_topic_name(topic)  # before any call: an invalid name never reaches the controller
            entry = ray_calls.get(self._controller.topic_metadata.remote(topic), self._timeout_s)
            with self._lock:
                self._topics[topic] = entry
        return entry

    def describe(self, topic: str) -> TopicDescription:
        return self._load(topic)[0]

    def partition_count(self, topic: str) -> int:
        return len(self._load(topic)[1])

    def leader(self, topic: str, partition: int):
        handles = self._load(topic)[1]
        if not isinstance(partition, int) or not 0 <= partition < len(handles):
            raise InvalidPartitionError(f"topic {topic!r} has partitions 0..{len(handles) - 1}, not {partition!r}")
        return handles[partition]

    def invalidate(self, topic: str | None = None) -> None:
        with self._lock:
            if topic is None:
                self._topics.clear()
            else:
                self._topics.pop(topic, None)
