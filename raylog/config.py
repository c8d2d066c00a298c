"""Typed, frozen configuration for topics and clients.

Names are Kafka's (topic configs and kafka-python's client configs) in
snake_case; defaults are Kafka's unless a comment says why raylog differs. Each
config validates itself at construction and raises InvalidConfigError, so a bad
value never reaches a log or a Ray call. Configs are passed whole; lower layers
only read them.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

from raylog.errors import InvalidConfigError

NEVER = 2**63 - 1
"""Kafka's 'no limit' for flush_messages / flush_ms (Long.MAX_VALUE)."""

C = TypeVar("C")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise InvalidConfigError(message)


def _check_int(obj: Any, name: str, minimum: int) -> None:
    value = getattr(obj, name)
    _check(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        f"{name} must be an int >= {minimum}, got {value!r}",
    )


def config_from_mapping(cls: type[C], values: Mapping[str, Any] | None = None, **kwargs: Any) -> C:
    """Build ``cls`` from Kafka-style keys ('segment.bytes' or 'segment_bytes'); unknown keys raise."""
    merged: dict[str, Any] = {}
    for key, value in {**(values or {}), **kwargs}.items():
        merged[str(key).replace(".", "_")] = value
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(merged) - known)
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.7)
            hints.append(f"{key} (did you mean {close[0]!r}?)" if close else key)
        raise InvalidConfigError(f"unknown {cls.__name__} keys: {', '.join(hints)}")
    return cls(**merged)


_NETWORK_KEYS = frozenset({
    "bootstrap_servers", "bootstrap_timeout_ms", "api_version", "client_dns_lookup", "connections_max_idle_ms",
    "reconnect_backoff_ms", "reconnect_backoff_max_ms", "receive_buffer_bytes", "send_buffer_bytes",
    "receive_message_max_bytes", "socket_options", "selector", "kafka_client", "proxy_url", "socks5_proxy",
    "security_protocol", "ssl_context", "ssl_check_hostname", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
    "ssl_crlfile", "ssl_password", "ssl_ciphers", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
    "sasl_kerberos_name", "sasl_kerberos_service_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider",
    "metric_reporters", "metrics_num_samples", "metrics_sample_window_ms",
})
"""kafka-python settings of the network, security and metrics-reporting layers: raylog's clients
call actors through Ray (Ray owns connections and their security), so these mean nothing here."""

IGNORED_CLIENT_KEYS: dict[str, frozenset[str]] = {
    "ProducerConfig": _NETWORK_KEYS | {"transaction_timeout_ms"},
    "ConsumerConfig": _NETWORK_KEYS | {
        "client_rack", "enable_incremental_fetch_sessions", "max_in_flight_requests_per_connection",
        "metric_group_prefix", "partition_assignment_strategy"},
    "AdminConfig": _NETWORK_KEYS | {"retry_backoff_ms", "metadata_max_age_ms", "max_in_flight_requests_per_connection"},
}
"""Per client config, the kafka-python keys accepted and ignored (with one warning naming them):
the network layer's, plus each client's own that raylog has no counterpart for (the consumer's
partition_assignment_strategy: assignment is the coordinator's, see group_remote_assignor)."""


def client_config(cls: type[C], values: Mapping[str, Any] | None = None) -> C:
    """Build a client config from kafka-python's keyword arguments: keys in
    IGNORED_CLIENT_KEYS are dropped with one warning naming them, unknown keys raise."""
    values = {str(k).replace(".", "_"): v for k, v in (values or {}).items()}
    ignored = sorted(set(values) & IGNORED_CLIENT_KEYS.get(cls.__name__, frozenset()))
    if ignored:
        logging.getLogger("raylog.config").warning(
            "%s: ignoring kafka-python settings that mean nothing inside Ray (Ray connects the clients to "
            "raylog's actors): %s", cls.__name__, ", ".join(ignored))
        for key in ignored:
            del values[key]
    return config_from_mapping(cls, values)


