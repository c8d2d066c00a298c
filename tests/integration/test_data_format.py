"""Every data directory format raylog ever wrote opens with today's code and reads back exactly (issue 30).

tests/fixtures/data-format-v<N>/ are whole single-node data roots written by the raylog of each
format version (tests/support/data_fixture.py says what they hold and how to add one): topics with
several segments each, a compacted topic with a tombstone, a gzip topic, headers, null keys, fixed
timestamps, and a group's committed offsets. Each is copied, opened as a cluster, and every record,
offset, key, timestamp, header and commit compared with what was written. v0 predates node
identity: its partitions are adopted by the head node (their directories are on it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import ray

import raylog
from raylog.errors import ControllerNotAvailableError
from raylog.records import TopicPartition
from raylog.storage import node_meta
from tests.support import data_fixture as fixture

pytestmark = [pytest.mark.ray]

FIXTURES = sorted((Path(__file__).parents[1] / "fixtures").glob("data-format-v*"))


def opened_copy(source: Path, tmp_path: Path) -> Path:
    root = tmp_path / source.name
    shutil.copytree(source, root)
    return root


@pytest.fixture(params=FIXTURES, ids=[f.name for f in FIXTURES])
def cluster(request, tmp_path):
    root = opened_copy(request.param, tmp_path)
    try:
        yield raylog.connect("local", data_root=str(root), num_cpus=2)
    finally:
        ray.shutdown()


def read(cluster, topic: str) -> dict[int, list]:
    partitions = cluster.metadata.partition_count(topic)
    ends = cluster.admin().end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign(list(ends))
    out = {p: [] for p in range(partitions)}
    while any((out[tp.partition][-1].offset + 1 if out[tp.partition] else 0) < end for tp, end in ends.items()):
        for tp, records in consumer.poll(timeout_ms=1000).items():
            out[tp.partition] += records
    consumer.close()
    return out


def test_every_committed_data_format_opens_and_reads_back_exactly(cluster):
    admin = cluster.admin()
    assert sorted(admin.list_topics()) == sorted(fixture.TOPICS)
    events = read(cluster, "events")
    for p in range(3):
        wanted = [fixture.event(i) for i in range(fixture.EVENTS) if i % 3 == p]
        got = [(r.offset, r.key, r.value, r.timestamp, [tuple(h) for h in r.headers] or None) for r in events[p]]
        assert got == [(o, k, v, ts, h) for o, (k, v, ts, h) in enumerate(wanted)], p
    zipped = read(cluster, "zipped")[0]
    assert [(r.offset, r.key, r.value) for r in zipped] == [
        (i, b"z%d" % (i % 4), b"zipped %d" % i) for i in range(fixture.ZIPPED)]
    last: dict[bytes, bytes | None] = {}
    for r in read(cluster, "state")[0]:
        last[r.key] = r.value
    wanted: dict[bytes, bytes | None] = {}
    for i in range(fixture.STATES):
        wanted[b"k%d" % (i % 20)] = fixture.state_value(i)
    assert {k: v for k, v in last.items() if v is not None} == {k: v for k, v in wanted.items() if v is not None}
    committed = admin.list_consumer_group_offsets(fixture.GROUP)
    assert {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in committed.items()} == \
        fixture.expected_committed()
    producer = cluster.producer()
    assert producer.send("events", b"written by today's raylog", partition=1).get(timeout=60).offset == \
        len(events[1])
    producer.close()


def test_a_data_directory_of_a_newer_format_is_refused_with_the_version_named(tmp_path):
    newest = max(FIXTURES, key=lambda f: int(f.name.rsplit("v", 1)[1]))
    root = opened_copy(newest, tmp_path)
    meta = node_meta.read(root)
    (root / node_meta.META_FILE).write_text(
        f"version={node_meta.FORMAT_VERSION + 1}\ncluster.id={meta.cluster_id}\nnode.id={meta.node_id}\n")
    try:
        with pytest.raises(ControllerNotAvailableError, match="newer raylog"):
            raylog.connect("local", data_root=str(root), num_cpus=1)
    finally:
        ray.shutdown()
