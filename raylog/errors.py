"""raylog's one error tree.

Every error the public API raises derives from :class:`RaylogError`, so users
catch one class. ``retriable`` says whether the same request may succeed if
sent again (after a metadata refresh, a leader change or a wait); client retry
loops read that flag and nothing else. Errors carry only plain strings and
numbers so they pickle across Ray calls unchanged.
"""

from __future__ import annotations


class RaylogError(Exception):
    """Root of every raylog error."""

    retriable: bool = False


# --- bad input: a request that can never succeed as sent ---------------------


class InvalidConfigError(RaylogError):
    """A config value is out of range, of the wrong type or unknown."""


class InvalidTopicError(RaylogError):
    """A topic name breaks Kafka's rule: [a-zA-Z0-9._-], 1..249 chars, not '.' or '..'."""


class CorruptRecordError(RaylogError):
    """Bytes that claim to be a record batch fail validation (length, magic or CRC)."""


class UnsupportedCodecError(CorruptRecordError):
    """A batch names a compression codec raylog does not implement."""


class InvalidRecordError(RaylogError):
    """A well-formed batch the log refuses, e.g. a null key on a compacted topic."""


class RecordTooLargeError(RaylogError):
    """A record or batch exceeds max_request_size / max_message_bytes."""


class InvalidPartitionError(RaylogError):
    """A partition number outside the topic's partitions."""


class InvalidOffsetError(RaylogError):
    """An offset that cannot be used for the request (negative, or not a batch boundary)."""


class OffsetOutOfRangeError(RaylogError):
    """A fetch offset below the log start offset or above the log end offset."""

    def __init__(self, message: str, log_start_offset: int = -1, log_end_offset: int = -1):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset

    def __reduce__(self):
        return (type(self), (self.args[0], self.log_start_offset, self.log_end_offset))


class NoOffsetForPartitionError(RaylogError):
    """The consumer has no position for a partition and auto_offset_reset is 'none'."""


class TopicAlreadyExistsError(RaylogError):
    """create_topics named a topic that exists."""


class InvalidReplicationFactorError(RaylogError):
    """More replicas asked for than there are live nodes to hold them apart."""


class OutOfOrderSequenceError(RaylogError):
    """A producer batch's sequence number skips ahead and the gap did not fill in time."""


class DuplicateSequenceError(RaylogError):
    """A producer batch's sequence is older than the batches the replica remembers for that producer:
    it was sent before and may be in the log, but where is no longer known. The producer must not
    send it again (it would be appended twice); its records fail with this error (Kafka's
    DUPLICATE_SEQUENCE_NUMBER, without the offsets)."""


class InvalidProducerEpochError(RaylogError):
    """A producer batch carries an epoch older than one the partition has seen from that producer
    (the producer moved on after a failure it could not resolve, KIP-360): it was not appended."""


class IllegalStateError(RaylogError):
    """The call is not allowed in the object's current state (closed producer, unassigned partition)."""


class RaySessionEndedError(IllegalStateError):
    """The Ray session this client was made in has ended (ray.shutdown(), perhaps followed by a new
    ray.init()): its actor handles are gone with it. Make a new client after raylog.connect()."""


class CommitFailedError(RaylogError):
    """A commit the group coordinator refused: the member's epoch is fenced or stale, or the member
    no longer owns the partition (it moved to another member). kafka-python's name."""


class UnknownMemberIdError(RaylogError):
    """The group has no member with this id (it left, timed out, or never joined)."""


class FencedMemberEpochError(RaylogError):
    """The member's epoch is fenced (KIP-848): it lost its partitions and must rejoin with epoch 0."""


class StaleMemberEpochError(CommitFailedError):
    """A commit or request carries a member epoch older than the member's current one."""


class UnreleasedInstanceIdError(RaylogError):
    """A static member (group_instance_id) joined while another live member holds that instance id."""


class GroupIdNotFoundError(RaylogError):
    """No consumer group has this id."""


class NonEmptyGroupError(RaylogError):
    """The operation needs the group to have no members (deleting it, resetting its offsets)."""


class InvalidGroupIdError(RaylogError):
    """A group id that is empty or not a string."""


class UnknownUserError(RaylogError):
    """A Kafka listener user (``raylog users``) that does not exist."""


