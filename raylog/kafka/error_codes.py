"""raylog's errors as Kafka's error codes, so a Kafka client reacts as it does against Kafka:
a retriable code (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, ...) makes it refresh its
metadata and send again; any other fails the request with that code's exception."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from raylog import errors as e

_CODES: dict[type, ErrorCode] = {
    e.UnsupportedCodecError: ErrorCode.unsupported_compression_type,
    e.CorruptRecordError: ErrorCode.corrupt_message,
    e.InvalidRecordError: ErrorCode.invalid_record,
    e.RecordTooLargeError: ErrorCode.message_too_large,
    e.InvalidTopicError: ErrorCode.invalid_topic_exception,
    e.InvalidPartitionError: ErrorCode.unknown_topic_or_partition,
    e.OffsetOutOfRangeError: ErrorCode.offset_out_of_range,
    e.TopicAlreadyExistsError: ErrorCode.topic_already_exists,
    e.InvalidReplicationFactorError: ErrorCode.invalid_replication_factor,
    e.OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    e.DuplicateSequenceError: ErrorCode.duplicate_sequence_number,
    e.InvalidProducerEpochError: ErrorCode.invalid_producer_epoch,
    e.InvalidRequestError: ErrorCode.invalid_request,
    e.InvalidConfigError: ErrorCode.invalid_config,
    e.UnknownTopicOrPartitionError: ErrorCode.unknown_topic_or_partition,
    e.NotLeaderForPartitionError: ErrorCode.not_leader_or_follower,
    e.FencedLeaderEpochError: ErrorCode.fenced_leader_epoch,
    e.LeaderNotAvailableError: ErrorCode.leader_not_available,
    e.ReplicaNotAvailableError: ErrorCode.replica_not_available,
    e.NotEnoughReplicasError: ErrorCode.not_enough_replicas,
    e.KafkaTimeoutError: ErrorCode.request_timed_out,
    e.OffsetNotAvailableError: ErrorCode.offset_not_available,
    e.KafkaStorageError: ErrorCode.kafka_storage_error,
    e.CoordinatorNotAvailableError: ErrorCode.coordinator_not_available,
    e.UnknownMemberIdError: ErrorCode.unknown_member_id,
    e.FencedMemberEpochError: ErrorCode.fenced_member_epoch,
    e.StaleMemberEpochError: ErrorCode.stale_member_epoch,
    e.CommitFailedError: ErrorCode.illegal_generation,
    e.UnreleasedInstanceIdError: ErrorCode.unreleased_instance_id,
    e.GroupIdNotFoundError: ErrorCode.group_id_not_found,
    e.NonEmptyGroupError: ErrorCode.non_empty_group,
    e.InvalidGroupIdError: ErrorCode.invalid_group_id,
    e.TopicCreationIncompleteError: ErrorCode.leader_not_available,
    e.ActorCallError: ErrorCode.not_leader_or_follower,
    e.ClusterNotAvailableError: ErrorCode.broker_not_available,
    e.ControllerNotAvailableError: ErrorCode.not_controller,
}


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for ``exc``: its class's or its nearest base's; a retriable raylog error
    with no code of its own is Kafka's retriable REQUEST_TIMED_OUT, anything else
    UNKNOWN_SERVER_ERROR."""
    for cls in type(exc).__mro__:
        code = _CODES.get(cls)
        if code is not None:
            return code
    if isinstance(exc, e.RaylogError) and exc.retriable:
        return ErrorCode.request_timed_out
    return ErrorCode.unknown_server_error
