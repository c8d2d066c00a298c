"""Offset ranges to read, planned from Spark-Kafka-style options (pure: no Ray, no Spark).

The Spark bridge and Ray Data share it. ``parse_options`` turns the options of Spark's Kafka
source (snake_case of its names) into a ``ReadSpec``, refusing what Spark refuses; the caller
resolves the topics' partitions and their earliest/latest offsets (and, for timestamp options,
the offset of each timestamp) with one round of list_offsets calls; ``plan`` then turns all of
that into half-open ``OffsetRange``s, split so there are at least ``min_partitions`` of them.

Semantics, as Spark's (https://spark.apache.org/docs/3.5.7/structured-streaming-kafka-integration.html):

- exactly one of ``assign`` (JSON ``{"topic": [0, 1]}``), ``subscribe`` (topic names, a list or
  comma-separated) or ``subscribe_pattern`` (a regular expression matched in full);
- ``starting_offsets``: "earliest" (default for batch), "latest" (refused for batch: nothing to
  read), or JSON ``{"topic": {"0": 23, "1": -2}}`` where -2 is earliest and -1 latest (-1 refused
  for batch); the JSON must name every partition read (Spark's Kafka source refuses one that
  leaves a partition out);
- ``ending_offsets``: "latest" (default) or JSON with -1 for latest (-2 refused: Spark does too);
  left-out partitions end at the latest offset. "latest" is the high watermark, so a read never
  returns a record that could still disappear;
- ``starting_timestamp`` (ms, every partition) or ``starting_offsets_by_timestamp`` (JSON
  ``{"topic": {"0": ms}}``) take precedence over ``starting_offsets``: the first offset whose
  timestamp is at or after it; when no record is that recent, ``starting_offsets_by_timestamp_strategy``
  "error" (default) fails and "latest" starts at the end. ``ending_timestamp`` /
  ``ending_offsets_by_timestamp`` likewise, an end with no record that recent being the latest offset;
- ``fail_on_data_loss`` (default True): a start below the partition's log start offset (retention
  or delete_records removed the records) is an error naming the partition and both offsets; with
  False the range starts at the log start offset instead, and ``plan`` returns a warning saying so;
- ``min_partitions``: ranges are split until there are at least this many, large ones first
  (Spark's KafkaOffsetRangeCalculator splits each in proportion to its size).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from raylog.errors import InvalidConfigError, OffsetOutOfRangeError
from raylog.records import TopicPartition

EARLIEST = -2
LATEST = -1

KNOWN_OPTIONS = frozenset({
    "assign", "subscribe", "subscribe_pattern", "starting_offsets", "ending_offsets", "starting_timestamp",
    "starting_offsets_by_timestamp", "starting_offsets_by_timestamp_strategy", "ending_timestamp",
    "ending_offsets_by_timestamp", "min_partitions", "fail_on_data_loss", "include_headers",
    "max_offsets_per_trigger", "min_offsets_per_trigger", "max_trigger_delay",
})
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
"""Spark's Kafka source's maxTriggerDelay default, 15 minutes."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records [from_offset, until_offset) of one partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


@dataclass(frozen=True)
class ReadSpec:
    assign: dict[str, list[int]] | None = None
    subscribe: list[str] | None = None
    subscribe_pattern: str | None = None
    starting: str | dict[TopicPartition, int] = "earliest"
    ending: str | dict[TopicPartition, int] = "latest"
    starting_timestamp: int | None = None
    starting_by_timestamp: dict[TopicPartition, int] | None = None
    starting_strategy: str = "error"
    ending_timestamp: int | None = None
    ending_by_timestamp: dict[TopicPartition, int] | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    extra: dict = field(default_factory=dict)

    def select_topics(self, existing: list[str]) -> list[str]:
        """The topics this spec reads, out of those that exist."""
        if self.assign is not None:
            return sorted(self.assign)
        if self.subscribe is not None:
            return list(self.subscribe)
        pattern = re.compile(self.subscribe_pattern)
        return sorted(t for t in existing if pattern.fullmatch(t))

    def timestamps_needed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple]:
        """Per partition, (start timestamp or None, end timestamp or None) to resolve."""
        out = {}
        for tp in partitions:
            start = self.starting_timestamp if self.starting_timestamp is not None else \
                (self.starting_by_timestamp or {}).get(tp)
            end = self.ending_timestamp if self.ending_timestamp is not None else \
                (self.ending_by_timestamp or {}).get(tp)
            if start is not None or end is not None:
                out[tp] = (start, end)
        return out


