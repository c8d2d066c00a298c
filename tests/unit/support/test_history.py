"""The history checker (tests/support/history.py) names each anomaly, and only the anomaly there is.

One tiny history per anomaly, built by hand; the allowed behaviours (indeterminate sends,
re-reads after a rebalance or seek, the same record read by several sessions) checked clean; and
``QueueModel``, a correct queue run at random, whose histories must check clean and whose final
log, corrupted once, must not.
"""

from __future__ import annotations

import random
import threading
from collections import deque

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.history import ANOMALIES, READ_CONSUMER, History, parse, render, value_of

A, B, C, D = (value_of(b"k", n) for n in range(4))


def sent(history: History, producer: str, value: bytes, partition: int, offset: int) -> None:
    """A send issued by ``producer`` and acknowledged at ``partition``/``offset``."""
    history.issue(producer, value)
    history.ack(value, partition, offset)


def log_of(*values: bytes, start: int = 0) -> list[tuple[int, bytes]]:
    return list(enumerate(values, start))


# -- the values the workload writes ---------------------------------------------------------------


def test_value_of_and_parse_round_trip_keys_that_contain_colons():
    assert parse(value_of(b"a:b", 17)) == (b"a:b", 17)


# -- each anomaly, alone --------------------------------------------------------------------------


def test_acknowledged_value_missing_from_the_final_read_is_a_lost_write():
    history = History()
    sent(history, "p", A, 0, 0)
    sent(history, "p", B, 0, 1)
    anomalies = history.check({0: log_of(A)})
    assert set(anomalies) == {"lost-write"}
    assert anomalies["lost-write"] == [{"value": B, "partition": 0, "offset": 1, "producer": "p", "ack_op": 3}]


def test_an_ack_without_a_position_must_still_be_in_the_log_and_is_ordered_where_the_log_has_it():
    """librdkafka acknowledges a retried batch Kafka answers DUPLICATE_SEQUENCE_NUMBER with no offset."""
    x, y = value_of(b"x", 0), value_of(b"y", 0)
    history = History()
    history.issue("p", x)
    history.issue("p", y)
    history.ack(x, 0, None)
    history.ack(y, 0, 1)
    assert history.check({0: log_of(x, y)}) == {}
    assert set(history.check({0: log_of(value_of(b"z", 0), y)})) == {"lost-write"}
    assert set(history.check({0: log_of(y, x)})) == {"nonmonotonic-send", "inconsistent-offsets"}


def test_one_value_at_two_offsets_of_the_final_read_is_a_duplicate():
    history = History()
    sent(history, "p", A, 0, 0)
    anomalies = history.check({0: log_of(A, A)})
    assert set(anomalies) == {"duplicate"}
    assert anomalies["duplicate"] == [{"value": A, "places": [(0, 0), (0, 1)]}]


def test_a_poll_and_the_final_read_disagreeing_on_an_offset_is_inconsistent_offsets():
    history = History()
    sent(history, "p", A, 0, 0)
    history.issue("p", B)
    history.fail(B, TimeoutError("request timed out"))
    history.poll("g/c", 0, [0], [B])
    anomalies = history.check({0: log_of(A)})
    assert set(anomalies) == {"inconsistent-offsets"}
    slot = [e for e in anomalies["inconsistent-offsets"] if e["kind"] == "slot"]
    assert slot == [{"kind": "slot", "partition": 0, "offset": 0,
                     "values": {A: ["final", "ack#1"], B: ["poll#4 by g/c"]}}]


def test_an_ack_placing_a_value_elsewhere_than_the_final_read_is_inconsistent_offsets():
    history = History()
    sent(history, "p", A, 0, 0)
    anomalies = history.check({0: log_of(A, start=1)})
    assert set(anomalies) == {"inconsistent-offsets"}
    assert anomalies["inconsistent-offsets"] == [{"kind": "moved", "value": A, "observed": [(0, 0)],
                                                  "final": [(0, 1)]}]


def test_a_polled_unacknowledged_record_that_later_disappears_is_inconsistent_offsets():
    """What the old checker called vanished-read: a consumer read past the high watermark."""
    history = History()
    sent(history, "p", A, 0, 0)
    history.issue("p", B)
    history.poll("g/c", 0, [0, 1], [A, B])
    history.fail(B, ConnectionError("leader lost"))
    anomalies = history.check({0: log_of(A)})
    assert set(anomalies) == {"inconsistent-offsets"}
    assert anomalies["inconsistent-offsets"] == [{"kind": "vanished", "value": B, "polled_at": [(0, 1)],
                                                  "consumers": ["g/c"]}]


