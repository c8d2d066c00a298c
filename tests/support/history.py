"""A Jepsen-style history of raylog's queue workload, and a checker that names its anomalies.

This follows Jepsen's Kafka workload (``jepsen/src/jepsen/tests/kafka.clj`` in jepsen-io/jepsen)
and keeps its anomaly names, so a failure here reads like a Jepsen report. It is pure Python: no
Ray, no raylog imports, so it runs, and is tested, without a cluster.

The model
=========

One history covers one topic: a set of *partitions*, each a totally ordered log that stores one
*value* at each *offset*. Values are unique across the whole history (the workload makes them
``b"<key>:<n>"`` with ``value_of``, n counting up per key, and ``parse`` splits them back), so a
value names one send. Producers *send* values and learn the partition and offset the log gave each
one; consumers *poll* partitions and get back ``(offset, value)`` runs in offset order; consumer
groups *commit* offsets, where, as in Kafka, a committed offset is the offset of the *next* record
to read (everything below it was consumed). After the faults a final read of every partition from
its start gives the log as it ended up; the checker compares every observation with it.

What is recorded
================

Every call below appends one ``Op`` to ``History.ops``. An op carries its ``index`` (its place in
the total order of recording: one lock orders all calls, so index order is real-time order), a
monotonic time in nanoseconds and a wall-clock time in seconds (for reading a report next to
logs), ``f`` (what happened), ``process`` (the producer, consumer session or group it concerns, or
None) and an ``f``-specific ``value``:

======================= ============ ================================ ===================================
f                       process      value                            recorded when
======================= ============ ================================ ===================================
``issue``               producer     ``(value, topic)``               a send is about to be issued (call
                                                                      it before send: index = send order)
``ack``                 producer     ``(value, partition, offset)``   the send's future succeeded
``fail``                producer     ``(value, error text)``          the send's future failed
``poll``                consumer     ``(partition, offsets, values)`` a poll returned these records of
                                                                      one partition, in that order
``assigned``            consumer     ``partitions``                   partitions were assigned to it
``revoked``             consumer     ``partitions``                   partitions were revoked or lost
``seek``                consumer     ``partition``                    it seeked (its position moved)
``member``              consumer     ``group``                        its group is named explicitly
``unordered``           consumer     ``None``                         its assignment changes go
                                                                      unrecorded
``commit``              group        ``(partition, offset)``          a commit of offset succeeded
``observe-committed``   group        ``(partition, offset)``          an observer read the committed
                                                                      offset back
======================= ============ ================================ ===================================

``ack`` and ``fail`` take the producer from the value's ``issue`` (None if it was never issued, as
with callers that record only outcomes). Partitions are ints (one topic per history).

A *consumer* is a string naming one consumer **session**: one consumer object, or one generation of
it; a test that restarts a consumer starts a new name. Within a session, the reading of a partition
is *contiguous* from one ``assigned``/``revoked``/``seek`` of that partition to the next: after an
assignment change or a seek, the next poll may start anywhere (at the committed offset, typically,
so re-reading is expected); between them each poll continues where the last left off.

Group membership: a consumer belongs to the group named before the first ``/`` of its name
(``"g1/c3"`` is in group ``"g1"``; a name without ``/`` is in no group), unless ``member(consumer,
group)`` names its group explicitly, which wins.

``read(partition, offsets, values)`` is the older, simpler call: a poll by the consumer
``READ_CONSUMER``, which is marked ``unordered``. Its callers (``tests/support/workload.py``)
record no assignment changes, yet a subscribed consumer legitimately re-reads from its committed
offset when the group fences it and gives its partitions back, or when a fetch resets its
position; so its polls are checked against the log (``inconsistent-offsets``, ``unseen``) but not
for order (``nonmonotonic-poll``, ``poll-skip``), and it is in no group.

The final read, ``check(final, ...)``: ``final`` maps each partition to its ``(offset, value)``
records, read from the start of the log after the faults; it is taken to be the whole log (the
checker assumes no retention or compaction removed records). Optionally ``final_committed``
``{(group, partition): offset}`` read back at the end, and ``drained=True`` when every group was
polled to the end of every partition before the final read.

Anomalies
=========

``check`` returns ``{name: [example, ...]}`` holding only the anomalies found (``{}`` for a clean
history); each example is a dict naming the values, offsets, processes and op indexes involved.

``lost-write``
    An acknowledged value is missing from the final read.
``duplicate``
    One value at two (or more) offsets of the final read.
``inconsistent-offsets``
    Observations disagree about the log. Three shapes (the example's ``kind``):
    ``slot``: one (partition, offset) mapped to two different values by any two observations (an
    ack, a poll, the final read); ``moved``: an ack or poll placed a value at a position the final
    read does not hold it at, while it is observed elsewhere (in the final read, or by another ack
    or poll); ``vanished``: a consumer polled a value that was never acknowledged and that the final
    read does not hold, i.e. it read a record that later disappeared (a read past the high
    watermark). An acknowledged value missing everywhere is ``lost-write`` instead.
``nonmonotonic-send``
    One producer's acknowledged sends to one partition, taken in issue order, whose acknowledged
    offsets do not strictly increase. Also the per-key order: per producer and key, values in send
    order (issue order; for values never issued, the ``n`` of ``parse``) whose positions in the
    final read (the ack's, when absent from it) do not strictly increase within a partition.
``nonmonotonic-poll``
    One consumer session's polls of one partition go backwards or repeat an offset, with no
    ``assigned``/``revoked``/``seek`` of that partition in between (within one poll or across).
``poll-skip``
    Two shapes (the example's ``kind``). ``session``: a consumer session read offset a and then b
    > a of one partition, with no assignment change or seek in between, while the final read has
    records strictly between a and b. ``group``: for a group and partition, an offset of the final
    read at or above the group's start (``group_start[(group, partition)]``, default 0: the group
    reads from the beginning, auto_offset_reset='earliest' with no earlier commits) and below the
    group's final committed offset, that no consumer of the group ever polled. The final committed
    offset is ``final_committed[(group, partition)]`` if given, else the last ``commit`` or
    ``observe-committed`` recorded for it.
``unseen``
    An acknowledged value in the final read that no consumer (of any group, or ``READ_CONSUMER``)
    ever polled. Checked only with ``drained=True``: otherwise a consumer may just be behind.
``committed-offsets-backwards``
    For a group and partition, the committed offsets seen in time order (each successful
    ``commit`` and each ``observe-committed``, then ``final_committed``) decrease from one to the
    next. A group that seeks back and commits on purpose should not be checked with this history.

Allowed (never reported): a failed send whose value is in the final read (the outcome was unknown:
the producer gave up waiting, the record may have landed) or absent; a value issued with no outcome
yet; re-reading records after an assignment change or seek (at-least-once delivery); one value
polled by several sessions, or by one session across assignment changes. For acks='all' with
idempotence every anomaly above must be absent.

Thread safety: every method may be called from any thread (producer callbacks run on the client's
threads). Recording takes one lock; ``check``, ``summary`` and ``report`` work on a snapshot taken
under it, so they may run while recording goes on and see a prefix of the history.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

READ_CONSUMER = "reader"
"""The consumer session ``History.read`` records polls for (unordered, in no group)."""

ANOMALIES = (
    "lost-write",
    "duplicate",
    "inconsistent-offsets",
    "nonmonotonic-send",
    "nonmonotonic-poll",
    "poll-skip",
    "unseen",
    "committed-offsets-backwards",
)
"""Every name ``check`` can return, in the order it reports them."""

SKIPPED_SHOWN_MAX = 10
"""Offsets listed in one poll-skip example; the example also gives the full count."""
CONTEXT_SHOWN_MAX = 30
"""Ops listed as a session poll-skip's ``context`` (what the session and the partition's other
readers did around it), so that one failed run says how the session got past the records."""


def value_of(key: bytes, n: int) -> bytes:
    """The workload's unique value for the ``n``-th send of ``key``: ``b"<key>:<n>"``."""
    return key + b":" + str(n).encode()