def _json(value: Any, name: str) -> Any:
    if isinstance(value, (dict, list)):
        return value
    try:
        return json.loads(value)
    except (TypeError, ValueError) as exc:
        raise InvalidConfigError(f"{name} must be JSON, got {value!r}: {exc}") from None


def _per_partition(value: Any, name: str) -> dict[TopicPartition, int]:
    """Spark's ``{"topic": {"0": n}}`` JSON as {TopicPartition: n}."""
    parsed = _json(value, name)
    if not isinstance(parsed, dict):
        raise InvalidConfigError(f"{name} must map topics to {{partition: offset}}, got {value!r}")
    out = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise InvalidConfigError(f"{name}: {topic!r} must map partitions to numbers, got {partitions!r}")
        for p, n in partitions.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"{name}: partition {p!r} of {topic!r} is not a number") from None
            if not isinstance(n, int) or isinstance(n, bool):
                raise InvalidConfigError(f"{name}: {topic}-{partition} must be an integer, got {n!r}")
            out[TopicPartition(topic, partition)] = n
    return out


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidConfigError(f"{name} must be true or false, got {value!r}")


def _positive_int(value: Any, name: str) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{name} must be a positive integer, got {value!r}") from None
    if n < 1 or isinstance(value, bool):
        raise InvalidConfigError(f"{name} must be a positive integer, got {value!r}")
    return n


def parse_options(options: Mapping[str, Any], batch: bool = True, spark_names: bool = False) -> ReadSpec:
    """Validate Spark-Kafka-style options (snake_case, or Spark's own camelCase names). With
    ``spark_names`` (the options came through Spark's reader) errors name the known options as
    Spark's users type them (startingOffsets), not raylog's Python names."""
    try:
        return _parse(options, batch, spark_names)
    except InvalidConfigError as exc:
        if not spark_names:
            raise
        raise InvalidConfigError(_SNAKE_NAMES.sub(lambda m: _camel(m.group(0)), str(exc))) from None


_SNAKE_NAMES = re.compile(r"\b(?:" + "|".join(sorted(KNOWN_OPTIONS, key=len, reverse=True)) + r")\b")


