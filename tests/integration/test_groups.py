"""Consumer groups on a real local Ray, members running as Ray actors (issue 14).

A background producer writes keyed records continuously to a 6-partition
topic; members (tests/support/members.py) poll, record what they processed
with the member epoch they held, and commit after processing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import defaultdict

import pytest
import ray

import raylog
from raylog.errors import CommitFailedError, IllegalStateError, NonEmptyGroupError, StaleMemberEpochError
from raylog.naming import OFFSETS_TOPIC, coordinator_actor_name
from raylog.records import OffsetAndMetadata, TopicPartition
from tests.integration.conftest import wait_for
from tests.support.event_log import logged
from tests.support.members import MemberActor, Recorder
from tests.support.topics import consume_all

pytestmark = pytest.mark.ray

SESSION_MS = 3000
MEMBER = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": 500, "max_poll_interval_ms": 20_000}
"""Most tests' members: the session is short so that a killed member's expiry comes soon."""
PATIENT = {**MEMBER, "session_timeout_ms": 30_000}
"""A member whose session no starved process outlives, for tests that count its events or epochs:
an expiry there would be the load's doing, not the behaviour under test."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = raylog.connect(data_root=str(tmp_path_factory.mktemp("groups")), num_cpus=2,
                       object_store_memory=300 * 1024 * 1024, cluster_config={"offsets_topic_num_partitions": 2})
    yield c
    ray.shutdown()


class Writer:
    """Keyed records to every partition, numbered, at a steady trickle (about 400 per second)."""

    def __init__(self, cluster, topic: str, keys: int = 24):
        self.producer = cluster.producer(linger_ms=5)
        self.topic, self.keys, self.sent = topic, keys, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for k in range(self.keys):
                value = b"k%d:%d" % (k, n)
                self.producer.send(self.topic, value, key=b"k%d" % k)
                self.sent.append(value)
            n += 1
            time.sleep(0.06)

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join()
        self.producer.flush(timeout=60)
        self.producer.close()
        return self.sent


def new_group_topic(cluster, partitions: int = 6) -> tuple[str, str]:
    topic = f"g-{uuid.uuid4().hex[:8]}"
    cluster.admin().create_topic(topic, partitions)
    return topic, f"group-{uuid.uuid4().hex[:6]}"


def members(topic: str, group: str, n: int, **extra) -> list:
    return [MemberActor.remote(topic, group, {**MEMBER, **extra}) for _ in range(n)]


def assignments(actors) -> list[list[int]]:
    return ray.get([a.assignment.remote() for a in actors])


def balanced(actors, sizes) -> bool:
    got = assignments(actors)
    owned = [p for a in got for p in a]
    return sorted(map(len, got)) == sorted(sizes) and sorted(owned) == list(range(sum(sizes)))