def test_a_later_send_acknowledged_below_an_earlier_one_is_a_nonmonotonic_send():
    history = History()
    history.issue("p", value_of(b"x", 0))
    history.issue("p", value_of(b"y", 0))
    history.ack(value_of(b"y", 0), 0, 0)
    history.ack(value_of(b"x", 0), 0, 1)
    anomalies = history.check({0: log_of(value_of(b"y", 0), value_of(b"x", 0))})
    assert set(anomalies) == {"nonmonotonic-send"}
    assert anomalies["nonmonotonic-send"] == [{
        "kind": "producer", "producer": "p", "partition": 0,
        "values": [value_of(b"x", 0), value_of(b"y", 0)], "offsets": [1, 0]}]


def test_sends_of_one_producer_to_different_partitions_are_not_ordered_against_each_other():
    history = History()
    sent(history, "p", value_of(b"x", 0), 0, 5)
    sent(history, "p", value_of(b"y", 0), 1, 0)
    assert history.check({0: log_of(value_of(b"x", 0), start=5), 1: log_of(value_of(b"y", 0))}) == {}


def test_a_key_whose_values_sit_out_of_send_order_is_a_nonmonotonic_send_without_issue_records():
    """Callers that record only outcomes (ack/fail) still get the per-key order, by the n of the value."""
    history = History()
    history.ack(B, 0, 0)
    history.ack(A, 0, 1)
    anomalies = history.check({0: log_of(B, A)})
    assert set(anomalies) == {"nonmonotonic-send"}
    assert anomalies["nonmonotonic-send"] == [{"kind": "key", "producer": None, "key": b"k", "partition": 0,
                                               "values": [A, B], "offsets": [1, 0]}]


def test_a_session_rereading_an_offset_without_an_assignment_change_is_a_nonmonotonic_poll():
    history = History()
    for offset, value in enumerate((A, B)):
        sent(history, "p", value, 0, offset)
    history.assigned("g/c", [0])
    history.poll("g/c", 0, [0, 1], [A, B])
    history.poll("g/c", 0, [1], [B])
    anomalies = history.check({0: log_of(A, B)})
    assert set(anomalies) == {"nonmonotonic-poll"}
    assert anomalies["nonmonotonic-poll"] == [{"consumer": "g/c", "partition": 0, "offsets": [1, 1],
                                               "ops": [5, 6]}]


def test_a_session_going_backwards_within_one_poll_is_a_nonmonotonic_poll():
    history = History()
    sent(history, "p", A, 0, 0)
    sent(history, "p", B, 0, 1)
    history.poll("g/c", 0, [1, 0], [B, A])
    assert set(history.check({0: log_of(A, B)})) == {"nonmonotonic-poll"}


def test_a_session_jumping_over_records_of_the_final_log_is_a_poll_skip():
    history = History()
    for offset, value in enumerate((A, B, C)):
        sent(history, "p", value, 0, offset)
    history.poll("g/c", 0, [0], [A])
    history.poll("g/c", 0, [2], [C])
    anomalies = history.check({0: log_of(A, B, C)})
    assert set(anomalies) == {"poll-skip"}
    assert anomalies["poll-skip"] == [{"kind": "session", "consumer": "g/c", "partition": 0, "offsets": [0, 2],
                                       "skipped": [1], "skipped_count": 1, "ops": [6, 7], "context": []}]


def test_a_session_poll_skip_says_what_the_session_and_the_partitions_other_readers_did_around_it():
    history = History()
    for offset, value in enumerate((A, B, C)):
        sent(history, "p", value, 0, offset)
    history.assigned("g/c", [0])
    history.poll("g/c", 0, [0], [A])
    history.poll("g/d", 0, [1], [B])
    history.poll("g/d", 1, [7], [A])
    history.poll("g/c", 0, [2], [C])
    (example,) = history.check({0: log_of(A, B, C)})["poll-skip"]
    assert example["context"] == ["#6 g/c assigned (0,)", "#8 g/d poll p0 1..1 (1)"]


def test_a_gap_in_offsets_is_no_poll_skip_when_the_final_log_has_nothing_there():
    history = History()
    sent(history, "p", A, 0, 0)
    sent(history, "p", B, 0, 3)
    history.poll("g/c", 0, [0, 3], [A, B])
    assert history.check({0: [(0, A), (3, B)]}) == {}


