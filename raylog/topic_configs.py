"""The topic config catalogue: Kafka's names, types, string forms and documentation of every topic
config, what describe_configs reports, and how an alteration resolves (no Ray, no I/O).

TopicConfig (raylog/config.py) holds the values and their checks; this module says how they look
to a Kafka user. Every config raylog implements can be altered on a live topic (as in Kafka); the
Kafka configs raylog does not implement (config.KAFKA_ONLY_TOPIC_CONFIGS) are accepted and ignored,
and described as read-only at Kafka's default. A topic remembers which of its configs were set (at
creation or by an alteration): those are DYNAMIC_TOPIC_CONFIG, the others DEFAULT_CONFIG, and
deleting a set config returns it to its default.
"""

from __future__ import annotations

import ast
import enum
import functools
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from raylog import config as config_module
from raylog.config import (
    KAFKA_ONLY_TOPIC_CONFIGS, TOPIC_CONFIG_TYPES, TopicConfig, coerce_topic_config, default_min_insync_replicas,
    split_topic_configs, topic_config_name,
)
from raylog.errors import InvalidConfigError, InvalidRequestError

DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
DEFAULT_CONFIG = "DEFAULT_CONFIG"


@dataclass(frozen=True)
class ConfigEntry:
    """One topic config as describe reports it (Kafka's DescribeConfigs entry)."""

    name: str
    """Kafka's dotted name, e.g. 'retention.ms'."""
    value: str | None
    """Kafka's string form of the value ('true'/'false' for booleans)."""
    source: str
    """'DYNAMIC_TOPIC_CONFIG' (set at creation or altered) or 'DEFAULT_CONFIG'."""
    is_default: bool
    read_only: bool
    """True for the Kafka configs raylog accepts and ignores."""
    documentation: str


class ConfigResourceType(enum.IntEnum):
    """Kafka's config resource types (kafka-python's values); raylog has TOPIC configs only."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class AlterConfigOp(enum.IntEnum):
    """Kafka's IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass
class ConfigResource:
    """kafka-python's ConfigResource: ``ConfigResource(ConfigResourceType.TOPIC, 'events',
    configs={'retention.ms': '60000'})``. ``resource_type`` may be the type's name ('topic');
    ``configs`` is a list of keys (describe), a dict of key -> value (alter), or a dict of key ->
    (op, value) (incremental alter); None describes every config."""

    resource_type: Any
    name: str
    configs: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.resource_type, ConfigResourceType):
            try:
                self.resource_type = (ConfigResourceType(self.resource_type) if isinstance(self.resource_type, int)
                                      else ConfigResourceType[str(self.resource_type).upper()])
            except (KeyError, ValueError):
                raise InvalidRequestError(f"unknown config resource type {self.resource_type!r}") from None

    def topic(self) -> str:
        """The topic this resource names; raylog keeps no broker, logger or group configs."""
        if self.resource_type is not ConfigResourceType.TOPIC:
            raise InvalidRequestError(
                f"raylog has topic configs only, not {self.resource_type.name} configs (the cluster's settings "
                "are ClusterConfig, fixed when the controller starts)")
        return self.name


def kafka_string(value: Any) -> str | None:
    """A config value in Kafka's string form: booleans 'true'/'false', numbers in decimal."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@functools.lru_cache(maxsize=1)
def _field_docs() -> dict[str, str]:
    """Each TopicConfig field's docstring (the string literal after it in config.py)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(config_module)))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == TopicConfig.__name__)
    docs, last = {}, None
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            last = node.target.id
        elif (last is not None and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
              and isinstance(node.value.value, str)):
            docs[last] = " ".join(node.value.value.split())
            last = None
        else:
            last = None
    return docs


def documentation(name: str) -> str:
    """The documentation of a topic config, by its dotted name."""
    if name in KAFKA_ONLY_TOPIC_CONFIGS:
        return f"Kafka's {name}; raylog does not implement it (accepted and ignored)."
    return _field_docs().get(name.replace(".", "_"), "")


def names() -> list[str]:
    """Every topic config name describe reports: raylog's, then Kafka's that raylog ignores."""
    return sorted(topic_config_name(f) for f in TOPIC_CONFIG_TYPES) + sorted(KAFKA_ONLY_TOPIC_CONFIGS)


def kafka_type(name: str) -> str:
    """Kafka's ConfigDef type of a config (INT, LONG, BOOLEAN, STRING, LIST, DOUBLE)."""
    if name in KAFKA_ONLY_TOPIC_CONFIGS:
        return KAFKA_ONLY_TOPIC_CONFIGS[name][0]
    return TOPIC_CONFIG_TYPES[name.replace(".", "_")]


def defaults(replication_factor: int) -> dict[str, Any]:
    """The value of every TopicConfig field a topic has when it does not set it."""
    return {**TopicConfig().to_dict(), "min_insync_replicas": default_min_insync_replicas(replication_factor)}


def overrides_of(config: Mapping[str, Any], replication_factor: int) -> list[str]:
    """The fields a topic sets, for topics recorded before raylog remembered them: those whose value
    differs from the default."""
    base = defaults(replication_factor)
    return sorted(f for f, v in config.items() if f in base and base[f] != v)