def stop_all(actors) -> None:
    for a in actors:
        try:
            ray.get(a.stop.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - already dead
            pass
        ray.kill(a)


def test_a_new_cluster_makes_its_offsets_topic_and_coordinators_before_any_group_asks(cluster):
    """Issue 33: the first group of a new cluster waited while __consumer_offsets' replicas and its
    coordinators started (kafka-python's consumer_timeout_ms=5000 ended with nothing read). They
    now start with the cluster. This is the module's first test: no group has asked yet."""
    admin = cluster.admin()

    def coordinators_answer() -> bool:
        if OFFSETS_TOPIC not in admin.list_topics(include_internal=True):
            return False
        try:
            handles = [ray.get_actor(coordinator_actor_name(p), namespace=cluster.config.namespace) for p in range(2)]
        except ValueError:
            return False
        return all(isinstance(pid, int) for pid in ray.get([h.ping.remote() for h in handles], timeout=60))

    wait_for(coordinators_answer, timeout_s=120)
    assert all(p["leader"] >= 0 for p in admin.describe_partitions(OFFSETS_TOPIC))


def test_three_members_share_six_partitions_two_each(cluster):
    topic, group = new_group_topic(cluster)
    actors = members(topic, group, 3)
    try:
        wait_for(lambda: balanced(actors, [2, 2, 2]), timeout_s=60, describe=lambda: assignments(actors))
    finally:
        stop_all(actors)


def test_a_joining_member_gets_its_share_while_the_others_never_stop_consuming_what_they_keep(cluster):
    """Cooperative rebalancing: a join revokes only what moves. Shown by events, not by timing: no
    original member is told to give up (or loses) a partition it keeps, and each goes on reading
    its kept partitions after the join from where it was, every offset once."""
    topic, group = new_group_topic(cluster)
    writer = Writer(cluster, topic)
    actors = members(topic, group, 3, **PATIENT)  # an expiry here would be a lost partition, not the join's
    try:
        wait_for(lambda: balanced(actors, [2, 2, 2]), timeout_s=60, describe=lambda: assignments(actors))
        before = {i: set(p) for i, p in enumerate(assignments(actors))}
        events_before = [len(ray.get(a.rebalance_events.remote())) for a in actors]
        newcomer = MemberActor.remote(topic, group, PATIENT)
        actors.append(newcomer)
        wait_for(lambda: balanced(actors, [2, 2, 1, 1]), timeout_s=60, describe=lambda: assignments(actors))
        after = {i: set(p) for i, p in enumerate(assignments(actors))}
        assert after[3], "the newcomer got partitions"
        read_at_join = [ray.get(a.count.remote()) for a in actors[:3]]
        for i in range(3):
            kept = before[i] & after[i]
            assert kept, "each original member keeps at least one partition (sticky)"
            during = ray.get(actors[i].rebalance_events.remote())[events_before[i]:]
            taken = {p for kind, parts in during if kind in ("revoked", "lost") for p in parts}
            assert taken == before[i] - after[i], (i, during, before[i], after[i])

            def read_on(i=i, kept=kept):
                return {p for p, *_ in ray.get(actors[i].records.remote(read_at_join[i]))} >= kept
            wait_for(read_on, timeout_s=120, describe=lambda i=i: f"member {i} reads after the join")
            offsets = defaultdict(list)
            for partition, offset, *_ in ray.get(actors[i].records.remote()):
                offsets[partition].append(offset)
            for partition in kept:
                seen = offsets[partition]
                assert seen == list(range(seen[0], seen[0] + len(seen))), (
                    f"member {i} read partition {partition} with a gap or a repeat across the join")
    finally:
        writer.stop()
        stop_all(actors)


def test_a_killed_members_partitions_are_consumed_again_once_its_session_expires(cluster):
    topic, group = new_group_topic(cluster)
    writer = Writer(cluster, topic)
    actors = members(topic, group, 3)
    try:
        wait_for(lambda: balanced(actors, [2, 2, 2]), timeout_s=60, describe=lambda: assignments(actors))
        victim, survivors = actors[0], actors[1:]
        orphaned = set(ray.get(victim.assignment.remote()))
        seen_before = [ray.get(a.count.remote()) for a in survivors]
        killed_at = time.monotonic()
        os.kill(ray.get(victim.pid.remote()), signal.SIGKILL)

        def taken_over():
            done = set()
            for a, since in zip(survivors, seen_before):
                done |= {p for p, _, _, _, at in ray.get(a.records.remote(since)) if p in orphaned and at > killed_at}
            return done == orphaned

        # Bounded only against a hang: on a loaded machine the coordinator's expiry and the survivors'
        # next polls can come later than the session; what shows the cause is the expiry itself.
        wait_for(taken_over, timeout_s=120, interval_s=0.1)
        wait_for(lambda: logged("member_expired", group=group), timeout_s=30,
                 describe=lambda: "the victim left by its session's expiry")
    finally:
        writer.stop()
        stop_all(actors)


def test_a_static_member_that_restarts_gets_the_same_partitions_and_nobody_moves(cluster):
    topic, group = new_group_topic(cluster)
    # The session outlasts any restart a loaded machine makes slow (a new worker process that imports
    # raylog, connects and joins): its expiry is not what this test is about.
    actors = [MemberActor.remote(topic, group, {**MEMBER, "group_instance_id": f"worker-{i}",
                                                "session_timeout_ms": 120_000}) for i in range(3)]
    try:
        wait_for(lambda: balanced(actors, [2, 2, 2]), timeout_s=60, describe=lambda: assignments(actors))
        before = assignments(actors)
        epoch_before = cluster.admin().describe_consumer_groups([group])[0]["group_epoch"]
        ray.get(actors[1].stop.remote())
        ray.kill(actors[1])
        actors[1] = MemberActor.remote(topic, group, {**MEMBER, "group_instance_id": "worker-1",
                                                      "session_timeout_ms": 120_000})
        wait_for(lambda: ray.get(actors[1].assignment.remote()) == before[1], timeout_s=120)
        assert assignments(actors) == before, "no partition moved"
        assert cluster.admin().describe_consumer_groups([group])[0]["group_epoch"] == epoch_before
    finally:
        stop_all(actors)


def test_at_least_once_under_churn_and_never_two_owners_in_one_member_epoch(cluster):
    """Members join, crash (SIGKILL) and leave while a producer writes; each reports what it
    processed to a ledger before committing it. Every record sent is processed by someone, and no
    partition is processed by two members holding the same member epoch."""
    from tests.support.members import Ledger

    topic, group = new_group_topic(cluster)
    ledger = Ledger.remote()
    writer = Writer(cluster, topic)

    def member():
        return MemberActor.remote(topic, group, MEMBER, ledger=ledger)

    actors = [member(), member()]
    everyone = list(actors)
    try:
        time.sleep(2)
        everyone.append(member())
        actors.append(everyone[-1])
        time.sleep(2)
        os.kill(ray.get(actors[0].pid.remote()), signal.SIGKILL)
        actors.pop(0)
        time.sleep(2)
        ray.get(actors[0].stop.remote())
        actors.pop(0)
        everyone.append(member())
        actors.append(everyone[-1])
        time.sleep(3)
        sent = set(writer.stop())
        writer = None
        wait_for(lambda: sent <= {row[3] for row in ray.get(ledger.all.remote())}, timeout_s=60,
                 describe=lambda: len(sent - {row[3] for row in ray.get(ledger.all.remote())}))
        owners = defaultdict(lambda: defaultdict(list))
        for name, partition, offset, _, epoch in ray.get(ledger.all.remote()):
            owners[(partition, epoch)][name].append(offset)
        twice = {key: {name: (min(offsets), max(offsets), len(offsets)) for name, offsets in by.items()}
                 for key, by in owners.items() if len(by) > 1}
        assert not twice, f"(partition, member epoch): {{member: (first offset, last offset, records)}}: {twice}"
    finally:
        if writer is not None:
            writer.stop()
        stop_all(everyone)


def test_group_metadata_is_the_epoch_a_poll_fetched_under_and_moves_only_at_the_next_poll(cluster):
    """Kafka's groupMetadata(): the heartbeat thread moves the member epoch at any time, but what
    the application reads changes only when it polls, so records are never labelled with an epoch
    the member did not fetch them under (a label read after poll() could be a newer one)."""
    topic, group = new_group_topic(cluster, partitions=2)
    other, _ = new_group_topic(cluster, partitions=1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(10)], partition=0).wait(timeout=30)
    a = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                         **{**PATIENT, "max_poll_interval_ms": 300_000})  # it stays a member while it does not poll
    with pytest.raises(IllegalStateError):
        cluster.consumer(topic).group_metadata()
    a.subscribe([topic])
    assert len(consume_all(a, 10)) == 10
    first = a.group_metadata()
    assert first.group_id == group and first.member_id == a._group.member_id and first.generation_id > 0

    def epoch_of(consumer) -> int:
        (described,) = cluster.admin().describe_consumer_groups([group])
        return next((m["member_epoch"] for m in described["members"]
                     if m["member_id"] == consumer._group.member_id), -1)

    wait_for(lambda: epoch_of(a) == first.generation_id, timeout_s=120)
    # Another member subscribing to another topic bumps the group epoch; a keeps its partitions,
    # so its next heartbeat moves it to the new epoch with nothing to revoke.
    b = cluster.consumer(group_id=group, enable_auto_commit=False, **PATIENT)
    b.subscribe([other])
    wait_for(lambda: b.poll(timeout_ms=100) is not None and b.assignment(), timeout_s=120)
    wait_for(lambda: epoch_of(a) > first.generation_id, timeout_s=120)
    assert a.group_metadata() == first, "no poll since: the epoch the application sees has not moved"
    a.poll(timeout_ms=0)
    assert a.group_metadata().generation_id == epoch_of(a) > first.generation_id
    b.close()
    a.close()
    producer.close()


