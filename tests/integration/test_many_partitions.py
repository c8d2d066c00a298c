"""Many partitions: a 64-partition topic created with the default request timeout and used; the
controller and replicas answer other calls while a big creation or a big compaction runs; a
creation waits out a controller too busy to answer for longer than a request timeout, and
finishes through the controller's restart; a creation that fails part-way is reported
incomplete and finished by creating it again."""

from __future__ import annotations

import os
import signal
import time

import pytest

from raylog import TopicPartition
from raylog.config import ClusterConfig
from raylog.errors import TopicCreationIncompleteError
from tests.support.processes import pause
from tests.support.topics import consume_all, create_in_background, fresh_topic


def test_a_64_partition_topic_is_created_with_the_default_timeout_while_other_calls_are_answered(cluster):
    assert cluster.config.request_timeout_ms == ClusterConfig().request_timeout_ms
    admin = cluster.admin()
    other = fresh_topic(cluster, 1)
    producer = cluster.producer()
    producer.send(other, b"before").get(timeout=30)
    consumer = cluster.consumer(other, auto_offset_reset="earliest")
    assert [r.value for r in consume_all(consumer, 1)] == [b"before"]

    progress: list[tuple[int, int]] = []
    start = time.monotonic()
    thread, created = create_in_background(
        admin, "wide", 64, progress=lambda _name, started, total: progress.append((started, total)))
    answered = []
    while thread.is_alive() and len(answered) < 5:
        time.sleep(0.5)
        t0 = time.monotonic()
        assert "wide" in admin.list_topics() or not progress
        producer.send(other, b"during").get(timeout=30)
        got = consume_all(consumer, 1, timeout_s=120)
        answered.append((time.monotonic() - t0, thread.is_alive(), [r.value for r in got]))
    thread.join(timeout=600)
    took = time.monotonic() - start
    assert "error" not in created, created.get("error")
    assert len(created["description"].partitions) == 64
    during = [latency for latency, alive, values in answered if alive and values == [b"during"]]
    assert during, f"no call was made while the creation ran ({took:.1f} s)"
    assert max(during) < took, "list_topics, produce and fetch were answered while replicas were starting"
    assert progress and progress[-1][1] == 64 and progress == sorted(progress)

    records = [b"r%d" % i for i in range(6400)]
    producer.send_batch("wide", records, partition=[i % 64 for i in range(len(records))]).wait(timeout=120)
    wide = cluster.consumer("wide", auto_offset_reset="earliest")
    got = consume_all(wide, len(records), timeout_s=120)
    assert sorted(r.value for r in got) == sorted(records)
    assert len({r.partition for r in got}) == 64, "records reached every partition"
    wide.close()
    consumer.close()
    producer.close()
    admin.delete_topics(["wide"])


def test_a_fetch_is_answered_while_a_large_compaction_round_runs(cluster):
    import ray

    topic = fresh_topic(cluster, 1, cleanup_policy="compact", segment_bytes=1 << 20)
    producer = cluster.producer()
    n = 600_000
    keys = [b"key-%d" % (i % 120_000) for i in range(n)]
    noise = os.urandom(n * 64)  # incompressible, so the round has tens of MB to read and rewrite
    values = [b"value-%d-" % i + noise[i * 64:(i + 1) * 64] for i in range(n)]
    producer.send_batch(topic, values, keys=keys).wait(timeout=120)
    producer.send(topic, b"last", key=b"key-last").get(timeout=30)
    leader = cluster.metadata.leader(topic, 0)
    round_ref = leader.maintain_now.remote()
    # Fetches answered while the round is still running, by events, not by their latency: a fetch
    # queued behind the round can only be answered after it.
    fetched, answered_during = 0, 0
    while not ray.wait([round_ref], timeout=0)[0]:
        ray.get(leader.fetch.remote(0, 64 * 1024), timeout=120)
        fetched += 1
        answered_during += not ray.wait([round_ref], timeout=0)[0]
        time.sleep(0.005)
    result = ray.get(round_ref)
    assert result["bytes_compacted"] > 0
    assert answered_during >= 1, f"none of {fetched} fetches was answered while the round ran"
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    end, latest, deadline = consumer.end_offsets([tp])[tp], {}, time.monotonic() + 300
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            latest.update((r.key, r.value) for r in records)
    consumer.close()
    assert len(latest) == 120_001 and latest[b"key-119999"] == values[-1], "each key's last record survives"
    producer.close()