def test_an_offset_below_the_groups_committed_offset_that_no_member_polled_is_a_poll_skip():
    history = History()
    for offset, value in enumerate((A, B, C)):
        sent(history, "p", value, 0, offset)
    history.assigned("g/c1", [0])
    history.poll("g/c1", 0, [0], [A])
    history.revoked("g/c1", [0])
    history.assigned("g/c2", [0])
    history.poll("g/c2", 0, [2], [C])
    history.commit("g", 0, 3)
    anomalies = history.check({0: log_of(A, B, C)})
    assert set(anomalies) == {"poll-skip"}
    assert anomalies["poll-skip"] == [{"kind": "group", "group": "g", "partition": 0, "committed": 3,
                                       "unpolled": [1], "unpolled_count": 1}]


def test_group_membership_can_be_declared_instead_of_named():
    history = History()
    sent(history, "p", A, 0, 0)
    sent(history, "p", B, 0, 1)
    history.member("consumer-1", "orders")
    history.poll("consumer-1", 0, [0], [A])
    history.poll("audit/c", 0, [1], [B])  # a session of another group: does not count for "orders"
    anomalies = history.check({0: log_of(A, B)}, final_committed={("orders", 0): 2})
    assert anomalies == {"poll-skip": [{"kind": "group", "group": "orders", "partition": 0, "committed": 2,
                                        "unpolled": [1], "unpolled_count": 1}]}


def test_a_group_that_started_later_in_the_log_is_checked_from_its_start():
    history = History()
    for offset, value in enumerate((A, B, C)):
        sent(history, "p", value, 0, offset)
    history.poll("g/c", 0, [2], [C])
    history.commit("g", 0, 3)
    assert set(history.check({0: log_of(A, B, C)})) == {"poll-skip"}
    assert history.check({0: log_of(A, B, C)}, group_start={("g", 0): 2}) == {}


def test_acknowledged_records_no_consumer_polled_are_unseen_once_consumers_drained():
    history = History()
    sent(history, "p", A, 0, 0)
    sent(history, "p", B, 0, 1)
    history.poll("g/c", 0, [0], [A])
    final = {0: log_of(A, B)}
    assert history.check(final) == {}
    anomalies = history.check(final, drained=True)
    assert anomalies == {"unseen": [{"value": B, "partition": 0, "offset": 1, "producer": "p"}]}


def test_a_committed_offset_read_back_below_an_earlier_commit_is_committed_offsets_backwards():
    history = History()
    history.commit("g", 0, 5)
    history.observe_committed("g", 0, 3)
    anomalies = history.check({0: []})
    assert set(anomalies) == {"committed-offsets-backwards"}
    assert anomalies["committed-offsets-backwards"] == [{
        "group": "g", "partition": 0, "offsets": [5, 3], "ops": ["commit#0", "observe-committed#1"]}]


def test_a_final_committed_offset_below_the_last_commit_is_committed_offsets_backwards():
    history = History()
    history.commit("g", 0, 2)
    history.observe_committed("g", 0, None)  # nothing committed yet, as seen by a slow observer: ignored
    anomalies = history.check({0: []}, final_committed={("g", 0): 1})
    assert anomalies == {"committed-offsets-backwards": [{
        "group": "g", "partition": 0, "offsets": [2, 1], "ops": ["commit#0", "final"]}]}


# -- what is allowed --------------------------------------------------------------------------------


def test_failed_sends_may_be_present_or_absent():
    history = History()
    history.issue("p", A)
    history.fail(A, TimeoutError("gave up"))
    history.issue("p", B)
    history.fail(B, "NotEnoughReplicasError")
    sent(history, "p", C, 0, 1)
    history.poll("g/c", 0, [0, 1], [A, C])
    assert history.check({0: log_of(A, C)}, drained=True) == {}
    assert history.failed == {A: "TimeoutError: gave up", B: "NotEnoughReplicasError"}


def test_rereading_after_an_assignment_or_a_seek_is_allowed():
    history = History()
    for offset, value in enumerate((A, B, C)):
        sent(history, "p", value, 0, offset)
    history.assigned("g/c", [0])
    history.poll("g/c", 0, [0, 1], [A, B])
    history.seek("g/c", 0)
    history.poll("g/c", 0, [0, 1, 2], [A, B, C])
    history.revoked("g/c", [0])
    history.assigned("g/c", [0])
    history.poll("g/c", 0, [1], [B])
    history.poll("g/other", 0, [0, 1, 2], [A, B, C])  # another session of the group re-reads all
    assert history.check({0: log_of(A, B, C)}, final_committed={("g", 0): 3}, drained=True) == {}