def test_committed_offsets_survive_a_coordinator_sigkill_and_stale_commits_are_fenced(cluster):
    topic, group = new_group_topic(cluster, partitions=2)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(100)], partition=0).wait(timeout=30)
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **MEMBER)
    consumer.subscribe([topic])
    got = consume_all(consumer, 100)
    assert len(got) == 100
    consumer.commit()
    stale_epoch = consumer._group.member_epoch
    from raylog.producer.partitioner import coordinator_partition

    coordinator = ray.get_actor(coordinator_actor_name(coordinator_partition(group, 2)), namespace="raylog")
    old_pid = ray.get(coordinator.ping.remote())
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: ray.get(coordinator.ping.remote(), timeout=5) != old_pid, timeout_s=60)
    assert consumer.committed(TopicPartition(topic, 0)) == 100, "the restarted coordinator replayed the commit"
    producer.send_batch(topic, [b"more-%d" % i for i in range(10)], partition=0).wait(timeout=30)
    assert [r.value for r in consume_all(consumer, 10)] == [b"more-%d" % i for i in range(10)], "the group resumed"
    other = cluster.consumer(group_id=group, auto_offset_reset="earliest", **MEMBER)
    other.subscribe([topic])
    wait_for(lambda: consumer.poll(timeout_ms=100) is not None and consumer._group.member_epoch > stale_epoch
             and other.poll(timeout_ms=100) is not None and other.assignment(), timeout_s=30)
    with pytest.raises(StaleMemberEpochError):
        ray.get(coordinator.commit_offsets.remote(group, consumer._group.member_id, stale_epoch,
                                                  [[topic, 0, 5, ""]]))
    consumer.commit()
    other.close()
    consumer.close()
    producer.close()


