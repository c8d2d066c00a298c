"""The data directories committed under tests/fixtures/: what they hold, and how they were written.

Each ``tests/fixtures/data-format-v<N>/`` is a whole single-node data root (the head's data
directory: the controller's metadata log and every partition) written by the raylog of format
version N through its public API, then closed cleanly. tests/integration/test_data_format.py opens
every one with today's code and reads it back exactly: that is how a format change shows it can
still read what earlier versions wrote. v0 is raylog before node identity (no meta.properties,
partitions under ``node-<Ray node id>/``, absolute directories in the metadata log); v1 is the
first with meta.properties.

To add the fixture of a new format version: ``python -m tests.support.data_fixture
tests/fixtures/data-format-v<N>`` with that version's code (this module uses only raylog's client
API, so an older checkout runs it too: ``PYTHONPATH=<checkout> python <this file> <out>``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

TOPICS = {
    # name: (partitions, topic configs): small segments so each partition has several, kept for good
    # (the records' fixed timestamps would otherwise be past any time-based retention)
    "events": (3, {"segment_bytes": 4096, "segment_index_bytes": 4096, "retention_ms": -1}),
    "state": (1, {"cleanup_policy": "compact", "segment_bytes": 8 * 1024, "segment_index_bytes": 4096}),
    "zipped": (1, {"segment_bytes": 4096, "segment_index_bytes": 4096, "retention_ms": -1}),
}
GROUP = "fixture-readers"
BASE_TIMESTAMP_MS = 1_764_000_000_000
EVENTS = 1500
STATES = 1200
ZIPPED = 400


def event(i: int) -> tuple[bytes | None, bytes, int, list[tuple[str, bytes]] | None]:
    """The i-th record of "events": key (None for every 7th), value, timestamp, headers (every 5th)."""
    key = None if i % 7 == 0 else b"user-%d" % (i % 13)
    headers = [("source", b"fixture"), ("n", b"%d" % i)] if i % 5 == 0 else None
    return key, b"event %05d " % i + b"x" * (i % 50), BASE_TIMESTAMP_MS + i, headers


def state_value(i: int) -> bytes | None:
    """The i-th record of the compacted "state" topic, key k<i % 20>: key k3's last is a tombstone."""
    return None if i == STATES - 20 + 3 else b"state %d" % i




def expected_committed() -> dict[tuple[str, int], tuple[int, str]]:
    return {("events", 0): (101, "batch 1"), ("events", 1): (57, ""), ("events", 2): (0, "start")}


def populate(cluster) -> None:
    """Write the fixture's topics, records and committed offsets into a fresh cluster."""
    from raylog import TopicPartition
    from raylog.records import OffsetAndMetadata

    admin = cluster.admin()
    for name, (partitions, configs) in TOPICS.items():
        admin.create_topic(name, partitions, **configs)
    producer = cluster.producer(acks="all", linger_ms=0, batch_size=4096)
    for i in range(EVENTS):
        key, value, ts, headers = event(i)
        producer.send("events", value, key=key, partition=i % 3, timestamp_ms=ts, headers=headers)
        if i % 100 == 99:
            producer.flush()
    for i in range(STATES):
        producer.send("state", state_value(i), key=b"k%d" % (i % 20), timestamp_ms=BASE_TIMESTAMP_MS + i)
    producer.flush()
    producer.close()
    zipped = cluster.producer(acks="all", compression_type="gzip", linger_ms=0, batch_size=2048)
    for i in range(ZIPPED):
        zipped.send("zipped", b"zipped %d" % i, key=b"z%d" % (i % 4), timestamp_ms=BASE_TIMESTAMP_MS + i)
    zipped.flush()
    zipped.close()
    import ray

    handles = ray.get(cluster.controller.replica_handles.remote("state", 0))
    ray.get([h.maintain.remote() for h in handles.values()])  # compacted on disk, not only in principle
    member = cluster.consumer(group_id=GROUP, enable_auto_commit=False)
    member.assign([TopicPartition("events", p) for p in range(3)])
    member.commit({TopicPartition(t, p): OffsetAndMetadata(o, m) for (t, p), (o, m) in expected_committed().items()})
    member.close(autocommit=False)


def close_cleanly(root: Path) -> None:
    """Open every log under ``root`` once more and close it cleanly (Ray ended the replicas without
    a close), so the files are cut to their used length: a fixture of a few hundred KB, not of
    preallocated segments."""
    from raylog.config import TopicConfig
    from raylog.storage.log import PartitionLog

    for directory in sorted({path.parent for path in root.rglob("*.log")}):
        PartitionLog(directory, TopicConfig()).close()


def main(out: str) -> None:
    import ray

    import raylog

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAYLOG_INCLUDE_DASHBOARD", "0")
    work = Path(tempfile.mkdtemp(prefix="raylog-fixture-")) / "data"
    cluster = raylog.connect("local", data_root=str(work), cluster_config={"offsets_topic_num_partitions": 1},
                             num_cpus=2)
    try:
        populate(cluster)
    finally:
        ray.shutdown()
    close_cleanly(work)
    target = Path(out)
    if target.exists():
        shutil.rmtree(target)
    # The locks are the writers' at run time, not part of the format.
    shutil.copytree(work, target, ignore=shutil.ignore_patterns(".lock"))
    print(f"wrote {target}: {sum(f.stat().st_size for f in target.rglob('*') if f.is_file())} bytes")


if __name__ == "__main__":
    main(sys.argv[1])