def test_an_assignment_alone_restarts_a_sessions_reading_of_a_partition_it_lost_unannounced():
    history = History()
    sent(history, "p", A, 0, 0)
    sent(history, "p", B, 0, 1)
    history.assigned("g/c", [0])
    history.poll("g/c", 0, [0, 1], [A, B])
    history.assigned("g/c", [0])
    history.poll("g/c", 0, [1], [B])
    assert history.check({0: log_of(A, B)}) == {}


def test_an_assignment_change_of_another_partition_keeps_a_sessions_reading_contiguous():
    history = History()
    sent(history, "p", A, 0, 0)
    sent(history, "p", B, 0, 1)
    history.poll("g/c", 0, [0, 1], [A, B])
    history.assigned("g/c", [1])
    history.poll("g/c", 0, [1], [B])
    assert set(history.check({0: log_of(A, B)})) == {"nonmonotonic-poll"}


def test_read_polls_are_checked_against_the_log_but_not_for_order():
    """read() is the Workload's call: its consumer's rebalances go unrecorded, so re-reads are fine."""
    history = History()
    for offset, value in enumerate((A, B, C)):
        history.ack(value, 0, offset)
    history.read(0, [0, 1], [A, B])
    history.read(0, [0, 2], [A, C])
    assert history.check({0: log_of(A, B, C)}, drained=True) == {}
    assert history.acked == {A: (0, 0), B: (0, 1), C: (0, 2)}
    history.read(0, [1], [D])
    anomalies = history.check({0: log_of(A, B, C)})
    assert set(anomalies) == {"inconsistent-offsets"}
    assert {e["kind"] for e in anomalies["inconsistent-offsets"]} == {"slot", "vanished"}
    assert anomalies["inconsistent-offsets"][-1]["consumers"] == [READ_CONSUMER]


# -- summary, report, threads ----------------------------------------------------------------------


def test_summary_counts_sends_polls_and_commits():
    history = History()
    sent(history, "p", A, 0, 0)
    history.issue("p", B)
    history.fail(B, "timeout")
    history.assigned("g/c", [0])
    history.poll("g/c", 0, [0], [A])
    history.poll("g/c", 0, [], [])
    history.commit("g", 0, 1)
    history.observe_committed("g", 0, 1)
    assert history.summary() == {
        "sends_issued": 2, "sends_acked": 1, "sends_failed": 1, "polls": 2, "records_polled": 1,
        "consumer_sessions": 1, "assignment_changes": 1, "commits": 1, "committed_observations": 1}


def test_report_shows_the_first_examples_of_each_anomaly_and_how_many_more():
    history = History()
    for n in range(5):
        sent(history, "p", value_of(b"k", n), 0, n)
    anomalies = history.check({0: []})
    report = history.report(anomalies, examples_max=2)
    lines = report.splitlines()
    assert lines[0].startswith("history: sends_issued=5, sends_acked=5")
    assert lines[1] == "lost-write: 5"
    assert lines[2].startswith("  {'value': b'k:0'")
    assert lines[4] == "  ... 3 more"
    assert len(lines) == 5
    assert render({}) == "no anomalies"


def test_recording_from_many_threads_keeps_every_op_in_one_order():
    history = History()
    threads_count, sends_per_thread = 8, 500

    def produce(t: int) -> None:
        for n in range(sends_per_thread):
            value = value_of(b"t%d" % t, n)
            history.issue(f"p{t}", value)
            history.ack(value, t, n)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ops = history.snapshot()
    assert [op.index for op in ops] == list(range(2 * threads_count * sends_per_thread))
    assert all(a.time_ns <= b.time_ns for a, b in zip(ops, ops[1:]))
    assert len(history.acked) == threads_count * sends_per_thread
    final = {t: [(n, value_of(b"t%d" % t, n)) for n in range(sends_per_thread)] for t in range(threads_count)}
    assert history.check(final) == {}


# -- a correct queue, run at random ------------------------------------------------------------------


