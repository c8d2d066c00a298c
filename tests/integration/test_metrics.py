"""raylog's metrics reach Ray's metrics endpoint (issue: operations).

A local Ray started by raylog.connect with its dashboard on (as users get it; the rest of the
suite turns it off), its metrics reported every 2 s instead of every 10: Ray forgets a gauge not
set again within two report intervals, and replicas set theirs on their 2 s heartbeat. The test
produces, kills a partition's only replica (an offline partition, then an election when Ray
restarts it), consumes and commits in a group, then reads the Prometheus text of every node's
metrics agent until each metric in actors/metrics.py is there with its tags and values that fit
what was done. Partition 0's ISR never changes after it is created: its gauge is still there
(the controller sets it again; before, it vanished a few seconds after it was set).
"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request

import pytest
import ray

from actors.metrics import METRICS
from raylog.records import TopicPartition
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.ray]

TOPIC = "metered"
GROUP = "metered-readers"
RECORDS = 3000
AFTER_COMMIT = 120
EXPORT_TIMEOUT_S = 90
UNCHANGED_FOR_S = 30
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    import raylog

    c = raylog.connect("local", data_root=str(tmp_path_factory.mktemp("metrics-data")), num_cpus=2,
                       object_store_memory=300 * 1024 * 1024, include_dashboard=True,
                       _system_config={"metrics_report_interval_ms": 2000})
    yield c
    ray.shutdown()


def scrape() -> dict[str, list[tuple[dict, float]]]:
    """Every raylog sample of every live node's metrics agent: name -> [(labels, value)]. Ray
    prefixes custom metrics with ``ray_``; the names here are raylog's own."""
    samples: dict[str, list[tuple[dict, float]]] = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        url = f"http://127.0.0.1:{node['MetricsExportPort']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        for line in text.splitlines():
            if not line.startswith("ray_raylog_"):
                continue
            head, _, value = line.rpartition(" ")
            name, _, labels = head.partition("{")
            samples.setdefault(name[len("ray_"):], []).append((dict(_LABEL.findall(labels)), float(value)))
    return samples


def matching(samples, name: str, tags: dict) -> list[float]:
    return [v for labels, v in samples.get(name, []) if all(labels.get(k) == t for k, t in tags.items())]


def total(samples, name: str, **tags) -> float:
    return sum(matching(samples, name, tags))


def gauge(samples, name: str, **tags) -> float:
    """The largest matching value: a replica Ray restarted leaves its old process's last value
    behind for a while, under another WorkerId."""
    return max(matching(samples, name, tags), default=0.0)


