"""Pure cluster metadata: topics, their configs and each partition's replicas.

A state machine in the shape of Kafka's coordinator shards: each handler
validates a request against the current state and returns the records that
express the change plus the response; the state changes only in ``replay``,
which is also how a restarted controller rebuilds it from its metadata log.
No Ray and no I/O here.

Records are plain dicts (msgpack-able):
    {"type": "topic_created", "name", "config", "partitions": [[replica, ...], ...]}
    {"type": "partitions_added", "name", "partitions": [[replica, ...], ...]}
    {"type": "topic_deleted", "name"}
where a replica is {"node_id", "directory", "replica_id"} and the first
replica of a partition is its leader.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from raylog.config import TopicConfig
from raylog.errors import (
    InvalidConfigError, InvalidPartitionError, TopicAlreadyExistsError, UnknownTopicOrPartitionError,
)
from raylog.naming import partition_dir_name, validate_topic_name


Placer = Callable[[int, int], list[list[tuple[str, str]]]]


@dataclass(slots=True)
class TopicState:
    name: str
    config: dict
    partitions: list[list[dict]] = field(default_factory=list)
    leader_epochs: list[int] = field(default_factory=list)


class ControllerState:
    def __init__(self) -> None:
        self.topics: dict[str, TopicState] = {}

    # --- handlers: validate, return (records, response) --------------------------------

    def create_topic(self, name: str, num_partitions: int, config: dict,
                     place: Placer) -> tuple[list[dict], str]:
        """``place(count, first_partition)`` names (node_id, node_data_dir) per replica of each
        new partition; it is called only once the request is valid."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise InvalidPartitionError(f"a topic needs at least one partition, got {num_partitions!r}")
        cfg = TopicConfig.from_mapping(config).to_dict()
        placement = place(num_partitions, 0)
        if len(placement) != num_partitions:
            raise InvalidConfigError("placement must name replicas for every partition")
        record = {"type": "topic_created", "name": name, "config": cfg,
                  "partitions": self._replicas(name, 0, placement)}
        return [record], name

    def create_partitions(self, name: str, total: int, place: Placer) -> tuple[list[dict], int]:
        topic = self._topic(name)
        current = len(topic.partitions)
        if not isinstance(total, int) or total <= current:
            raise InvalidPartitionError(f"topic {name!r} has {current} partitions; {total!r} does not add any")
        placement = place(total - current, current)
        record = {"type": "partitions_added", "name": name,
                  "partitions": self._replicas(name, current, placement)}
        return [record], total

    def delete_topic(self, name: str) -> tuple[list[dict], TopicState]:
        topic = self._topic(name)
        return [{"type": "topic_deleted", "name": name}], topic

    @staticmethod
    def _replicas(name: str, first: int, placement: list[list[tuple[str, str]]]) -> list[list[dict]]:
        return [
            [{"node_id": node, "directory": f"{root}/{partition_dir_name(name, first + p)}", "replica_id": r}
             for r, (node, root) in enumerate(replicas)]
            for p, replicas in enumerate(placement)
        ]

    # --- state changes ---------------------------------------------------------------

    def replay(self, record: dict) -> None:
        kind = record["type"]
        if kind == "topic_created":
            self.topics[record["name"]] = TopicState(
                record["name"], record["config"], list(record["partitions"]), [0] * len(record["partitions"]))
        elif kind == "partitions_added":
            topic = self.topics[record["name"]]
            topic.partitions.extend(record["partitions"])
            topic.leader_epochs.extend([0] * len(record["partitions"]))
        elif kind == "topic_deleted":
            self.topics.pop(record["name"], None)
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")

    # --- queries -----------------------------------------------------------------------

    def _topic(self, name: str) -> TopicState:
        validate_topic_name(name)
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None

    def topic(self, name: str) -> TopicState:
        return self._topic(name)

    def replica_load(self) -> Counter:
        """Replicas per node, for placement's least-loaded choice."""
        load: Counter = Counter()
        for t in self.topics.values():
            for replicas in t.partitions:
                for r in replicas:
                    load[r["node_id"]] += 1
        return load