class QueueModel:
    """A correct queue run at random, recorded into a History: what faultless raylog would do.

    Producers own their keys (key -> one partition) and complete their sends in issue order, as an
    idempotent producer does; some sends fail, and some of those land anyway. Each group hands its
    partitions out again at random (a rebalance): the old owner may commit its position first and
    may lose a partition without a revocation; some members stay and may get the same partitions
    back; every owner starts at the committed offset on assignment, so it re-reads. Sessions poll a
    few records at a time, commit their position, sometimes seek back to the committed offset; an
    observer reads committed offsets back; the Workload-style ``read`` consumer re-reads from
    anywhere. ``drain`` ends the run as a test would: every send completed, every group polled to
    the end and committed.
    """

    def __init__(self, rng: random.Random, partitions: int, producers: int, groups: int):
        self.rng = rng
        self.history = History()
        self.log: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.keys = {f"p{i}": [b"p%dk%d" % (i, k) for k in range(3)] for i in range(producers)}
        all_keys = [key for keys in self.keys.values() for key in keys]
        self.partition_of = {key: i % partitions for i, key in enumerate(all_keys)}
        self.next_n = {key: 0 for key in self.partition_of}
        self.in_flight: dict[str, deque] = {producer: deque() for producer in self.keys}
        self.groups = [f"g{i}" for i in range(groups)]
        self.committed = {(g, p): 0 for g in self.groups for p in self.log}
        self.owner: dict[tuple[str, int], str] = {}
        self.position: dict[tuple[str, int], int] = {}
        self.sessions_started = 0
        for group in self.groups:
            self.rebalance(group)

    def send(self) -> None:
        producer = self.rng.choice(list(self.keys))
        key = self.rng.choice(self.keys[producer])
        value = value_of(key, self.next_n[key])
        self.next_n[key] += 1
        self.history.issue(producer, value, topic="t")
        self.in_flight[producer].append(value)

    def complete(self, producer: str | None = None) -> None:
        producer = producer or self.rng.choice(list(self.keys))
        if not self.in_flight[producer]:
            return
        value = self.in_flight[producer].popleft()
        log = self.log[self.partition_of[parse(value)[0]]]
        outcome = self.rng.random()
        if outcome < 0.85:
            log.append(value)
            self.history.ack(value, self.partition_of[parse(value)[0]], len(log) - 1)
        elif outcome < 0.93:
            log.append(value)  # landed, but the producer gave up waiting
            self.history.fail(value, TimeoutError("request timed out"))
        else:
            self.history.fail(value, ConnectionError("never reached the leader"))

    def rebalance(self, group: str) -> None:
        partitions = list(self.log)
        previous = sorted({self.owner[(group, p)] for p in partitions if (group, p) in self.owner})
        for p in partitions:
            old = self.owner.pop((group, p), None)
            if old is not None:
                if self.rng.random() < 0.5:
                    self.commit(group, p)
                if self.rng.random() < 0.7:  # else lost, unannounced: only the next assignment says so
                    self.history.revoked(old, [p])
        sessions = []
        for _ in range(self.rng.randint(1, 2)):
            if previous and self.rng.random() < 0.4:
                session = self.rng.choice(previous)  # a member that stays in the group
            else:
                self.sessions_started += 1
                session = f"{group}/c{self.sessions_started}"
            if session not in sessions:
                sessions.append(session)
        assignment: dict[str, list[int]] = {s: [] for s in sessions}
        for p in partitions:
            owner = self.rng.choice(sessions)
            assignment[owner].append(p)
            self.owner[(group, p)] = owner
            self.position[(group, p)] = self.committed[(group, p)]
        for session, owned in assignment.items():
            self.history.assigned(session, owned)

    def poll(self, group: str, p: int, count_max: int) -> None:
        start = self.position[(group, p)]
        end = min(len(self.log[p]), start + count_max)
        self.history.poll(self.owner[(group, p)], p, range(start, end), self.log[p][start:end])
        self.position[(group, p)] = end

    def commit(self, group: str, p: int) -> None:
        self.committed[(group, p)] = self.position[(group, p)]
        self.history.commit(group, p, self.committed[(group, p)])

    def seek_to_committed(self, group: str, p: int) -> None:
        self.history.seek(self.owner[(group, p)], p)
        self.position[(group, p)] = self.committed[(group, p)]

    def reader_poll(self) -> None:
        p = self.rng.choice(list(self.log))
        start = self.rng.randint(0, len(self.log[p]))
        end = min(len(self.log[p]), start + self.rng.randint(0, 4))
        self.history.read(p, list(range(start, end)), self.log[p][start:end])

    def step(self) -> None:
        group, p = self.rng.choice(self.groups), self.rng.choice(list(self.log))
        action = self.rng.random()
        if action < 0.35:
            self.send()
        elif action < 0.6:
            self.complete()
        elif action < 0.8:
            self.poll(group, p, self.rng.randint(0, 5))
        elif action < 0.87:
            self.commit(group, p)
        elif action < 0.9:
            self.seek_to_committed(group, p)
        elif action < 0.93:
            self.rebalance(group)
        elif action < 0.96:
            self.history.observe_committed(group, p, self.committed[(group, p)])
        else:
            self.reader_poll()

    def drain(self) -> tuple[dict, dict]:
        """Complete every send, poll every group to the end and commit; the final read and commits."""
        for producer, in_flight in self.in_flight.items():
            while in_flight:
                self.complete(producer)
        for group in self.groups:
            self.rebalance(group)
            for p in self.log:
                while self.position[(group, p)] < len(self.log[p]):
                    self.poll(group, p, self.rng.randint(1, 5))
                self.commit(group, p)
                self.history.observe_committed(group, p, self.committed[(group, p)])
        final = {p: list(enumerate(values)) for p, values in self.log.items()}
        return final, dict(self.committed)