def test_every_metric_is_exported_with_its_tags(cluster):
    admin = cluster.admin()
    admin.create_topic(TOPIC, 2)
    created = time.monotonic()
    # Partition 1's only replica dies: offline until Ray restarts it, then elected again. (Before
    # anything is produced: a dead process's counters leave the endpoint with it.)
    victim = admin.describe_partitions(TOPIC)[1]
    os.kill(victim["pid"], signal.SIGKILL)

    def back():
        info = admin.describe_partitions(TOPIC)[1]
        return info.get("leader") == 0 and info.get("pid") not in (None, victim["pid"])

    wait_for(back, timeout_s=60, interval_s=0.5)
    producer = cluster.producer(acks="all")
    for i in range(RECORDS):
        producer.send(TOPIC, b"v" * 50, key=str(i).encode())
    producer.flush()

    # Through fetch calls: a consumer on the leader's node would read its files, which the
    # replica's fetch metrics do not see (the consumer's metrics() counts those bytes).
    consumer = cluster.consumer(group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                                local_reads=False)
    consumer.subscribe([TOPIC])
    read = 0
    try:
        def consumed_all():
            nonlocal read
            read += sum(len(c) for c in consumer.poll_batch(timeout_ms=500))
            return read >= RECORDS

        wait_for(consumed_all, timeout_s=60, interval_s=0)
        consumer.commit()
        for i in range(AFTER_COMMIT):
            producer.send(TOPIC, b"late", key=str(i).encode())
        producer.flush()
        producer.close()
        ends = admin.end_offsets([TopicPartition(TOPIC, p) for p in (0, 1)])
        assert sum(ends.values()) == RECORDS + AFTER_COMMIT

        def complete():
            s = scrape()
            missing = [m.name for m in METRICS if m.name != "raylog_follower_lag_records" and not any(
                n == m.name or n.startswith(m.name + "_") for n in s)]
            if missing:
                return None
            # gauges are set on timers (heartbeats, the controller's and the coordinator's loops)
            if total(s, "raylog_group_lag_records", group=GROUP, topic=TOPIC) != AFTER_COMMIT:
                return None
            if sum(gauge(s, "raylog_high_watermark", topic=TOPIC, partition=p) for p in "01") != RECORDS + AFTER_COMMIT:
                return None
            if total(s, "raylog_produce_records_total", topic=TOPIC) < RECORDS + AFTER_COMMIT:
                return None
            if any(gauge(s, "raylog_isr_size", topic=TOPIC, partition=p) != 1 for p in "01"):
                return None
            return s

        s = wait_for(complete, timeout_s=EXPORT_TIMEOUT_S, interval_s=1,
                     describe=lambda: sorted(scrape()))
    finally:
        consumer.close()

    for p in ("0", "1"):
        part = {"topic": TOPIC, "partition": p}
        for name in ("raylog_produce_records_total", "raylog_produce_bytes_total", "raylog_fetch_records_total",
                     "raylog_fetch_bytes_total", "raylog_produce_latency_ms_count", "raylog_fetch_latency_ms_count",
                     "raylog_log_size_bytes", "raylog_log_segments"):
            assert total(s, name, **part) > 0, (name, p)
        assert gauge(s, "raylog_log_end_offset", **part) == ends[TopicPartition(TOPIC, int(p))]
        assert gauge(s, "raylog_isr_size", **part) == 1
        assert gauge(s, "raylog_under_replicated", **part) == 0
        assert gauge(s, "raylog_offline", **part) == 0
        group_part = {"group": GROUP, "topic": TOPIC, "partition": p}
        assert any(labels == {**labels, **group_part} for labels, _ in s["raylog_group_lag_records"])
    assert total(s, "raylog_produce_records_total", topic=TOPIC) == RECORDS + AFTER_COMMIT
    assert total(s, "raylog_fetch_bytes_total", topic=TOPIC) >= total(s, "raylog_produce_bytes_total", topic=TOPIC) > 0
    assert total(s, "raylog_fetch_records_total", topic=TOPIC) >= RECORDS
    assert total(s, "raylog_produce_latency_ms_count", topic=TOPIC) >= 2
    assert total(s, "raylog_leader_elections_total", topic=TOPIC, partition="1") >= 1
    assert total(s, "raylog_leader_elections_total", topic=TOPIC, partition="0") == 0
    assert total(s, "raylog_controller_events_total", event="election") >= 1
    assert total(s, "raylog_controller_events_total", event="partition_offline") >= 1
    assert total(s, "raylog_controller_events_total", event="replica_died") >= 1
    assert total(s, "raylog_controller_events_total", event="topic_created") >= 1
    assert gauge(s, "raylog_group_members", group=GROUP) == 1
    # Partition 0's ISR was last set when it was created: long past two report intervals, the
    # endpoint still has it (before, Ray aged it out, and a dashboard showed no ISR at all).
    wait_for(lambda: time.monotonic() - created > UNCHANGED_FOR_S
             and gauge(scrape(), "raylog_isr_size", topic=TOPIC, partition="0") == 1,
             timeout_s=UNCHANGED_FOR_S + EXPORT_TIMEOUT_S, interval_s=1)
    assert total(s, "raylog_group_rebalances_total", group=GROUP) >= 1