def test_a_commit_for_a_partition_the_member_does_not_own_is_refused(cluster):
    topic, group = new_group_topic(cluster, partitions=2)
    a = cluster.consumer(group_id=group, auto_offset_reset="earliest", **PATIENT)
    b = cluster.consumer(group_id=group, auto_offset_reset="earliest", **PATIENT)
    a.subscribe([topic])
    b.subscribe([topic])
    wait_for(lambda: a.poll(timeout_ms=100) is not None and b.poll(timeout_ms=100) is not None
             and len(a.assignment()) == 1 and len(b.assignment()) == 1, timeout_s=30)
    (theirs,) = b.assignment()
    with pytest.raises(CommitFailedError, match=f"{theirs.topic}.*{theirs.partition}|not own|own"):
        a.commit({theirs: OffsetAndMetadata(1, "")})
    a.close()
    b.close()


def test_two_groups_each_get_every_record_and_a_manual_consumer_changes_nothing(cluster):
    topic, group = new_group_topic(cluster, partitions=3)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(300)], keys=[b"%d" % (i % 7) for i in range(300)])
    producer.flush(timeout=30)
    first = cluster.consumer(group_id=group, auto_offset_reset="earliest", **MEMBER)
    second = cluster.consumer(group_id=group + "-2", auto_offset_reset="earliest", **MEMBER)
    # Assigned under the group's id it would auto-commit (as kafka-python's does), before the group has a member.
    manual = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    manual.assign([TopicPartition(topic, 0)])
    first.subscribe([topic])
    second.subscribe([topic])
    # Waits for exactly what partition 0 holds (some of the 7 keys hash there), not for a timeout.
    on_zero = cluster.admin().end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    assert on_zero >= 1
    assert len(consume_all(manual, on_zero)) == on_zero
    assert sorted(int(r.value) for r in consume_all(first, 300)) == list(range(300))
    assert sorted(int(r.value) for r in consume_all(second, 300)) == list(range(300))
    assert first.assignment() == {TopicPartition(topic, p) for p in range(3)}
    with pytest.raises(CommitFailedError):
        manual.commit()  # the group has a member: a consumer outside it may not commit
    with pytest.raises(raylog.IllegalStateError):
        manual.subscribe([topic])
    with pytest.raises(raylog.IllegalStateError):
        first.assign([TopicPartition(topic, 0)])
    for c in (first, second, manual):
        c.close()
    producer.close()