def _parse(options: Mapping[str, Any], batch: bool, spark_names: bool) -> ReadSpec:
    given = {_snake(k): k for k in options}
    opts = {_snake(k): v for k, v in options.items() if v is not None}
    unknown = sorted(set(opts) - KNOWN_OPTIONS)
    if unknown:
        known = sorted(_camel(k) for k in KNOWN_OPTIONS) if spark_names else sorted(KNOWN_OPTIONS)
        raise InvalidConfigError(f"unknown read options: {', '.join(given[k] for k in unknown)} "
                                 f"(known: {', '.join(known)})")
    chosen = [k for k in ("assign", "subscribe", "subscribe_pattern") if k in opts]
    if len(chosen) != 1:
        raise InvalidConfigError("give exactly one of assign, subscribe or subscribe_pattern"
                                 + (f" (got {', '.join(chosen)})" if chosen else ""))
    kwargs: dict[str, Any] = {}
    if "assign" in opts:
        assign = _json(opts["assign"], "assign")
        if not isinstance(assign, dict) or not all(isinstance(v, list) and all(isinstance(p, int) for p in v)
                                                   for v in assign.values()):
            raise InvalidConfigError(f'assign must be JSON like {{"topic": [0, 1]}}, got {opts["assign"]!r}')
        kwargs["assign"] = {t: sorted(set(ps)) for t, ps in assign.items()}
    if "subscribe" in opts:
        topics = opts["subscribe"]
        topics = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else list(topics)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise InvalidConfigError(f"subscribe needs topic names, got {opts['subscribe']!r}")
        kwargs["subscribe"] = topics
    if "subscribe_pattern" in opts:
        try:
            re.compile(opts["subscribe_pattern"])
        except (re.error, TypeError) as exc:
            raise InvalidConfigError(f"subscribe_pattern is not a regular expression: {exc}") from None
        kwargs["subscribe_pattern"] = opts["subscribe_pattern"]
    starting = opts.get("starting_offsets", "earliest" if batch else "latest")
    if isinstance(starting, str) and starting in ("earliest", "latest"):
        if starting == "latest" and batch:
            raise InvalidConfigError("starting_offsets 'latest' is not allowed for a batch read: it would read nothing")
        kwargs["starting"] = starting
    else:
        kwargs["starting"] = _per_partition(starting, "starting_offsets")
        if batch and any(v == LATEST for v in kwargs["starting"].values()):
            raise InvalidConfigError("starting_offsets -1 (latest) is not allowed for a batch read")
        if any(v < EARLIEST for v in kwargs["starting"].values()):
            raise InvalidConfigError("starting_offsets must be offsets >= 0, -2 (earliest) or -1 (latest)")
    ending = opts.get("ending_offsets", "latest")
    if isinstance(ending, str) and ending in ("earliest", "latest"):
        if ending == "earliest":
            raise InvalidConfigError("ending_offsets 'earliest' is not allowed: a read would end before it starts")
        kwargs["ending"] = ending
    else:
        kwargs["ending"] = _per_partition(ending, "ending_offsets")
        if any(v == EARLIEST for v in kwargs["ending"].values()):
            raise InvalidConfigError("ending_offsets -2 (earliest) is not allowed")
        if any(v < LATEST for v in kwargs["ending"].values()):
            raise InvalidConfigError("ending_offsets must be offsets >= 0 or -1 (latest)")
    for name in ("starting_timestamp", "ending_timestamp"):
        if name in opts:
            value = opts[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                try:
                    value = int(value)
                except (TypeError, ValueError):
                    raise InvalidConfigError(f"{name} must be a timestamp in ms, got {opts[name]!r}") from None
                if value < 0:
                    raise InvalidConfigError(f"{name} must be a timestamp in ms, got {opts[name]!r}")
            kwargs[name] = value
    if "starting_offsets_by_timestamp" in opts:
        kwargs["starting_by_timestamp"] = _per_partition(opts["starting_offsets_by_timestamp"],
                                                         "starting_offsets_by_timestamp")
    if "ending_offsets_by_timestamp" in opts:
        kwargs["ending_by_timestamp"] = _per_partition(opts["ending_offsets_by_timestamp"],
                                                       "ending_offsets_by_timestamp")
    strategy = opts.get("starting_offsets_by_timestamp_strategy", "error")
    if strategy not in ("error", "latest"):
        raise InvalidConfigError(f"starting_offsets_by_timestamp_strategy must be 'error' or 'latest', got {strategy!r}")
    kwargs["starting_strategy"] = strategy
    if "min_partitions" in opts:
        kwargs["min_partitions"] = _positive_int(opts["min_partitions"], "min_partitions")
    for name in ("max_offsets_per_trigger", "min_offsets_per_trigger"):
        if name in opts:
            kwargs[name] = _positive_int(opts[name], name)
    if "max_trigger_delay" in opts:
        kwargs["max_trigger_delay_ms"] = _duration_ms(opts["max_trigger_delay"], "max_trigger_delay")
    if "fail_on_data_loss" in opts:
        kwargs["fail_on_data_loss"] = _flag(opts["fail_on_data_loss"], "fail_on_data_loss")
    if "include_headers" in opts:
        kwargs["include_headers"] = _flag(opts["include_headers"], "include_headers")
    return ReadSpec(**kwargs)


_DURATION_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(value: Any, name: str) -> int:
    """Spark's duration strings ("15m", "3s", "500ms", a bare number of ms) in ms."""
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(value).lower())
    if not found or found.group(2) not in ("", *_DURATION_UNITS_MS):
        raise InvalidConfigError(f"{name} must be a duration like '15m', '3s' or '500ms', got {value!r}")
    return int(int(found.group(1)) * _DURATION_UNITS_MS.get(found.group(2), 1))