def parse(value: bytes) -> tuple[bytes, int]:
    """``(key, n)`` back from ``value_of``; raises ValueError for any other value."""
    key, _, n = value.rpartition(b":")
    return key, int(n)


def _parse_or_none(value) -> tuple[bytes, int] | None:
    try:
        return parse(value)
    except (ValueError, TypeError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class Op:
    """One recorded event; the module docstring's table gives ``value`` for each ``f``."""

    index: int
    time_ns: int
    """Monotonic clock, for intervals."""
    wall_time_s: float
    """``time.time()``, for lining a report up with logs."""
    f: str
    process: str | None
    value: object


class History:
    """A recorder of sends, polls and commits, and the checker of the module docstring.

    ``acked`` (value -> (partition, offset) of its latest ack) and ``failed`` (value -> error
    text) are kept up to date for callers that only count outcomes."""

    def __init__(self, clock_ns: Callable[[], int] = time.monotonic_ns,
                 wall_clock_s: Callable[[], float] = time.time):
        self.ops: list[Op] = []
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}
        self._producer_of: dict[bytes, str] = {}
        self._clock_ns = clock_ns
        self._wall_clock_s = wall_clock_s
        self._lock = threading.Lock()
        self._reader_declared = False

    # -- recording ------------------------------------------------------------------------

    def _record(self, f: str, process: str | None, value: object) -> Op:
        # Caller holds the lock: the clock is read under it so index order is time order.
        op = Op(len(self.ops), self._clock_ns(), self._wall_clock_s(), f, process, value)
        self.ops.append(op)
        return op

    def issue(self, producer: str, value: bytes, topic: str | None = None) -> None:
        """``producer`` is about to send ``value``; call it before send so issue order is send order."""
        with self._lock:
            self._producer_of[value] = producer
            self._record("issue", producer, (value, topic))

    def ack(self, value: bytes, partition: int, offset: int | None) -> None:
        """The send of ``value`` was acknowledged at ``partition``/``offset``; offset None: at a
        position the client was not told (librdkafka's answer to Kafka's DUPLICATE_SEQUENCE_NUMBER,
        a retry of a batch stored earlier). Such a value must still be in the log."""
        with self._lock:
            self.acked[value] = (partition, offset)
            self._record("ack", self._producer_of.get(value), (value, partition, offset))

    def fail(self, value: bytes, error: BaseException | str) -> None:
        """The send of ``value`` failed: its outcome is unknown (it may still have landed)."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        with self._lock:
            self.failed[value] = text
            self._record("fail", self._producer_of.get(value), (value, text))

    def poll(self, consumer: str, partition: int, offsets: Sequence[int], values: Sequence[bytes]) -> None:
        """Consumer session ``consumer`` got these records of ``partition``, in this order."""
        offsets, values = tuple(offsets), tuple(values)
        assert len(offsets) == len(values), (len(offsets), len(values))
        with self._lock:
            self._record("poll", consumer, (partition, offsets, values))

    def read(self, partition: int, offsets: Sequence[int], values: Sequence[bytes]) -> None:
        """A poll by ``READ_CONSUMER``, whose assignment changes go unrecorded (see the module doc)."""
        offsets, values = tuple(offsets), tuple(values)
        assert len(offsets) == len(values), (len(offsets), len(values))
        with self._lock:
            if not self._reader_declared:
                self._reader_declared = True
                self._record("unordered", READ_CONSUMER, None)
            self._record("poll", READ_CONSUMER, (partition, offsets, values))

    def assigned(self, consumer: str, partitions: Iterable[int]) -> None:
        """``partitions`` were assigned to ``consumer``: its next read of each may start anywhere."""
        with self._lock:
            self._record("assigned", consumer, tuple(partitions))

    def revoked(self, consumer: str, partitions: Iterable[int]) -> None:
        """``partitions`` were revoked from (or lost by) ``consumer``."""
        with self._lock:
            self._record("revoked", consumer, tuple(partitions))

    def seek(self, consumer: str, partition: int) -> None:
        """``consumer`` moved its position in ``partition``: its next read may start anywhere."""
        with self._lock:
            self._record("seek", consumer, partition)

    def member(self, consumer: str, group: str) -> None:
        """``consumer`` belongs to ``group`` (instead of the ``group/...`` naming convention)."""
        with self._lock:
            self._record("member", consumer, group)

    def unordered(self, consumer: str) -> None:
        """``consumer``'s assignment changes go unrecorded: skip its order checks."""
        with self._lock:
            self._record("unordered", consumer, None)

    def commit(self, group: str, partition: int, offset: int) -> None:
        """A commit of ``offset`` (the next offset to read) for ``group``/``partition`` succeeded."""
        with self._lock:
            self._record("commit", group, (partition, offset))

    def observe_committed(self, group: str, partition: int, offset: int | None) -> None:
        """An observer read ``group``'s committed offset of ``partition`` (None: nothing committed)."""
        if offset is None:
            return
        with self._lock:
            self._record("observe-committed", group, (partition, offset))

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> list[Op]:
        """The ops recorded so far, in index order."""
        with self._lock:
            return list(self.ops)

    def summary(self) -> dict[str, int]:
        """Counts of what was recorded."""
        counts = defaultdict(int)
        consumers = set()
        for op in self.snapshot():
            counts[op.f] += 1
            if op.f == "poll":
                counts["records_polled"] += len(op.value[1])
                consumers.add(op.process)
        return {
            "sends_issued": counts["issue"],
            "sends_acked": counts["ack"],
            "sends_failed": counts["fail"],
            "polls": counts["poll"],
            "records_polled": counts["records_polled"],
            "consumer_sessions": len(consumers),
            "assignment_changes": counts["assigned"] + counts["revoked"] + counts["seek"],
            "commits": counts["commit"],
            "committed_observations": counts["observe-committed"],
        }

    def report(self, anomalies: Mapping[str, list], examples_max: int = 3) -> str:
        """``render`` of ``anomalies`` (from ``check``) under this history's ``summary``."""
        return render(anomalies, self.summary(), examples_max)

    def check(self, final: Mapping[int, Iterable[tuple[int, bytes]]],
              final_committed: Mapping[tuple[str, int], int] | None = None,
              drained: bool = False,
              group_start: Mapping[tuple[str, int], int] | None = None) -> dict[str, list[dict]]:
        """The anomalies of the module docstring, ``{name: [example, ...]}``; ``{}`` when clean.

        ``final``: partition -> [(offset, value), ...] read from the start after the faults.
        ``final_committed``: (group, partition) -> committed offset read back at the end.
        ``drained``: every group polled every partition to its end (enables ``unseen``).
        ``group_start``: (group, partition) -> the first offset the group was meant to read."""
        return _Checker(self.snapshot(), final, dict(final_committed or {}), drained,
                        dict(group_start or {})).run()