def test_a_creation_waits_out_a_controller_that_answers_nothing_for_longer_than_a_request_timeout(cluster):
    """Hundreds of replica processes starting on two cores starved the controller for over 30 s
    (one default request timeout): creation must not take a late answer for a failure."""
    import ray

    controller_pid = ray.get(cluster.controller.ping.remote(), timeout=30)
    admin = cluster.admin(request_timeout_ms=1500)
    pause(controller_pid)
    try:
        thread, created = create_in_background(admin, "while-paused", 2)
        time.sleep(4.5)  # three request timeouts without an answer
        assert thread.is_alive(), f"creation gave up while the controller was paused: {created}"
    finally:
        os.kill(controller_pid, signal.SIGCONT)
    thread.join(timeout=120)
    assert "error" not in created, created.get("error")
    assert len(created["description"].partitions) == 2
    producer = cluster.producer()
    producer.send_batch("while-paused", [b"a", b"b"], partition=[0, 1]).wait(timeout=60)
    consumer = cluster.consumer("while-paused", auto_offset_reset="earliest")
    assert sorted(r.value for r in consume_all(consumer, 2)) == [b"a", b"b"]
    consumer.close()
    producer.close()
    cluster.admin().delete_topics(["while-paused"])  # not the 1500 ms admin: the controller is busy again


def test_a_creation_finishes_when_its_controller_is_killed_and_restarted_part_way(cluster):
    """Ray runs the creation again on the restarted controller, which finds the topic recorded:
    the same creation, finished, not TopicAlreadyExistsError."""
    import ray

    controller_pid = ray.get(cluster.controller.ping.remote(), timeout=30)
    admin = cluster.admin()
    thread, created = create_in_background(admin, "restarted-mid", 8)
    deadline = time.monotonic() + 60
    while True:  # killed once the topic is recorded and its replicas are still starting
        progress = ray.get(cluster.controller.creation_progress.remote("restarted-mid"), timeout=30) \
            if "restarted-mid" in admin.list_topics() else {"done": True, "total": 0}
        if progress["total"] and not progress["done"]:
            break
        assert thread.is_alive() and time.monotonic() < deadline, f"the creation ended first: {created}"
        time.sleep(0.05)
    os.kill(controller_pid, signal.SIGKILL)
    thread.join(timeout=180)
    assert "error" not in created, created.get("error")
    assert len(created["description"].partitions) == 8
    assert ray.get(cluster.controller.ping.remote(), timeout=60) != controller_pid
    producer = cluster.producer()
    producer.send_batch("restarted-mid", [b"%d" % p for p in range(8)], partition=list(range(8))).wait(timeout=60)
    consumer = cluster.consumer("restarted-mid", auto_offset_reset="earliest")
    assert sorted(r.value for r in consume_all(consumer, 8)) == sorted(b"%d" % p for p in range(8))
    consumer.close()
    producer.close()
    admin.delete_topics(["restarted-mid"])


def test_a_creation_that_fails_part_way_is_reported_incomplete_and_a_retry_finishes_it(cluster, data_root):
    import uuid

    from raylog import ray_calls

    topic_id = uuid.uuid4().hex
    topic_dir = os.path.join(str(data_root), topic_id[:8])
    with open(topic_dir, "w") as blocker:  # the topic's directory is unusable: every replica fails to open
        blocker.write("not a directory")
    admin = cluster.admin()
    try:
        with pytest.raises(TopicCreationIncompleteError) as info:
            # The controller's call as the admin client makes it, with the topic id the blocker names.
            ray_calls.get(cluster.controller.create_topic.remote("half-made", 3, 1, {}, topic_id=topic_id), 120)
        assert sorted(info.value.missing) == [(0, 0), (1, 0), (2, 0)]
        assert "half-made" in str(info.value) and "create it again" in str(info.value)
        assert "half-made" in admin.list_topics(), "the topic is recorded, so a retry can finish it"
    finally:
        os.remove(topic_dir)
    description = admin.create_topic("half-made", 3)
    assert len(description.partitions) == 3
    producer = cluster.producer()
    producer.send_batch("half-made", [b"a", b"b", b"c"], partition=[0, 1, 2]).wait(timeout=60)
    consumer = cluster.consumer("half-made", auto_offset_reset="earliest")
    assert sorted(r.value for r in consume_all(consumer, 3)) == [b"a", b"b", b"c"]
    assert consumer.end_offsets([TopicPartition("half-made", p) for p in range(3)]) == {
        TopicPartition("half-made", p): 1 for p in range(3)}
    consumer.close()
    producer.close()