def _snake(name: str) -> str:
    """Spark's camelCase option names (startingOffsets) as raylog's snake_case ones."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _camel(name: str) -> str:
    """raylog's snake_case option names as Spark's camelCase ones (starting_offsets: startingOffsets)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def check_starting_covers(spec: ReadSpec, partitions: list[TopicPartition]) -> None:
    """Starting offsets given per partition must name every partition the read covers, as Spark's
    Kafka source requires (-2 says earliest, -1 latest): InvalidConfigError naming those left out."""
    if isinstance(spec.starting, dict):
        missing = [tp for tp in partitions if tp not in spec.starting]
        if missing:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise InvalidConfigError(f"starting_offsets gives specific offsets, so it must name every partition the "
                                     f"read covers (-2 for earliest, -1 for latest); it leaves out {names}")


@dataclass(frozen=True, slots=True)
class Position:
    """Where a read got to in one partition: the next offset, the leader epoch of the record just
    before it (-1: not known), and the id of the topic it was read from ("": not known)."""

    offset: int
    epoch: int = -1
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class LogNow:
    """One partition's log as a read finds it now.

    ``end`` is the high watermark when planning; ``epoch_end`` is the current leader's answer to
    OffsetsForLeaderEpoch for the epochs of the positions being placed (epoch: where the largest
    epoch <= it ends in this log), from which a log that diverged from what was read is found."""

    log_start: int
    end: int
    topic_id: str = ""
    epoch_end: Mapping[int, int] = field(default_factory=dict)
    end_epoch: int = -1
    """The epoch of the record before ``end`` (-1: none, or not known)."""

    def checked(self, at: Position) -> bool:
        """Whether the current leader said where ``at``'s epoch ends in its log."""
        return at.epoch >= 0 and self.epoch_end.get(at.epoch, -1) >= 0

    def diverged_at(self, at: Position) -> int | None:
        """The first offset below ``at`` whose record is no longer the one read there (an unclean
        election or a truncation replaced it), or None when the log still holds everything before it."""
        if not self.checked(at):
            return None
        end = self.epoch_end[at.epoch]
        return end if end < at.offset else None


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def place(tp: TopicPartition, at: Position | None, log: LogNow) -> tuple[int, str | None]:
    """Where a read that got to ``at`` carries on in ``log``, and what it loses doing so (None: nothing).

    The one decision of what counts as data loss, shared by batch plans, a stream's triggers and
    its re-planned batches, and the range readers (through the planner):
    - no position (a partition that appeared since): its log start; lost when that is not 0;
    - a topic deleted and created again (its id changed): the new topic's log start; lost are the
      old topic's records from the position on;
    - a log that diverged below the position (leader epochs; an unclean election): the offset it
      diverged at; lost are the records read from there to the position;
    - a position past the log's end (truncated, or a start given past the end) that no epoch shows
      still good: the end;
    - a position below the log start (retention, delete_records): the log start.
    """
    if at is None:
        return log.log_start, (None if log.log_start == 0 else
                               f"{_name(tp)} appeared with its log starting at {log.log_start}, not 0: "
                               f"records 0..{log.log_start - 1} were never read")
    if at.topic_id and log.topic_id and at.topic_id != log.topic_id:
        return log.log_start, (f"{_name(tp)}: topic {tp.topic!r} was deleted and created again (id {at.topic_id} "
                               f"is now {log.topic_id}): the old topic's records from offset {at.offset} on were "
                               f"never read; reading the new one from {log.log_start}")
    diverged = log.diverged_at(at)
    if diverged is not None:
        resume = max(diverged, log.log_start)
        return resume, (f"{_name(tp)}: the log diverged at offset {diverged} (an unclean leader election replaced "
                        f"records {diverged}..{at.offset - 1} that were read); reading on from {resume}")
    if at.offset > log.end and not log.checked(at):
        # Past the high watermark with no epoch to tell (a user's start, an older checkpoint): a
        # current leader's high watermark is at least any it acknowledged before, so the log lost it.
        # A position whose epoch the leader still holds up to it is good: the high watermark of a
        # new leader catches up to it.
        return log.end, (f"{_name(tp)}: offset {at.offset} is past the log's end {log.end} (truncated, re-created "
                         f"or given past the end): records {log.end}..{at.offset - 1} are not in the log; reading "
                         f"from {log.end}")
    if at.offset < log.log_start:
        return log.log_start, (f"{_name(tp)}: records {at.offset}..{log.log_start - 1} are gone (offset {at.offset} "
                               f"is below the log start offset {log.log_start}: retention or delete_records removed "
                               f"them); reading from {log.log_start}")
    return at.offset, None