def render(anomalies: Mapping[str, list], summary: Mapping[str, int] | None = None,
           examples_max: int = 3) -> str:
    """A short human report: the summary line, then each anomaly's count and first examples."""
    lines = []
    if summary is not None:
        lines.append("history: " + ", ".join(f"{name}={count}" for name, count in summary.items()))
    if not anomalies:
        lines.append("no anomalies")
    for name in sorted(anomalies, key=lambda n: ANOMALIES.index(n) if n in ANOMALIES else len(ANOMALIES)):
        examples = anomalies[name]
        lines.append(f"{name}: {len(examples)}")
        for example in examples[:examples_max]:
            lines.append(f"  {example!r}")
        if len(examples) > examples_max:
            lines.append(f"  ... {len(examples) - examples_max} more")
    return "\n".join(lines)


class _Checker:
    """One run of ``History.check`` over a snapshot; each ``_check_*`` fills ``self.found``."""

    def __init__(self, ops: list[Op], final, final_committed, drained: bool, group_start):
        self.ops = ops
        self.final_committed = final_committed
        self.drained = drained
        self.group_start = group_start
        self.found: dict[str, list[dict]] = defaultdict(list)

        # The final read: values by position, positions by value, sorted offsets per partition.
        self.final_at: dict[tuple[int, int], list[bytes]] = defaultdict(list)
        self.final_where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        self.final_offsets: dict[int, list[int]] = {}
        for partition, records in final.items():
            offsets = []
            for offset, value in records:
                self.final_at[(partition, offset)].append(value)
                self.final_where[value].append((partition, offset))
                offsets.append(offset)
            self.final_offsets[partition] = sorted(set(offsets))

        self.issue_index: dict[bytes, int] = {}
        self.producer_of: dict[bytes, str] = {}
        self.first_ack: dict[bytes, Op] = {}
        self.acks: list[Op] = []
        self.polls: list[Op] = []
        self.unordered: set[str] = set()
        self.explicit_group: dict[str, str] = {}
        self.reported_send_pairs: set[tuple[bytes, bytes]] = set()
        """Pairs the producer-order check reported, so the key-order check does not repeat them."""
        for op in ops:
            if op.f == "issue":
                value = op.value[0]
                self.issue_index.setdefault(value, op.index)
                self.producer_of.setdefault(value, op.process)
            elif op.f == "ack":
                self.acks.append(op)
                self.first_ack.setdefault(op.value[0], op)
            elif op.f == "poll":
                self.polls.append(op)
            elif op.f == "unordered":
                self.unordered.add(op.process)
            elif op.f == "member":
                self.explicit_group[op.process] = op.value

    def run(self) -> dict[str, list[dict]]:
        self._check_lost_and_duplicate()
        self._check_inconsistent_offsets()
        self._check_producer_order()
        self._check_key_order()
        self._check_session_polls()
        self._check_group_polls()
        if self.drained:
            self._check_unseen()
        self._check_committed_offsets()
        return {name: self.found[name] for name in ANOMALIES if self.found.get(name)}

    def group_of(self, consumer: str) -> str | None:
        if consumer in self.explicit_group:
            return self.explicit_group[consumer]
        group, slash, _ = consumer.partition("/")
        return group if slash else None

    def _final_between(self, partition: int, low: int, high: int) -> list[int]:
        """Offsets of the final read of ``partition`` strictly between ``low`` and ``high``."""
        offsets = self.final_offsets.get(partition, [])
        return offsets[bisect.bisect_right(offsets, low):bisect.bisect_left(offsets, high)]

    def _check_lost_and_duplicate(self) -> None:
        for value, op in self.first_ack.items():
            if value not in self.final_where:
                _, partition, offset = op.value
                self.found["lost-write"].append({"value": value, "partition": partition, "offset": offset,
                                                 "producer": op.process, "ack_op": op.index})
        for value, places in self.final_where.items():
            if len(places) > 1:
                self.found["duplicate"].append({"value": value, "places": sorted(places)})

    def _check_inconsistent_offsets(self) -> None:
        # Every observation of a position: (partition, offset) -> value -> where it was seen.
        seen_at: dict[tuple[int, int], dict[bytes, list[str]]] = defaultdict(lambda: defaultdict(list))
        # Every ack/poll placement of a value: value -> {(partition, offset)}.
        placed: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
        polled_by: dict[bytes, list[str]] = defaultdict(list)
        for (partition, offset), values in self.final_at.items():
            for value in values:
                seen_at[(partition, offset)][value].append("final")
        for op in self.acks:
            value, partition, offset = op.value
            if offset is None:
                continue
            seen_at[(partition, offset)][value].append(f"ack#{op.index}")
            placed[value].add((partition, offset))
        for op in self.polls:
            partition, offsets, values = op.value
            for offset, value in zip(offsets, values):
                sources = seen_at[(partition, offset)][value]
                source = f"poll#{op.index} by {op.process}"
                if not sources or sources[-1] != source:
                    sources.append(source)
                placed[value].add((partition, offset))
                polled_by[value].append(op.process)
        for (partition, offset), by_value in sorted(seen_at.items()):
            if len(by_value) > 1:
                self.found["inconsistent-offsets"].append({
                    "kind": "slot", "partition": partition, "offset": offset,
                    "values": {value: sources for value, sources in by_value.items()}})
        for value, places in placed.items():
            in_final = set(self.final_where.get(value, ()))
            stray = places - in_final
            if not stray:
                continue
            if in_final or len(places) > 1:
                self.found["inconsistent-offsets"].append({
                    "kind": "moved", "value": value, "observed": sorted(places), "final": sorted(in_final)})
            elif value not in self.first_ack:
                self.found["inconsistent-offsets"].append({
                    "kind": "vanished", "value": value, "polled_at": sorted(places),
                    "consumers": sorted(set(polled_by[value]))})

    def _check_producer_order(self) -> None:
        sends: dict[tuple[str, int], list[tuple[int, bytes, int]]] = defaultdict(list)
        for value, op in self.first_ack.items():
            if value in self.issue_index:
                _, partition, offset = op.value
                if offset is None:  # acknowledged without a position: where the log has it
                    places = self.final_where.get(value)
                    if not places:
                        continue
                    partition, offset = sorted(places)[0]
                sends[(self.producer_of[value], partition)].append((self.issue_index[value], value, offset))
        for (producer, partition), entries in sorted(sends.items()):
            entries.sort()
            for (_, v1, o1), (_, v2, o2) in zip(entries, entries[1:]):
                if o2 <= o1:
                    self.reported_send_pairs.add((v1, v2))
                    self.found["nonmonotonic-send"].append({
                        "kind": "producer", "producer": producer, "partition": partition,
                        "values": [v1, v2], "offsets": [o1, o2]})

    def _check_key_order(self) -> None:
        # (producer or None, key, partition) -> [(send order, value, offset)]
        runs: dict[tuple, list[tuple[int, bytes, int]]] = defaultdict(list)
        for value, op in self.first_ack.items():
            parsed = _parse_or_none(value)
            if parsed is None:
                continue
            key, n = parsed
            places = self.final_where.get(value)
            partition, offset = sorted(places)[0] if places else op.value[1:]
            if offset is None:
                continue  # acknowledged without a position and not in the log: a lost write
            if value in self.issue_index:
                runs[(self.producer_of[value], key, partition)].append((self.issue_index[value], value, offset))
            else:
                runs[(None, key, partition)].append((n, value, offset))
        for (producer, key, partition), entries in sorted(runs.items(), key=lambda kv: repr(kv[0])):
            entries.sort()
            for (_, v1, o1), (_, v2, o2) in zip(entries, entries[1:]):
                if o2 <= o1 and (v1, v2) not in self.reported_send_pairs:
                    self.found["nonmonotonic-send"].append({
                        "kind": "key", "producer": producer, "key": key, "partition": partition,
                        "values": [v1, v2], "offsets": [o1, o2]})

    def _check_session_polls(self) -> None:
        # consumer -> partition -> (last offset read, op index of that read)
        last: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
        for op in self.ops:
            if op.process in self.unordered:
                continue
            if op.f in ("assigned", "revoked"):
                for partition in op.value:
                    last[op.process].pop(partition, None)
            elif op.f == "seek":
                last[op.process].pop(op.value, None)
            elif op.f == "poll":
                partition, offsets, _ = op.value
                positions = last[op.process]
                for offset in offsets:
                    previous = positions.get(partition)
                    if previous is not None:
                        before, before_op = previous
                        if offset <= before:
                            self.found["nonmonotonic-poll"].append({
                                "consumer": op.process, "partition": partition,
                                "offsets": [before, offset], "ops": [before_op, op.index]})
                        else:
                            skipped = self._final_between(partition, before, offset)
                            if skipped:
                                self.found["poll-skip"].append({
                                    "kind": "session", "consumer": op.process, "partition": partition,
                                    "offsets": [before, offset], "skipped": skipped[:SKIPPED_SHOWN_MAX],
                                    "skipped_count": len(skipped), "ops": [before_op, op.index],
                                    "context": self._skip_context(op.process, partition, before_op, op.index)})
                    positions[partition] = (offset, op.index)

    def _skip_context(self, consumer: str, partition: int, first: int, last: int) -> list[str]:
        """The session's last assignment changes before op ``first``, then, between ``first`` and
        ``last``, its own ops and every other session's polls of ``partition``: one line each."""
        def line(op: Op) -> str:
            if op.f == "poll":
                p, offsets, _ = op.value
                return f"#{op.index} {op.process} poll p{p} {offsets[0]}..{offsets[-1]} ({len(offsets)})"
            return f"#{op.index} {op.process} {op.f} {op.value!r}"

        earlier = [op for op in self.ops[:first] if op.process == consumer and op.f in ("assigned", "revoked", "seek")]
        between = [op for op in self.ops[first + 1:last] if op.process == consumer or (
            op.f == "poll" and op.value[0] == partition and op.process not in self.unordered)]
        return [line(op) for op in earlier[-3:] + between][:CONTEXT_SHOWN_MAX]

    def _committed_sequences(self) -> dict[tuple[str, int], list[tuple[int, str]]]:
        sequences: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
        for op in self.ops:
            if op.f in ("commit", "observe-committed"):
                partition, offset = op.value
                sequences[(op.process, partition)].append((offset, f"{op.f}#{op.index}"))
        for (group, partition), offset in self.final_committed.items():
            sequences[(group, partition)].append((offset, "final"))
        return sequences

    def _check_group_polls(self) -> None:
        polled: dict[tuple[str, int], set[int]] = defaultdict(set)
        for op in self.polls:
            group = self.group_of(op.process)
            if group is not None:
                partition, offsets, _ = op.value
                polled[(group, partition)].update(offsets)
        for (group, partition), sequence in sorted(self._committed_sequences().items()):
            committed = sequence[-1][0]
            start = self.group_start.get((group, partition), 0)
            seen = polled.get((group, partition), set())
            unpolled = [offset for offset in self.final_offsets.get(partition, [])
                        if start <= offset < committed and offset not in seen]
            if unpolled:
                self.found["poll-skip"].append({
                    "kind": "group", "group": group, "partition": partition, "committed": committed,
                    "unpolled": unpolled[:SKIPPED_SHOWN_MAX], "unpolled_count": len(unpolled)})

    def _check_unseen(self) -> None:
        polled = {value for op in self.polls for value in op.value[2]}
        for value, op in self.first_ack.items():
            if value in self.final_where and value not in polled:
                partition, offset = sorted(self.final_where[value])[0]
                self.found["unseen"].append({"value": value, "partition": partition, "offset": offset,
                                             "producer": op.process})

    def _check_committed_offsets(self) -> None:
        for (group, partition), sequence in sorted(self._committed_sequences().items()):
            for (o1, source1), (o2, source2) in zip(sequence, sequence[1:]):
                if o2 < o1:
                    self.found["committed-offsets-backwards"].append({
                        "group": group, "partition": partition, "offsets": [o1, o2],
                        "ops": [source1, source2]})