def run_model(seed: int, steps: int, partitions: int = 2, producers: int = 2, groups: int = 2):
    model = QueueModel(random.Random(seed), partitions, producers, groups)
    for _ in range(steps):
        model.step()
    final, final_committed = model.drain()
    return model, final, final_committed


def test_a_clean_history_with_rebalances_and_rereads_has_no_anomalies():
    model, final, final_committed = run_model(seed=20240607, steps=400)
    history = model.history
    summary = history.summary()
    assert summary["sends_acked"] > 100 and summary["sends_failed"] > 5
    assert summary["assignment_changes"] > 20 and summary["commits"] > 20
    polled_by_group: dict[str, list[bytes]] = {}
    for op in history.snapshot():
        if op.f == "poll" and op.process != READ_CONSUMER:
            polled_by_group.setdefault(op.process.split("/")[0], []).extend(op.value[2])
    assert all(len(values) > len(set(values)) for values in polled_by_group.values()), "no group re-read"
    anomalies = history.check(final, final_committed=final_committed, drained=True)
    assert anomalies == {}, history.report(anomalies)


MODEL_RUNS = dict(seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 300), partitions=st.integers(1, 3),
                  producers=st.integers(1, 3), groups=st.integers(1, 2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**MODEL_RUNS)
def test_every_history_of_a_correct_queue_checks_clean(seed, steps, partitions, producers, groups):
    model, final, final_committed = run_model(seed, steps, partitions, producers, groups)
    anomalies = model.history.check(final, final_committed=final_committed, drained=True)
    assert anomalies == {}, model.history.report(anomalies)


CORRUPTIONS = {
    "drop an acknowledged record": {"lost-write"},
    "duplicate a record": {"duplicate"},
    "swap two records of a key": {"inconsistent-offsets", "nonmonotonic-send"},
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corruption=st.sampled_from(sorted(CORRUPTIONS)), pick=st.randoms(use_true_random=False), **MODEL_RUNS)
def test_one_corruption_of_the_final_log_is_always_named(corruption, pick, seed, steps, partitions, producers,
                                                         groups):
    model, final, final_committed = run_model(seed, steps, partitions, producers, groups)
    acked = model.history.acked
    if corruption == "drop an acknowledged record":
        assume(acked)
        value = pick.choice(sorted(acked))
        p, offset = acked[value]
        final[p] = [(o, v) for o, v in final[p] if o != offset]
    elif corruption == "duplicate a record":
        records = [(p, o, v) for p, log in final.items() for o, v in log]
        assume(records)
        p, _, value = pick.choice(records)
        final[p].append((len(final[p]), value))
    else:
        by_key: dict[bytes, list[bytes]] = {}
        for value in sorted(acked):
            by_key.setdefault(parse(value)[0], []).append(value)
        keys = sorted(key for key, values in by_key.items() if len(values) >= 2)
        assume(keys)
        v1, v2 = pick.sample(by_key[pick.choice(keys)], 2)
        (p, o1), (_, o2) = acked[v1], acked[v2]
        final[p][o1], final[p][o2] = (o1, v2), (o2, v1)
    anomalies = model.history.check(final, final_committed=final_committed, drained=True)
    assert set(anomalies) == CORRUPTIONS[corruption], model.history.report(anomalies)


def test_anomaly_names_are_jepsens():
    assert ANOMALIES == ("lost-write", "duplicate", "inconsistent-offsets", "nonmonotonic-send",
                         "nonmonotonic-poll", "poll-skip", "unseen", "committed-offsets-backwards")
