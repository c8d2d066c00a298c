"""raylog: a durable, partitioned commit log on Ray, with Kafka's client API.

    import raylog
    cluster = raylog.connect()
    # or, as in kafka-python: raylog.KafkaProducer(), raylog.KafkaConsumer("events", group_id="g")
    cluster.admin().create_topic("events", num_partitions=3)
    producer = cluster.producer()
    producer.send("events", b"hello", key=b"k").get(timeout=10)
    consumer = cluster.consumer("events", auto_offset_reset="earliest")
    records = consumer.poll(timeout_ms=1000)

Names are re-exported lazily, so ``import raylog.storage`` never loads Ray.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "connect": "raylog.cluster",
    "Cluster": "raylog.cluster",
    "Producer": "raylog.producer",
    "Consumer": "raylog.consumer",
    "AdminClient": "raylog.admin",
    "NewTopic": "raylog.admin",
    "NewPartitions": "raylog.admin",
    "OffsetSpec": "raylog.admin",
    "OffsetTimestamp": "raylog.admin",
    "AdminConfig": "raylog.config",
    "ConfigResource": "raylog.topic_configs",
    "ConfigResourceType": "raylog.topic_configs",
    "AlterConfigOp": "raylog.topic_configs",
    "ConfigEntry": "raylog.topic_configs",
    "ColumnBatch": "raylog.consumer.column_batch",
    "TopicConfig": "raylog.config",
    "ProducerConfig": "raylog.config",
    "ConsumerConfig": "raylog.config",
    "ClusterConfig": "raylog.config",
    "TopicPartition": "raylog.records",
    "RecordMetadata": "raylog.records",
    "ConsumerRecord": "raylog.records",
    "OffsetAndTimestamp": "raylog.records",
    "OffsetAndMetadata": "raylog.records",
    "ConsumerGroupMetadata": "raylog.records",
    "ConsumerRebalanceListener": "raylog.consumer.group_member",
    "errors": "raylog.errors",
}
_EXPORTS.update({name: "raylog.errors" for name in (
    "RaylogError", "InvalidTopicError", "UnknownTopicOrPartitionError", "RecordTooLargeError",
    "OffsetOutOfRangeError", "CorruptRecordError", "InvalidConfigError", "KafkaTimeoutError",
    "TopicAlreadyExistsError", "NoOffsetForPartitionError", "InvalidPartitionError",
    "InvalidRecordError", "IllegalStateError", "ReplicaNotAvailableError", "NotEnoughReplicasError",
    "NotLeaderForPartitionError", "LeaderNotAvailableError", "InvalidReplicationFactorError",
    "CommitFailedError", "FencedMemberEpochError", "UnknownMemberIdError", "GroupIdNotFoundError",
    "NonEmptyGroupError", "CoordinatorNotAvailableError", "OutOfOrderSequenceError", "ActorCallError",
    "DuplicateSequenceError", "OffsetNotAvailableError", "KafkaStorageError", "InvalidRequestError",
    "ControllerNotAvailableError", "ClusterNotAvailableError", "TopicCreationIncompleteError",
    "KafkaError", "NoBrokersAvailable", "LogDirError", "InconsistentClusterIdError", "DataDirectoryInUseError",
)})

_ALIASES = {"KafkaProducer": "Producer", "KafkaConsumer": "Consumer", "KafkaAdminClient": "AdminClient"}
"""kafka-python's class names: porting a kafka-python program is an import change."""

__all__ = sorted([*_EXPORTS, *_ALIASES])


def __getattr__(name: str):
    if name in _ALIASES:
        value = globals()[name] = __getattr__(_ALIASES[name])
        return value
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'raylog' has no attribute {name!r}")
    mod = importlib.import_module(module)
    value = mod if name == "errors" else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
