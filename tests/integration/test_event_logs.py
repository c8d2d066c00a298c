"""Operational events are logged as structured INFO lines in raylog.log (issue: operations).

On a simulated three-node Ray, the leader of a two-replica partition is SIGKILLed: the
controller logs the death, the ISR shrink and the election of the other replica; Ray restarts
the killed one, which recovers its log (a recovery event), catches up and is added back (ISR
expand). A consumer group's first
member is a rebalance. Every raylog actor on a node appends to raylog.log in Ray's log
directory (raylog/logs.py); the lines are read from there, as an operator would.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.integration.conftest import wait_for
from tests.support.event_log import events, log_file as session_log_file
from tests.support.cluster import simulated_cluster

pytestmark = [pytest.mark.ray, pytest.mark.cluster]

TOPIC = "logged"
GROUP = "logged-readers"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with simulated_cluster(str(tmp_path_factory.mktemp("event-logs")), workers=2,
                           cluster_config={"replica_lag_time_max_ms": 4000}) as sim:
        yield sim


def test_an_election_isr_changes_and_a_rebalance_are_logged(sim):
    cluster = sim.cluster
    admin = cluster.admin()
    admin.create_topic(TOPIC, 1, replication_factor=2)
    producer = cluster.producer(acks="all")
    for i in range(500):
        producer.send(TOPIC, b"x" * 20)
    producer.flush()
    victim = admin.describe_partitions(TOPIC)[0]
    os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: admin.describe_partitions(TOPIC)[0]["leader"] not in (-1, victim["leader"]),
             timeout_s=60, interval_s=0.5)
    wait_for(lambda: len(admin.describe_partitions(TOPIC)[0]["isr"]) == 2, timeout_s=60, interval_s=0.5)
    for i in range(500):
        producer.send(TOPIC, b"y" * 20)
    producer.close()

    consumer = cluster.consumer(group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe([TOPIC])
    try:
        read = 0

        def consumed_all():
            nonlocal read
            read += sum(len(c) for c in consumer.poll_batch(timeout_ms=500))
            return read >= 1000

        wait_for(consumed_all, timeout_s=60, interval_s=0)
        consumer.commit()
    finally:
        consumer.close()

    log_file = session_log_file()
    wanted = {
        "replica_died": {"topic": TOPIC, "partition": "0", "replica": str(victim["leader"])},
        "isr_shrink": {"topic": TOPIC, "partition": "0", "removed": str(victim["leader"]), "reason": "replica_died"},
        "election": {"topic": TOPIC, "partition": "0", "previous_leader": str(victim["leader"]),
                     "reason": "replica_died"},
        "isr_expand": {"topic": TOPIC, "partition": "0", "added": str(victim["leader"]), "reason": "leader_request"},
        "rebalance": {"group": GROUP},
        # the killed replica reopens a log it did not close: a recovery scan, with its time and bytes cut
        "replica_recovery": {"topic": TOPIC, "partition": "0", "replica": str(victim["leader"])},
    }

    def all_logged():
        if not log_file.exists():
            return None
        seen = events(log_file)
        for event, fields in wanted.items():
            if not any(f.get("event") == event and fields.items() <= f.items() for _, f in seen):
                return None
        return seen

    seen = wait_for(all_logged, timeout_s=30, interval_s=0.5,
                    describe=lambda: [f for _, f in events(log_file)] if log_file.exists() else "no raylog.log")
    for level, fields in seen:
        if fields.get("event") in wanted:
            assert level == "INFO", (level, fields)
    election = next(f for _, f in seen if f["event"] == "election" and f.get("topic") == TOPIC)
    assert int(election["leader_epoch"]) > victim["leader_epoch"]
    assert election["leader"] != str(victim["leader"])
    recovery = next(f for _, f in seen if f["event"] == "replica_recovery" and f.get("topic") == TOPIC)
    assert int(recovery["bytes_cut"]) >= 0 and float(recovery["ms"]) >= 0 and int(recovery["log_end_offset"]) > 0
    # Nothing per record or per request: a thousand records and a group gave a handful of lines.
    assert sum(f.get("topic") == TOPIC or f.get("group") == GROUP for _, f in seen) < 20