def test_admin_lists_describes_shows_lag_resets_and_deletes_groups(cluster, capsys):
    from raylog import cli

    admin = cluster.admin()
    topic, group = new_group_topic(cluster, partitions=2)
    producer = cluster.producer()
    producer.send_batch(topic, [b"x"] * 50, partition=0).wait(timeout=30)
    producer.send_batch(topic, [b"y"] * 30, partition=1).wait(timeout=30)
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **MEMBER)
    consumer.subscribe([topic])
    consume_all(consumer, 80)
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(40, "note"), TopicPartition(topic, 1): 30})
    assert any(g["group_id"] == group and g["member_count"] == 1 for g in admin.list_consumer_groups())
    (described,) = admin.describe_consumer_groups([group])
    member = described["members"][0]
    assert described["state"] == "stable" and member["member_epoch"] >= 1
    assert member["client_host"] == ray.get_runtime_context().get_node_id() and "pid" in member["client_id"]
    lag = admin.consumer_group_lag(group)
    assert {(r["partition"], r["committed"], r["end_offset"], r["lag"]) for r in lag["partitions"]} == \
        {(0, 40, 50, 10), (1, 30, 30, 0)}
    assert lag["members"] == [{"member_id": member["member_id"], "lag": 10}] and lag["total_lag"] == 10
    assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 0)] == OffsetAndMetadata(40, "note")
    with pytest.raises(NonEmptyGroupError):
        admin.reset_consumer_group_offsets(group, [topic], to="earliest")
    assert cli.main(["groups", "offsets", group]) == 0
    out = capsys.readouterr().out
    assert "LAG" in out and "total lag 10" in out
    consumer.close()
    assert admin.reset_consumer_group_offsets(group, [topic], shift_by=-15) == \
        {TopicPartition(topic, 0): 25, TopicPartition(topic, 1): 15}
    assert admin.reset_consumer_group_offsets(group, [topic], to="latest") == \
        {TopicPartition(topic, 0): 50, TopicPartition(topic, 1): 30}
    assert cli.main(["groups", "reset", group, "--topic", topic, "--to-earliest"]) == 0
    assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 1)].offset == 30  # a dry run
    assert cli.main(["groups", "reset", group, "--topic", topic, "--to-earliest", "--execute"]) == 0
    assert admin.list_consumer_group_offsets(group)[TopicPartition(topic, 1)].offset == 0
    assert cli.main(["groups", "describe", group]) == 0 and cli.main(["groups", "list"]) == 0
    capsys.readouterr()
    assert cli.main(["groups", "delete", group]) == 0
    assert group not in [g["group_id"] for g in admin.list_consumer_groups()]
    producer.close()


