"""Names raylog gives to topics and to its actors, and the rules a new topic's name and shape follow."""

from __future__ import annotations

import re

from raylog.errors import InvalidPartitionError, InvalidReplicationFactorError, InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
"""Kafka's bound: a partition directory is '<topic>-<partition>', which must fit a 255-byte file name."""
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")

CONTROLLER_ACTOR_NAME = "raylog-controller"
KAFKA_LISTENER_ACTOR_NAME = "raylog-kafka-listener"


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise InvalidTopicError."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} chars; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")
    return name


def is_count(value: object) -> bool:
    """An int >= 1 (not a bool): a partition count or a replication factor."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def validate_topic_shape(num_partitions: object, replication_factor: object) -> None:
    """Raise InvalidPartitionError / InvalidReplicationFactorError unless both are counts >= 1
    (the admin client checks before calling, the controller again)."""
    if not is_count(num_partitions):
        raise InvalidPartitionError(f"a topic needs at least one partition, got {num_partitions!r}")
    if not is_count(replication_factor):
        raise InvalidReplicationFactorError(f"replication factor must be an int >= 1, got {replication_factor!r}")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{validate_topic_name(topic)}-{partition}"


def partition_path(topic: str, topic_id: str, partition: int) -> str:
    """``<topic id, 8 hex>/<topic>-<partition>``, relative to the node's data directory: each
    incarnation of a topic name gets its own directory, so deleting one never races with creating
    the next (Kafka renames a deleted log directory to ``.<id>-delete`` for the same reason), and
    each path component stays within the 255-byte file name limit that bounds topic names to 249
    characters."""
    return f"{topic_id[:8]}/{partition_dir_name(topic, partition)}"


def replica_actor_name(topic: str, topic_id: str, partition: int, replica_id: int) -> str:
    """Named by topic id too, so a replica of a deleted topic never answers for a new one."""
    return f"raylog-replica/{topic}/{topic_id[:8]}/{partition}/{replica_id}"


OFFSETS_TOPIC = "__consumer_offsets"
"""The internal compacted topic holding consumer groups' metadata and committed offsets (Kafka's name)."""
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})


def kafka_listener_actor_name(ray_node_id: str) -> str:
    """The Kafka listener of one Ray node (actors/kafka_listener.py), named like its node agent."""
    return f"{KAFKA_LISTENER_ACTOR_NAME}-{ray_node_id}"


def node_agent_actor_name(ray_node_id: str) -> str:
    """The node agent of one Ray node (for this Ray session: a restarted node gets a new one)."""
    return f"raylog-node-agent/{ray_node_id}"


def coordinator_actor_name(partition: int) -> str:
    """The group coordinator that owns partition ``partition`` of __consumer_offsets."""
    return f"raylog-coordinator/{partition}"
