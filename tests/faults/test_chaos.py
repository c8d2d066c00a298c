"""The short seeded chaos scenario every `make test` runs (issue 19); `make chaos` runs the long one.

Fault model and workload: tests/support/faults.py and tests/support/chaos.py (their module
docs). In about a minute and a half the short schedule pauses and kills leaders, followers, the
controller, the group's coordinator and a member, fills a node's disk (where the machine lets the
test mount a tmpfs), loses a node and adds a fresh one, and moves a partition's leadership, while
two idempotent acks='all' producers and a consumer group run.

What must hold: the history checker (tests/support/history.py) finds no anomaly of any kind (no
lost or duplicated record, no offset holding two records, per-producer and per-key order, no
consumer or group skipping records, every acknowledged record seen, committed offsets never moving
back), the cluster is healthy again once the faults stop, and the group drains to the end.
"""

from __future__ import annotations

import pytest

from tests.support.chaos import run

pytestmark = [pytest.mark.ray, pytest.mark.cluster, pytest.mark.slow]


def test_a_short_chaos_run_finds_no_anomaly(tmp_path, seed):
    report = run(minutes=1.4, seed=seed, data_root=str(tmp_path / "data"), short=True)
    print(report["report"])
    print("faults:", report["faults"], "skipped:", report["faults_skipped"])
    # Liveness (stalls) is reported, not asserted here: it is measured in seconds, and this short run
    # shares a 2-core machine with whatever else runs; make chaos fails on any.
    print("stalls:", report["stalls"], report["stall_examples"][:3])
    assert report["anomalies"] == {}, report["examples"]
    assert report["healthy_after_faults"] and report["drained"], report
    assert report["operations"]["sends_acked"] > 5000
    assert sum(report["faults"].values()) >= 6, report["fault_log"]