def poll_until(consumers, predicate, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(timeout_ms=50)
        if predicate():
            return
    raise AssertionError("condition not met while polling")


def test_listener_callbacks_follow_a_join_and_a_leave(cluster):
    topic, group = new_group_topic(cluster, partitions=4)
    first_events, second_events = Recorder(), Recorder()
    first = cluster.consumer(group_id=group, **PATIENT)
    first.subscribe([topic], listener=first_events)
    poll_until([first], lambda: len(first.assignment()) == 4)
    assert first_events.events == [("assigned", [0, 1, 2, 3])]
    second = cluster.consumer(group_id=group, **PATIENT)
    second.subscribe([topic], listener=second_events)
    poll_until([first, second], lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2)
    revoked = [e for e in first_events.events if e[0] == "revoked"]
    assert len(revoked) == 1 and len(revoked[0][1]) == 2, "the first member gave up exactly what moved"
    assert second_events.events == [("assigned", sorted(tp.partition for tp in second.assignment()))]
    second.close()
    poll_until([first], lambda: len(first.assignment()) == 4)
    assert first_events.events[-1][0] == "assigned"
    first.close()


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(cluster):
    topic, group = new_group_topic(cluster, partitions=2)
    slow_events = Recorder()
    slow = cluster.consumer(group_id=group, **{**MEMBER, "max_poll_interval_ms": 2000})
    slow.subscribe([topic], listener=slow_events)
    busy = cluster.consumer(group_id=group, **MEMBER)
    busy.subscribe([topic])
    poll_until([slow, busy], lambda: len(slow.assignment()) == 1 and len(busy.assignment()) == 1)
    mine = slow.assignment()
    poll_until([busy], lambda: len(busy.assignment()) == 2, timeout_s=120)  # slow stops polling
    slow.poll(timeout_ms=50)
    assert ("lost", sorted(tp.partition for tp in mine)) in slow_events.events
    poll_until([slow, busy], lambda: len(slow.assignment()) == 1 and len(busy.assignment()) == 1)
    slow.close()
    busy.close()


def test_a_pattern_subscription_picks_up_a_topic_created_later(cluster):
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    cluster.admin().create_topic(f"{prefix}-a", 1)
    consumer = cluster.consumer(group_id=prefix, auto_offset_reset="earliest", **MEMBER)
    consumer.subscribe(pattern=f"{prefix}-.*")
    poll_until([consumer], lambda: consumer.assignment() == {TopicPartition(f"{prefix}-a", 0)})
    cluster.admin().create_topic(f"{prefix}-b", 2)
    poll_until([consumer], lambda: len(consumer.assignment()) == 3)
    assert consumer.subscription() == {f"{prefix}-.*"}
    consumer.close()


@pytest.mark.parametrize("bad", [{"topics": []}, {"topics": ["a"], "pattern": "a.*"}, {"pattern": "(unclosed"}])
def test_bad_subscriptions_are_refused(cluster, bad):
    consumer = cluster.consumer(group_id="g-bad")
    with pytest.raises(raylog.errors.InvalidConfigError):
        consumer.subscribe(**bad)
    consumer.close()


def test_subscribe_needs_a_group_id(cluster):
    consumer = cluster.consumer()
    with pytest.raises(raylog.IllegalStateError, match="group_id"):
        consumer.subscribe(["t"])


def test_iterating_a_group_consumer_commits_only_what_the_iteration_returned(cluster):
    """Issue 19, finding 12: the position moves record by record as the iterator yields (as
    kafka-python's does), so a break and close() commit the next record, not the fetched batch's end."""
    topic, group = new_group_topic(cluster, partitions=1)
    producer = cluster.producer()
    producer.send_batch(topic, [b"%d" % i for i in range(10_000)]).wait(timeout=60)
    producer.close()
    consumer = cluster.consumer(group_id=group, auto_offset_reset="earliest", **MEMBER)
    consumer.subscribe([topic])
    seen = []
    for record in consumer:
        seen.append(record.offset)
        if len(seen) == 10:
            break
    consumer.close()
    assert seen == list(range(10))
    tp = TopicPartition(topic, 0)
    assert cluster.admin().list_consumer_group_offsets(group)[tp].offset == 10
    again = cluster.consumer(group_id=group, auto_offset_reset="earliest", **MEMBER)
    again.subscribe([topic])
    assert [next(again).offset for _ in range(3)] == [10, 11, 12], "next(consumer) resumes at the commit"
    again.close()
    assert cluster.admin().list_consumer_group_offsets(group)[tp].offset == 13


def test_a_synchronous_commit_lands_after_every_asynchronous_commit_queued_before_it(cluster):
    """Issue 19, finding 13: commits reach the coordinator in the order they were made (Kafka's
    commitSync waits for the commitAsync calls before it), so an older async commit, an auto-commit
    queued before a revocation among them, can never land last and move the offset back."""
    topic, group = new_group_topic(cluster, partitions=1)
    tp = TopicPartition(topic, 0)
    consumer = cluster.consumer(group_id=group, enable_auto_commit=False)
    consumer.assign([tp])
    release = threading.Event()
    first = consumer.commit_async({tp: 50}, callback=lambda offsets, error: release.wait(10))
    second = consumer.commit_async({tp: 100})
    threading.Timer(0.5, release.set).start()
    consumer.commit({tp: 150})
    first.result(timeout=30)
    second.result(timeout=30)
    assert cluster.admin().list_consumer_group_offsets(group)[tp].offset == 150
    consumer.close()