def readable(tp: TopicPartition, start: Position | None, end: Position | None, log: LogNow,
             fail_on_data_loss: bool) -> tuple[int, int, list[str]]:
    """The part [from, until) of a read from ``start`` to ``end`` (None: the log's end) that ``log``
    still holds, and what is lost (``place``). With ``fail_on_data_loss`` a loss raises
    OffsetOutOfRangeError naming it instead."""
    begin, lost = place(tp, start, log)
    losses = [lost] if lost else []
    if end is None:
        until = log.end
    else:
        until, lost_end = place(tp, end, log)
        if lost_end and not losses and until < end.offset:
            losses.append(lost_end)
    until = max(begin, until)
    if losses and fail_on_data_loss:
        raise OffsetOutOfRangeError(f"{losses[0]}. Set failOnDataLoss=false (fail_on_data_loss=False) to read on "
                                    "past lost records with a warning", log.log_start, log.end)
    return begin, until, losses


def plan(spec: ReadSpec, partitions: list[TopicPartition], earliest: Mapping[TopicPartition, int],
         latest: Mapping[TopicPartition, int],
         by_timestamp: Mapping[TopicPartition, tuple[int | None, int | None]] | None = None
         ) -> tuple[list[OffsetRange], list[str]]:
    """The ranges to read, and warnings for records skipped because fail_on_data_loss is off.

    ``by_timestamp``: per partition, (offset of the start timestamp, offset of the end timestamp),
    each None when no record is that recent (or when no timestamp was asked).
    """
    by_timestamp = by_timestamp or {}
    wanted_ts = spec.timestamps_needed(partitions)
    check_starting_covers(spec, [tp for tp in partitions if tp not in wanted_ts or wanted_ts[tp][0] is None])
    ranges, warnings = [], []
    for tp in partitions:
        low, high = earliest[tp], latest[tp]
        start_ts, end_ts = wanted_ts.get(tp, (None, None))
        found_start, found_end = by_timestamp.get(tp, (None, None))
        if start_ts is not None:
            if found_start is None:
                if spec.starting_strategy == "error":
                    raise OffsetOutOfRangeError(
                        f"{tp.topic}-{tp.partition} has no record at or after starting timestamp {start_ts}; "
                        "set starting_offsets_by_timestamp_strategy='latest' to start at the end instead", low, high)
                start = high
            else:
                start = found_start
        elif isinstance(spec.starting, dict):
            start = spec.starting[tp]
            start = low if start == EARLIEST else (high if start == LATEST else start)
        else:
            start = low if spec.starting == "earliest" else high
        if end_ts is not None:
            end = high if found_end is None else found_end
        elif isinstance(spec.ending, dict):
            end = spec.ending.get(tp, LATEST)
            end = high if end == LATEST else end
        else:
            end = high
        if start > end and low <= start <= high and low <= end <= high:
            raise InvalidConfigError(f"{tp.topic}-{tp.partition}: starting offset {start} is after ending offset {end}")
        begin, until, lost = readable(tp, Position(start), Position(end), LogNow(low, high), spec.fail_on_data_loss)
        warnings += lost
        if until > begin:
            ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
    return split(ranges, spec.min_partitions), warnings


def split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """At least ``min_partitions`` ranges: each range is cut into pieces in proportion to its size."""
    if not min_partitions or len(ranges) >= min_partitions or not ranges:
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        pieces = max(1, min(r.size, math.ceil(r.size / total * min_partitions)))
        step = r.size / pieces
        bounds = [r.from_offset + round(i * step) for i in range(pieces)] + [r.until_offset]
        out += [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return out