class InvalidRequestError(RaylogError):
    """A request to a raylog actor with arguments of the wrong type or out of range (a caller that went
    past the clients, or a client bug); nothing was changed (Kafka's INVALID_REQUEST)."""


# --- the cluster: may succeed when retried ------------------------------------


class UnknownTopicOrPartitionError(RaylogError):
    """The topic or partition does not exist (yet, or any more)."""

    retriable = True


class NotLeaderForPartitionError(RaylogError):
    """The replica asked is not the partition's leader; refresh metadata and retry."""

    retriable = True


class FencedLeaderEpochError(RaylogError):
    """A request named a leader epoch older than the replica's (the caller's metadata is stale), or
    a replaced leader asked to change the ISR (it is fenced for good). Refresh metadata and retry."""

    retriable = True


class LeaderNotAvailableError(RaylogError):
    """The partition has no leader right now: an election is under way, or no in-sync replica is
    alive and unclean_leader_election_enable is off (the partition stays offline, never truncated)."""

    retriable = True


class ReplicaNotAvailableError(RaylogError):
    """The replica's actor is dead or restarting."""

    retriable = True


class NotEnoughReplicasError(RaylogError):
    """Fewer in-sync replicas than the topic's min_insync_replicas: an acks='all' produce is refused
    (before the append) or not acknowledged (after it)."""

    retriable = True


class KafkaTimeoutError(RaylogError):
    """A request did not complete within its time limit."""

    retriable = True


class OffsetNotAvailableError(RaylogError):
    """A newly elected leader cannot answer for its latest offset yet: its high watermark is still
    below where its leader epoch began (followers have not fetched from it), and answering would
    report an offset below records the previous leader acknowledged (Kafka's OFFSET_NOT_AVAILABLE)."""

    retriable = True


class LogDirError(RaylogError):
    """A data directory (a node's, or a partition's) cannot be opened, written or recovered."""


class InconsistentClusterIdError(LogDirError):
    """A node's data directory belongs to another cluster (its meta.properties names another cluster
    id): it is refused, never mixed in (Kafka's INCONSISTENT_CLUSTER_ID)."""


class DataDirectoryInUseError(LogDirError):
    """Another live process holds the directory's lock: two Ray nodes configured with one data
    directory, or a replica whose previous process has not exited yet."""


class KafkaStorageError(RaylogError):
    """The log directory cannot be written, e.g. the disk is full; nothing was appended. The same
    request succeeds once space returns (or on a new leader whose disk has room)."""

    retriable = True


class CoordinatorNotAvailableError(RaylogError):
    """The group's coordinator actor is dead, restarting or still loading its offsets partition."""

    retriable = True


class TopicCreationIncompleteError(RaylogError):
    """Some replicas of a topic being created (or grown) did not start (Ray failed the actor, or its
    node left the cluster): the topic exists, ``missing`` lists the (partition, replica) pairs not
    started, and creating the topic again with the same partitions and replication factor
    finishes it."""

    retriable = True

    def __init__(self, message: str, missing: list | tuple = ()):
        super().__init__(message)
        self.missing = [tuple(m) for m in missing]

    def __reduce__(self):
        return (type(self), (self.args[0], self.missing))


class ActorCallError(RaylogError):
    """A raylog actor failed a call with an exception that is not raylog's own (a bug), or Ray failed
    the call in a way raylog has no better error for: the message names the call and the exception;
    ``remote_traceback`` has the actor's stack when there is one."""

    def __init__(self, message: str, remote_traceback: str = ""):
        super().__init__(message)
        self.remote_traceback = remote_traceback

    def __reduce__(self):
        return (type(self), (self.args[0], self.remote_traceback))


class ClusterNotAvailableError(RaylogError):
    """No Ray cluster answers at the address connect() was given (or that RAY_ADDRESS names)."""

    retriable = True


class ControllerNotAvailableError(RaylogError):
    """No controller actor could be reached or started."""

    retriable = True


KafkaError = RaylogError
"""kafka-python's base error name, so ``except KafkaError`` ported from kafka-python catches raylog's errors."""
NoBrokersAvailable = ClusterNotAvailableError
"""kafka-python's name for 'nothing answers at the address given'."""