def describe(config: Mapping[str, Any], overrides: Iterable[str]) -> list[ConfigEntry]:
    """Every topic config of a topic whose TopicConfig is ``config`` (field -> value) and which sets
    the fields ``overrides``, in name order (raylog's), then Kafka's ignored ones."""
    overrides = set(overrides)
    entries = []
    for field in sorted(TOPIC_CONFIG_TYPES, key=topic_config_name):
        name = topic_config_name(field)
        dynamic = field in overrides
        entries.append(ConfigEntry(name, kafka_string(config.get(field)), DYNAMIC_TOPIC_CONFIG if dynamic
                                   else DEFAULT_CONFIG, not dynamic, False, documentation(name)))
    for name in sorted(KAFKA_ONLY_TOPIC_CONFIGS):
        entries.append(ConfigEntry(name, KAFKA_ONLY_TOPIC_CONFIGS[name][1], DEFAULT_CONFIG, True, True,
                                   documentation(name)))
    return entries


@dataclass(frozen=True)
class Alteration:
    """What an alteration resolves to: the topic's whole new config and the fields it sets."""

    config: TopicConfig
    overrides: tuple[str, ...]
    ignored: tuple[str, ...]
    """Kafka-only keys the request named (accepted and ignored)."""


def _field_of(key: Any) -> str | None:
    """The TopicConfig field a key names, None for a Kafka-only key; unknown keys raise."""
    field = str(key).strip().replace(".", "_")
    if field in TOPIC_CONFIG_TYPES:
        return field
    if topic_config_name(field) in KAFKA_ONLY_TOPIC_CONFIGS:
        return None
    split_topic_configs({key: ""})  # raises InvalidConfigError naming the nearest known key
    raise AssertionError("unreachable")


def check_names(keys: Iterable[Any]) -> None:
    """Raise InvalidConfigError, naming the nearest known key, for any key that is no topic config."""
    for key in keys:
        _field_of(key)


def _operation(key: Any, op: Any) -> AlterConfigOp:
    try:
        return AlterConfigOp[op.upper()] if isinstance(op, str) else AlterConfigOp(op)
    except (KeyError, ValueError):
        raise InvalidRequestError(f"{key}: unknown alter config operation {op!r}") from None


def legacy_values(configs: Mapping[str, Any]) -> dict:
    """kafka-python's non-incremental configs ({key: value} or {key: (SET, value)}) -> {key: value}."""
    out = {}
    for key, op_value in configs.items():
        op, value = op_value if isinstance(op_value, tuple) else (AlterConfigOp.SET, op_value)
        if _operation(key, op) is not AlterConfigOp.SET:
            raise InvalidRequestError(f"{key}: non-incremental alter_configs takes SET only, got {op!r}")
        out[key] = value
    return out


def alter(config: Mapping[str, Any], overrides: Iterable[str], replication_factor: int,
          set_values: Mapping[str, Any] | None = None, delete: Iterable[str] = (),
          replace: bool = False) -> Alteration:
    """Resolve an alteration of a topic whose config is ``config`` and which sets ``overrides``:
    SET ``set_values``, DELETE (back to the default) ``delete``; with ``replace`` (Kafka's legacy
    AlterConfigs) every set config not in ``set_values`` returns to its default. The whole resulting
    TopicConfig is validated (InvalidConfigError) before anything is returned."""
    set_values = dict(set_values or {})
    delete = list(delete)
    parsed, ignored = split_topic_configs(set_values)
    deleted = [f for f in (_field_of(k) for k in delete) if f is not None]
    ignored = sorted(set(ignored) | {topic_config_name(str(k).strip().replace(".", "_")) for k in delete
                                     if _field_of(k) is None})
    both = sorted(set(parsed) & set(deleted))
    if both:
        raise InvalidConfigError(f"topic configs both set and deleted: {', '.join(map(topic_config_name, both))}")
    base = defaults(replication_factor)
    kept = set() if replace else set(overrides) - set(deleted)
    new = {f: (config[f] if f in kept and f in config else base[f]) for f in base}
    new.update(parsed)
    try:
        resolved = TopicConfig(**new)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"the altered config is invalid, nothing was changed: {exc}") from None
    return Alteration(resolved, tuple(sorted(kept | set(parsed))), tuple(ignored))


def incremental_ops(configs: Mapping[str, Any] | None, current: Mapping[str, Any]) -> tuple[dict, list]:
    """kafka-python's incremental configs ({key: value} or {key: (op, value)}) -> (set, delete).
    APPEND and SUBTRACT apply to LIST configs (cleanup.policy), on ``current`` (field -> value)."""
    set_values, delete = {}, []
    for key, op_value in (configs or {}).items():
        op, value = op_value if isinstance(op_value, tuple) else (AlterConfigOp.SET, op_value)
        op = _operation(key, op)
        if op is AlterConfigOp.SET:
            set_values[key] = value
        elif op is AlterConfigOp.DELETE:
            delete.append(key)
        else:
            field = _field_of(key)
            if field is None:
                continue  # a Kafka-only key: ignored like a SET of it
            if TOPIC_CONFIG_TYPES[field] != "LIST":
                raise InvalidConfigError(f"{topic_config_name(field)}: {op.name} applies to list configs only")
            items = [v for v in str(current.get(field, "")).split(",") if v]
            given = [v.strip() for v in str(coerce_topic_config(field, value)).split(",") if v.strip()]
            if op is AlterConfigOp.APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            set_values[key] = ",".join(items)
    return set_values, delete


def replication_factor_of(partitions: list[dict]) -> int:
    """A topic's replication factor from its first partition (replicas being added do not count)."""
    if not partitions:
        return 1
    part = partitions[0]
    return max(1, len(part["replicas"]) - len(part.get("adding", [])))