def _unbounded(obj: Any, name: str, bound: int | None) -> None:
    """kafka-python spells 'no limit' float('inf'); raylog's fields are ints (or None)."""
    if getattr(obj, name) == float("inf"):
        object.__setattr__(obj, name, bound)


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """kafka-python's KafkaAdminClient settings that raylog implements."""

    client_id: str = "raylog-admin"
    """Names this client in raylog's logs."""
    request_timeout_ms: int | None = None
    """Bound on each admin call; None: the cluster's (ClusterConfig.request_timeout_ms, 30 s by default)."""

    def __post_init__(self) -> None:
        _check(isinstance(self.client_id, str) and bool(self.client_id), "client_id must be a non-empty string")
        if self.request_timeout_ms is not None:
            _check_int(self, "request_timeout_ms", 1)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Per-topic log settings (Kafka's topic-level configs)."""

    cleanup_policy: str = "delete"
    """'delete' (retention removes old segments) or 'compact' (keep the last record per key)."""
    segment_bytes: int = 1 << 30
    """Roll to a new segment when the active one would pass this size. Kafka: 1 GiB."""
    segment_ms: int = 7 * 24 * 3600 * 1000
    """Roll when the active segment's first batch is older than this. Kafka: 7 days."""
    segment_index_bytes: int = 10 * 1024 * 1024
    """Size bound of each offset/time index file; a full index rolls the segment. Kafka: 10 MiB."""
    index_interval_bytes: int = 4096
    """Bytes of log between two offset-index entries (sparse index). Kafka: 4096."""
    retention_ms: int = 7 * 24 * 3600 * 1000
    """Delete segments whose newest record is older than this; -1 keeps them. Kafka: 7 days."""
    retention_bytes: int = -1
    """Delete the oldest segments while the log is larger than this; -1 = no bound. Kafka: -1."""
    max_message_bytes: int = 8 * 1024 * 1024
    """Largest record batch the log accepts. Kafka: 1 MiB; raylog batches harder (one Ray
    call costs ~1 ms, DESIGN.md), so producers send multi-MB batches."""
    flush_messages: int = NEVER
    """msync/fsync after this many records; default never: durability comes from replication."""
    flush_ms: int = NEVER
    """msync/fsync when the last flush is older than this. Kafka: never."""
    message_timestamp_type: str = "CreateTime"
    """'CreateTime' keeps the producer's timestamps; 'LogAppendTime' stamps the broker's clock."""
    delete_retention_ms: int = 24 * 3600 * 1000
    """How long compaction keeps tombstones (null values). Kafka: 1 day."""
    min_insync_replicas: int = 1
    """In-sync replicas (the leader included) an acks='all' produce needs: with fewer, it fails with
    NotEnoughReplicasError and is not acknowledged. When a topic is created without it, raylog sets
    2 if the replication factor is 3 or more, else 1 (``default_min_insync_replicas``). Kafka: 1,
    which most operators raise to 2: with 1, acks='all' is acknowledged by a leader alone whenever
    its followers are out of the ISR, and that leader's loss loses the record."""
    unclean_leader_election_enable: bool = False
    """With no in-sync replica alive, elect an out-of-sync one (losing what it lacks) instead of
    keeping the partition offline. Kafka: false."""

    def __post_init__(self) -> None:
        _check(self.cleanup_policy in ("delete", "compact"),
               f"cleanup_policy must be 'delete' or 'compact', got {self.cleanup_policy!r}")
        _check(self.message_timestamp_type in ("CreateTime", "LogAppendTime"),
               f"message_timestamp_type must be CreateTime or LogAppendTime, got {self.message_timestamp_type!r}")
        _check_int(self, "segment_bytes", 128)
        _check_int(self, "segment_ms", 1)
        _check_int(self, "segment_index_bytes", 64)
        _check_int(self, "index_interval_bytes", 0)
        _check_int(self, "retention_ms", -1)
        _check_int(self, "retention_bytes", -1)
        _check_int(self, "max_message_bytes", 64)
        _check_int(self, "flush_messages", 1)
        _check_int(self, "flush_ms", 0)
        _check_int(self, "delete_retention_ms", 0)
        _check_int(self, "min_insync_replicas", 1)
        _check(isinstance(self.unclean_leader_election_enable, bool),
               f"unclean_leader_election_enable must be a bool, got {self.unclean_leader_election_enable!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None = None, **kwargs: Any) -> "TopicConfig":
        """Build from Kafka's topic config keys ('retention.ms' or 'retention_ms') with values as
        Kafka's ConfigDef parses them (60000 or "60000", True or "true"). Kafka keys raylog does not
        implement (KAFKA_ONLY_TOPIC_CONFIGS) are dropped with one warning naming them; any other
        unknown key raises InvalidConfigError naming the nearest known one."""
        fields, ignored = split_topic_configs({**(values or {}), **kwargs})
        if ignored:
            logging.getLogger("raylog.config").warning(
                "topic configs %s are Kafka's but raylog does not implement them: accepted and ignored",
                ", ".join(ignored))
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


TOPIC_CONFIG_TYPES: dict[str, str] = {
    "cleanup_policy": "LIST", "segment_bytes": "INT", "segment_ms": "LONG", "segment_index_bytes": "INT",
    "index_interval_bytes": "INT", "retention_ms": "LONG", "retention_bytes": "LONG", "max_message_bytes": "INT",
    "flush_messages": "LONG", "flush_ms": "LONG", "message_timestamp_type": "STRING",
    "delete_retention_ms": "LONG", "min_insync_replicas": "INT", "unclean_leader_election_enable": "BOOLEAN",
}
"""Kafka's ConfigDef type of each TopicConfig field; it decides how a value is parsed."""

KAFKA_ONLY_TOPIC_CONFIGS: dict[str, tuple[str, str | None]] = {
    "compression.type": ("STRING", "producer"),
    "compression.gzip.level": ("INT", "-1"),
    "compression.lz4.level": ("INT", "9"),
    "compression.zstd.level": ("INT", "3"),
    "file.delete.delay.ms": ("LONG", "60000"),
    "follower.replication.throttled.replicas": ("LIST", ""),
    "leader.replication.throttled.replicas": ("LIST", ""),
    "local.retention.bytes": ("LONG", "-2"),
    "local.retention.ms": ("LONG", "-2"),
    "max.compaction.lag.ms": ("LONG", str(NEVER)),
    "message.downconversion.enable": ("BOOLEAN", "true"),
    "message.format.version": ("STRING", "3.0-IV1"),
    "message.timestamp.after.max.ms": ("LONG", str(NEVER)),
    "message.timestamp.before.max.ms": ("LONG", str(NEVER)),
    "message.timestamp.difference.max.ms": ("LONG", str(NEVER)),
    "min.cleanable.dirty.ratio": ("DOUBLE", "0.5"),
    "min.compaction.lag.ms": ("LONG", "0"),
    "preallocate": ("BOOLEAN", "false"),
    "remote.log.copy.disable": ("BOOLEAN", "false"),
    "remote.log.delete.on.disable": ("BOOLEAN", "false"),
    "remote.storage.enable": ("BOOLEAN", "false"),
    "segment.jitter.ms": ("LONG", "0"),
}
"""Kafka topic configs raylog does not implement: (Kafka type, Kafka's default). Scripts written for
Kafka set them (compression.type, min.cleanable.dirty.ratio, ...), so they are accepted and ignored
with a warning rather than failing the whole creation or alteration."""

_INTEGER_RANGES = {"INT": (-(2**31), 2**31 - 1), "LONG": (-(2**63), 2**63 - 1)}
_TYPE_WORDS = {"INT": "a whole number (32 bits)", "LONG": "a whole number (64 bits)",
               "BOOLEAN": "true or false", "STRING": "a string", "LIST": "a comma-separated string"}
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def topic_config_name(field: str) -> str:
    """Kafka's dotted name of a TopicConfig field: retention_ms -> retention.ms."""
    return field.replace("_", ".")


def coerce_topic_config(field: str, value: Any, given: str | None = None) -> Any:
    """``value`` parsed as Kafka's ConfigDef parses the field's type: INT/LONG take ints and decimal
    strings (surrounding whitespace ignored; no exponent, no fraction), BOOLEAN takes bools and
    "true"/"false" in any case, STRING/LIST take strings (trimmed). Anything else raises
    InvalidConfigError naming the key (as ``given``, and Kafka's name), the value and the type."""
    kind = TOPIC_CONFIG_TYPES[field]
    parsed = value
    if kind in _INTEGER_RANGES:
        if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
            parsed = int(value.strip())
        low, high = _INTEGER_RANGES[kind]
        ok = isinstance(parsed, int) and not isinstance(parsed, bool) and low <= parsed <= high
    elif kind == "BOOLEAN":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            parsed = value.strip().lower() == "true"
        ok = isinstance(parsed, bool)
    else:
        parsed = value.strip() if isinstance(value, str) else value
        ok = isinstance(parsed, str)
    if not ok:
        name = topic_config_name(field)
        named = name if given in (None, name) else f"{given} ({name})"
        raise InvalidConfigError(f"topic config {named}: {value!r} is not of type {kind} ({_TYPE_WORDS[kind]})")
    return parsed


def split_topic_configs(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Kafka-style topic configs -> (TopicConfig field -> parsed value, the Kafka-only keys given,
    dotted and sorted). An unknown key raises InvalidConfigError with the nearest known name."""
    fields: dict[str, Any] = {}
    ignored = []
    for key, value in values.items():
        field = str(key).strip().replace(".", "_")
        if field in TOPIC_CONFIG_TYPES:
            fields[field] = coerce_topic_config(field, value, str(key).strip())
        elif topic_config_name(field) in KAFKA_ONLY_TOPIC_CONFIGS:
            ignored.append(topic_config_name(field))
        else:
            known = [topic_config_name(f) for f in TOPIC_CONFIG_TYPES] + list(KAFKA_ONLY_TOPIC_CONFIGS)
            close = difflib.get_close_matches(topic_config_name(field), known, n=1)
            hint = f": did you mean {close[0]!r}?" if close else ""
            raise InvalidConfigError(f"unknown topic config {key!r}{hint}")
    return fields, sorted(set(ignored))


def default_min_insync_replicas(replication_factor: int) -> int:
    """min_insync_replicas of a topic created without one: 2 from replication factor 3 (a record
    acknowledged with acks='all' is then on two replicas, and a partition keeps taking writes with
    one replica down), else 1 (with 2 of 2, one lost replica would stop every write)."""
    return 2 if replication_factor >= 3 else 1


def listener_address(text: str, sasl: bool = False) -> tuple[str, int]:
    """(host, port) of a kafka_listener setting; InvalidConfigError for a host that is not loopback
    unless ``sasl`` (every connection must then log in)."""
    import ipaddress

    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    _check(bool(sep) and port.isdigit() and 0 < int(port) < 65536, f"kafka_listener {text!r} is not host:port")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    _check(loopback or sasl, f"kafka_listener {text!r}: a listener on a network address needs SASL "
                             "(kafka_listener_sasl=True and users from `raylog users add`), or a loopback address")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Where raylog keeps its actors and data on a Ray cluster, and the controller's settings
    (Kafka's broker configs that raylog has). Fixed when the controller first starts."""

    namespace: str = "raylog"
    """Ray namespace of every raylog actor, so any driver finds them by name."""
    data_root: str = "~/.raylog/data"
    """Each node's data directory unless the node says otherwise (its ``raylog.io/data-dir`` label
    or RAYLOG_DATA_DIR: placement/nodes.py): its identity (meta.properties) and its partitions; the
    head node's also holds the controller's metadata log under ``controller/``."""
    replica_max_restarts: int = -1
    """How often Ray restarts a crashed replica on its node (-1 = forever)."""
    request_timeout_ms: int = 30_000
    """Bound on any single admin or metadata call."""
    replica_lag_time_max_ms: int = 30_000
    """A follower that has not caught up with the leader for this long leaves the ISR. Kafka: 30 s."""
    replica_fetch_max_bytes: int = 8 * 1024 * 1024
    """Bytes a follower asks for per fetch. Kafka: 1 MiB; a Ray call costs ~1 ms, so followers pull MBs."""
    replica_fetch_wait_max_ms: int = 500
    """How long a follower's fetch waits at the leader for new data. Kafka: 500."""
    auto_leader_rebalance_enable: bool = True
    """Move leadership back to each partition's preferred (first) replica when it is in sync. Kafka: true."""
    leader_imbalance_check_interval_ms: int = 30_000
    """How often the controller checks for leaders away from their preferred replica. Kafka: 300 s;
    raylog checks sooner because Ray nodes come and go more often than brokers."""
    node_check_interval_ms: int = 1_000
    """How often the controller asks Ray which nodes are alive (one call to Ray's GCS)."""
    node_lost_timeout_ms: int = 10 * 60 * 1000
    """A node missing (its Ray node stopped, or not back after a restart) for this long is lost: each
    of its replicas is re-created on a live node without a replica of its partition, copied from
    the partition's leader (a partition with no leader, as an RF=1 one on that node, stays offline:
    it is never re-created empty). Until then the node's replicas wait for it, and a node that comes
    back with its disk recovers them in place and copies only what it missed. 10 minutes: a reboot,
    ``ray stop``/``ray start`` or a KubeRay pod rescheduled onto its volume takes 1-5 minutes, and
    moving replicas copies whole logs and throws away the returning node's copies (Kafka waits for
    an operator; Redpanda's partition_autobalancing_node_availability_timeout_sec is 15 minutes).
    -1 never moves them."""
    offsets_topic_num_partitions: int = 1
    """Partitions of ``__consumer_offsets``, fixed when it is created: one group coordinator actor
    and RF replica actors each (Kafka: 50, a broker's partitions being cheap). Each costs an idle
    process of about 60 MB and a second of CPU to start (docs/operations.md); raise it before the
    first group for thousands of groups."""
    offsets_topic_eager: bool = True
    """connect() starts the controller at once, and it creates ``__consumer_offsets`` and its
    coordinators as it starts, so a new cluster's first group joins at once. False: the controller
    starts on the first request and the topic is made when the first group asks (a cluster whose
    nodes join after raylog starts then spreads its replicas over them)."""
    log_cleaner_dedupe_buffer_size: int = 16 * 1024 * 1024
    """Bound, per replica, on the key map of one compaction round (key bytes plus ~100 bytes per
    key); a round maps as much of the dirty log as fits and the next round goes on from there.
    Kafka: 128 MiB shared by its cleaner threads; every raylog replica is its own process."""
    log_page_cache_window_bytes: int = 256 * 1024 * 1024
    """How much of each partition's newest data a replica leaves in the page cache: older bytes of
    the active segment are written back as they age and dropped from the cache (drop-behind), so a
    growing log does not grow the page cache with it; readers further behind read from disk. On
    this project's VMs page cache in fresh memory cost 6x more kernel time per GiB and made one
    producer's rate fall 35% by 10 GB (docs/performance.md). 0: leave it all to the kernel, as Kafka does."""
    replica_start_concurrency: int = 8
    """How many replicas the controller starts at once when it creates a topic or adds partitions
    (the next start as soon as one is up): each start is a process costing about a second of CPU,
    and 256 at once on two cores starved every process of the machine, the controller's answers
    to heartbeats included, for minutes."""
    replica_heartbeat_interval_ms: int = 2_000
    """How often each replica heartbeats the controller, renewing its lease (the controller pings
    the group coordinators as often). Kafka: broker.heartbeat.interval.ms, 2 s."""
    replica_session_timeout_ms: int = 9_000
    """A replica whose heartbeats stop for this long (paused, hung, cut off) is fenced: its
    partitions elect other leaders; a coordinator that answers no ping for this long is restarted.
    A leader acknowledges nothing once its own lease (this long from its last answered heartbeat,
    less a margin) has lapsed, and a controller the replicas cannot reach for this long is
    restarted. Kafka: broker.session.timeout.ms, 9 s."""
    auto_create_topics_enable: bool | None = None
    """Whether a producer or consumer may create a topic it does not find (Kafka's
    auto.create.topics.enable; the client must allow it too: allow_auto_create_topics). True: any
    client that allows it (Kafka's default); False: never; None (raylog's default): only clients
    that set allow_auto_create_topics=True explicitly, so a mistyped topic name in a program that
    never asked for auto-creation fails with UnknownTopicOrPartitionError instead of creating it."""
    kafka_listener: str = "127.0.0.1:9092"
    """host:port where Kafka clients reach raylog (Kafka's wire protocol, docs/kafka-protocol.md),
    served from the head node; the next free port if that one is taken (Cluster.bootstrap_servers
    says which). "" turns it off. A network address (not loopback) needs kafka_listener_sasl."""
    kafka_listener_sasl: bool = False
    """Every connection to the listener logs in (SASL PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) as a
    user added with `raylog users add`. Without it only processes of the cluster's own uid may
    connect, on loopback."""
    kafka_listener_tls_cert: str = ""
    """PEM certificate (chain) of the listener; with kafka_listener_tls_key, clients connect over
    TLS (security.protocol SSL, or SASL_SSL with kafka_listener_sasl)."""
    kafka_listener_tls_key: str = ""
    """PEM private key of kafka_listener_tls_cert."""
    offsets_commit_timeout_ms: int = 5_000
    """How long the Kafka listener waits on raylog's group coordinator for an OffsetCommit or a
    ConsumerGroupHeartbeat (finding it, starting __consumer_offsets, storing) before answering
    COORDINATOR_NOT_AVAILABLE, which clients retry. A connection answers in order, so a longer wait
    holds the group's heartbeats behind it. Kafka: offsets.commit.timeout.ms, 5 s."""
    num_partitions: int = 1
    """Partitions of an auto-created topic. Kafka: 1."""
    default_replication_factor: int = 1
    """Replication factor of an auto-created topic (at most the live nodes). Kafka: 1."""

    def __post_init__(self) -> None:
        _check(isinstance(self.namespace, str) and bool(self.namespace), "namespace must be a non-empty string")
        _check(isinstance(self.data_root, str) and bool(self.data_root), "data_root must be a non-empty string")
        _check_int(self, "replica_max_restarts", -1)
        _check_int(self, "request_timeout_ms", 1)
        _check_int(self, "replica_lag_time_max_ms", 1)
        _check_int(self, "replica_fetch_max_bytes", 1024)
        _check_int(self, "replica_fetch_wait_max_ms", 0)
        _check(isinstance(self.auto_leader_rebalance_enable, bool), "auto_leader_rebalance_enable must be a bool")
        _check_int(self, "leader_imbalance_check_interval_ms", 1)
        _check_int(self, "node_check_interval_ms", 10)
        _check_int(self, "node_lost_timeout_ms", -1)
        _check_int(self, "offsets_topic_num_partitions", 1)
        _check_int(self, "log_cleaner_dedupe_buffer_size", 1024)
        _check_int(self, "log_page_cache_window_bytes", 0)
        _check_int(self, "replica_start_concurrency", 1)
        _check_int(self, "replica_heartbeat_interval_ms", 10)
        _check_int(self, "replica_session_timeout_ms", 100)
        _check_int(self, "offsets_commit_timeout_ms", 1)
        _check(self.auto_create_topics_enable in (None, True, False),
               f"auto_create_topics_enable must be None or a bool, got {self.auto_create_topics_enable!r}")
        _check_int(self, "num_partitions", 1)
        _check_int(self, "default_replication_factor", 1)
        _check(isinstance(self.kafka_listener, str), "kafka_listener must be a 'host:port' string or ''")
        _check(isinstance(self.kafka_listener_sasl, bool), "kafka_listener_sasl must be a bool")
        _check(isinstance(self.kafka_listener_tls_cert, str) and isinstance(self.kafka_listener_tls_key, str)
               and bool(self.kafka_listener_tls_cert) == bool(self.kafka_listener_tls_key),
               "kafka_listener_tls_cert and kafka_listener_tls_key are paths, given both or neither")
        if self.kafka_listener:
            listener_address(self.kafka_listener, self.kafka_listener_sasl)
        _check(self.replica_session_timeout_ms >= 2 * self.replica_heartbeat_interval_ms,
               f"replica_session_timeout_ms ({self.replica_session_timeout_ms}) must be at least twice "
               f"replica_heartbeat_interval_ms ({self.replica_heartbeat_interval_ms})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MAX_IN_FLIGHT_WITH_IDEMPOTENCE = 5
"""The replica remembers this many batches per producer for deduplication (Kafka's bound)."""


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """kafka-python's KafkaProducer settings that raylog implements."""

    acks: int | str = "all"
    """0: don't wait for the replica; 1: wait for the leader's append; 'all' (= -1): wait until every
    in-sync replica has the batch. Kafka's default since 3.0."""
    batch_size: int = 1024 * 1024
    """Bytes of records per partition batch. Kafka: 16 KiB; raylog: 1 MiB, because a Ray call
    costs ~1 ms (DESIGN.md) and only big batches amortise it."""
    linger_ms: int = 5
    """Wait up to this long for a batch to fill. Kafka: 0 (raylog's batches are bigger; 5 ms
    keeps per-record send() batching well while bounding latency)."""
    compression_type: str | None = "lz4"
    """'gzip', 'snappy', 'lz4', 'zstd', or 'none' (or None): kafka-python's names. Kafka: none;
    raylog compresses by default as the brief asks, with lz4."""
    max_in_flight_requests_per_connection: int = 5
    """Unacknowledged batches per partition; order is kept by producer sequence numbers. At most 5
    with idempotence (the replica's deduplication window), as Kafka requires."""
    max_request_size: int = 8 * 1024 * 1024
    """Largest record the producer accepts (uncompressed, as Kafka checks it) and largest batch it
    sends; batches are also kept within the topic's max_message_bytes."""
    buffer_memory: int = 64 * 1024 * 1024
    """Bytes of unsent records before send() blocks (up to max_block_ms)."""
    max_block_ms: int = 60_000
    """How long send() may block on a full buffer or missing metadata, and (at most 0.25 s) while
    the sender takes up a stage the previous send() filled."""
    request_timeout_ms: int = 30_000
    """How long to wait for a produce response before retrying the batch."""
    retries: int = 2**31 - 1
    """Retries of a batch after a retriable error (same sequence: the replica drops duplicates);
    delivery_timeout_ms bounds them in time. Kafka's default; at least 1 with idempotence."""
    retry_backoff_ms: int = 100
    """First wait before a retry; doubles per attempt up to retry_backoff_max_ms, with +-20% jitter
    (KIP-580) so producers retrying together spread out."""
    retry_backoff_max_ms: int = 1000
    delivery_timeout_ms: int = 120_000
    """Give up on a batch this long after it was created, whatever the retries left. Kafka: 2 min."""
    enable_idempotence: bool = True
    """Stamp producer id and sequences so retries never duplicate and in-flight batches stay ordered."""
    metadata_max_age_ms: int = 300_000
    """Refresh a topic's partitions and leaders at least this often, even without errors. Kafka: 5 min."""
    client_id: str | None = None
    """Names this producer in logs and metrics; None: 'raylog-producer-<n>'."""
    partitioner: object = None
    """Chooses the partition of each record sent without one: a kafka-python Partitioner (an
    object with ``partition(topic, key, serialized_key, value, serialized_value, cluster)``) or a
    callable ``(serialized_key, all_partitions, available_partitions)``. None: murmur2 of the key
    as Kafka's Java client, sticky batches for records without a key."""
    allow_auto_create_topics: bool | None = None
    """Create a topic that does not exist on first send, if the cluster allows it
    (ClusterConfig.auto_create_topics_enable). kafka-python: True; None here means 'not asked'."""
    transactional_id: str | None = None
    """Transactions do not exist yet: only None is accepted."""
    metrics_enabled: bool = True
    """Keep the counters metrics() reports."""
    key_serializer: object = None
    """Callable turning a key into bytes; None means keys are bytes (or str, encoded UTF-8)."""
    value_serializer: object = None
    """Callable turning a value into bytes; None means values are bytes (or str, encoded UTF-8)."""
    local_produce: bool = True
    """Send batches for a partition whose leader runs on this Ray node over a Unix socket to the
    replica (raylog/produce_channel.py) instead of a Ray call: the same produce, ~0.7 ms sooner.
    metrics() counts the requests that went each way."""

    def __post_init__(self) -> None:
        _unbounded(self, "retries", 2**31 - 1)
        _check(self.acks in (0, 1, -1, "all", "0", "1", "-1"), f"acks must be 0, 1 or 'all' (-1), got {self.acks!r}")
        _check(self.client_id is None or (isinstance(self.client_id, str) and bool(self.client_id)),
               f"client_id must be None or a non-empty string, got {self.client_id!r}")
        _check(self.partitioner is None or callable(self.partitioner) or callable(getattr(self.partitioner, "partition", None)),
               "partitioner must be a kafka-python Partitioner (with a partition() method) or a callable")
        _check(self.allow_auto_create_topics in (None, True, False), "allow_auto_create_topics must be a bool")
        _check(self.transactional_id is None, "transactional_id: raylog has no transactions yet (leave it None; "
                                              "enable_idempotence keeps each partition's records exactly once)")
        _check(isinstance(self.metrics_enabled, bool), "metrics_enabled must be a bool")
        _check(self.compression_type in (None, "none", "gzip", "snappy", "lz4", "zstd"),
               f"compression_type must be None, 'none', 'gzip', 'snappy', 'lz4' or 'zstd', "
               f"got {self.compression_type!r}")
        _check_int(self, "batch_size", 1)
        _check_int(self, "linger_ms", 0)
        _check_int(self, "max_in_flight_requests_per_connection", 1)
        _check_int(self, "max_request_size", 64)
        _check_int(self, "buffer_memory", 1024)
        _check_int(self, "max_block_ms", 0)
        _check_int(self, "request_timeout_ms", 1)
        _check_int(self, "retries", 0)
        _check_int(self, "retry_backoff_ms", 0)
        _check_int(self, "retry_backoff_max_ms", 0)
        _check_int(self, "delivery_timeout_ms", 1)
        _check_int(self, "metadata_max_age_ms", 0)
        _check(isinstance(self.enable_idempotence, bool), f"enable_idempotence must be a bool, got {self.enable_idempotence!r}")
        _check(isinstance(self.local_produce, bool), f"local_produce must be a bool, got {self.local_produce!r}")
        if self.enable_idempotence:
            _check(self.max_in_flight_requests_per_connection <= MAX_IN_FLIGHT_WITH_IDEMPOTENCE,
                   f"max_in_flight_requests_per_connection must be <= {MAX_IN_FLIGHT_WITH_IDEMPOTENCE} with "
                   f"enable_idempotence, got {self.max_in_flight_requests_per_connection}")
            _check(self.retries >= 1, "retries must be >= 1 with enable_idempotence (set enable_idempotence=False "
                                      "to send each batch once)")
        for name in ("key_serializer", "value_serializer"):
            _check(getattr(self, name) is None or callable(getattr(self, name)), f"{name} must be callable")

    @property
    def required_acks(self) -> int:
        return -1 if self.acks in ("all", -1, "-1") else int(self.acks)


ASSIGNORS = ("uniform", "range")


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """kafka-python's KafkaConsumer settings that raylog implements, and KIP-848's group ones."""

    group_id: str | None = None
    """The consumer group to join on subscribe(), and to commit offsets for. None: no group."""
    group_instance_id: str | None = None
    """Static membership (KIP-345): a member that restarts with the same id within
    session_timeout_ms gets its partitions back without moving any."""
    session_timeout_ms: int = 45_000
    """The coordinator removes a member that has not heartbeated for this long. Kafka: 45 s."""
    heartbeat_interval_ms: int = 3_000
    """How often the member heartbeats (at most; also at least 3 times per session). kafka-python: 3 s."""
    max_poll_interval_ms: int = 300_000
    """A member that does not call poll() for this long leaves the group (its partitions move) and
    rejoins at its next poll; it is also how long it may take to give up partitions. Kafka: 5 min."""
    enable_auto_commit: bool = True
    """Commit the positions of what poll() returned, every auto_commit_interval_ms, before a
    partition is revoked, and on close(). Kafka: true."""
    auto_commit_interval_ms: int = 5_000
    group_remote_assignor: str = "uniform"
    """The coordinator-side assignor (KIP-848's group.remote.assignor): 'uniform' (sticky) or 'range'."""
    client_id: str = "raylog-consumer"

    auto_offset_reset: str = "latest"
    """Where to start without a position or after OffsetOutOfRange: 'earliest', 'latest' or 'none' (raise)."""
    fetch_min_bytes: int = 1
    """The replica holds a fetch until this many bytes are available (or fetch_max_wait_ms passes)."""
    fetch_max_wait_ms: int = 500
    """Longest a replica holds a fetch waiting for fetch_min_bytes."""
    max_partition_fetch_bytes: int = 8 * 1024 * 1024
    """Bytes per partition per fetch (at least one batch is returned). Kafka: 1 MiB; raylog
    fetches MBs per call because each call costs ~1 ms."""
    fetch_max_bytes: int = 50 * 1024 * 1024
    """Bytes the consumer holds at most, fetched but not yet returned by poll() plus asked for in
    fetches in flight, over all its partitions (at least one fetch is always allowed). Kafka: 50 MiB."""
    max_poll_records: int = 500
    """Most records one poll() returns. Kafka: 500. poll_batch() has its own bound (its
    max_records argument), as its records are column views, not objects."""
    request_timeout_ms: int = 30_000
    """How long to wait for a fetch response beyond fetch_max_wait_ms."""
    consumer_timeout_ms: int | None = None
    """Iterating the consumer stops after this long without a record; None waits forever (kafka-python)."""
    metadata_max_age_ms: int = 300_000
    """Refresh partitions and leaders at least this often, even without errors. Kafka: 5 min."""
    key_deserializer: object = None
    value_deserializer: object = None
    check_crcs: bool = True
    """Verify each fetched batch's CRC32C before decoding it."""
    isolation_level: str = "read_uncommitted"
    """kafka-python's; 'read_uncommitted' is the one level until raylog has transactions (every
    record up to the high watermark is visible), so 'read_committed' is refused."""
    allow_auto_create_topics: bool | None = None
    """Create a subscribed or assigned topic that does not exist, if the cluster allows it
    (ClusterConfig.auto_create_topics_enable). kafka-python: True; None here means 'not asked'."""
    default_offset_commit_callback: object = None
    """Called as ``fn(offsets, response)`` when a commit_async() without its own callback, or an
    auto-commit, completes: ``response`` is None on success, else the error. kafka-python's."""
    retry_backoff_ms: int = 100
    """Wait before fetching again from a partition whose fetch failed with a retriable error."""
    exclude_internal_topics: bool = True
    """Leave internal topics (``__consumer_offsets``) out of topics() and pattern subscriptions."""
    metrics_enabled: bool = True
    """Keep the counters metrics() reports."""
    local_reads: bool = True
    """Read a partition whose leader, or else an in-sync follower, runs on this Ray node straight
    from its segment files (raylog/storage/local_reader.py), with no call per fetch, and wait for
    new records asleep on its page (woken by the replica) instead of parked fetches; the records
    are the ones the leader's fetch returns, and anything else (another node, a change under
    way) is fetched. metrics() counts the bytes that came each way."""

    def __post_init__(self) -> None:
        _unbounded(self, "consumer_timeout_ms", None)
        _check(isinstance(self.local_reads, bool), "local_reads must be a bool")
        _check(self.isolation_level == "read_uncommitted",
               f"isolation_level must be 'read_uncommitted' (raylog has no transactions yet), got {self.isolation_level!r}")
        _check(self.allow_auto_create_topics in (None, True, False), "allow_auto_create_topics must be a bool")
        _check(self.default_offset_commit_callback is None or callable(self.default_offset_commit_callback),
               "default_offset_commit_callback must be callable")
        _check_int(self, "retry_backoff_ms", 0)
        _check(isinstance(self.exclude_internal_topics, bool), "exclude_internal_topics must be a bool")
        _check(isinstance(self.metrics_enabled, bool), "metrics_enabled must be a bool")
        _check(self.auto_offset_reset in ("earliest", "latest", "none"),
               f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {self.auto_offset_reset!r}")
        _check_int(self, "fetch_min_bytes", 0)
        _check_int(self, "fetch_max_wait_ms", 0)
        _check_int(self, "max_partition_fetch_bytes", 1)
        _check_int(self, "fetch_max_bytes", 1)
        _check_int(self, "metadata_max_age_ms", 0)
        for name in ("group_id", "group_instance_id"):
            value = getattr(self, name)
            _check(value is None or (isinstance(value, str) and bool(value)),
                   f"{name} must be None or a non-empty string, got {value!r}")
        _check(self.group_instance_id is None or self.group_id is not None,
               "group_instance_id needs a group_id")
        _check_int(self, "session_timeout_ms", 1)
        _check_int(self, "heartbeat_interval_ms", 1)
        _check_int(self, "max_poll_interval_ms", 1)
        _check_int(self, "auto_commit_interval_ms", 1)
        _check(isinstance(self.enable_auto_commit, bool), f"enable_auto_commit must be a bool, got {self.enable_auto_commit!r}")
        _check(self.group_remote_assignor in ASSIGNORS,
               f"group_remote_assignor must be one of {ASSIGNORS}, got {self.group_remote_assignor!r}")
        _check(self.consumer_timeout_ms is None or (isinstance(self.consumer_timeout_ms, int)
                                                    and self.consumer_timeout_ms >= 0),
               f"consumer_timeout_ms must be None or an int >= 0, got {self.consumer_timeout_ms!r}")
        _check_int(self, "max_poll_records", 1)
        _check_int(self, "request_timeout_ms", 1)
        for name in ("key_deserializer", "value_deserializer"):
            _check(getattr(self, name) is None or callable(getattr(self, name)), f"{name} must be callable")
