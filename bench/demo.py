"""make demo: a local Ray, a demo topic, a million 100-byte records produced and consumed back.

Grows with the project (consumer groups and the Spark job through RayDP come in later issues).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

RECORDS = 1_000_000
PARTITIONS = 4


def main() -> None:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    import raylog
    from bench.client_bench import consume_columns, make_values, produce_batch

    data_root = tempfile.mkdtemp(prefix="raylog-demo-")
    cluster = raylog.connect(data_root=data_root, num_cpus=2)
    try:
        topic = f"demo-{int(time.time())}"
        cluster.admin().create_topic(topic, PARTITIONS)
        print(f"created topic {topic!r} with {PARTITIONS} partitions under {data_root}")
        values = make_values(RECORDS)
        timed = produce_batch(cluster, topic, values)
        print(f"produced {RECORDS:,} records of 100 bytes: {RECORDS / timed.wall:,.0f} records/s")
        timed = consume_columns(cluster, topic, RECORDS)
        print(f"consumed {RECORDS:,} records: {RECORDS / timed.wall:,.0f} records/s")
        for info in cluster.admin().describe_partitions(topic):
            print(f"  partition {info['partition']}: offsets [{info['log_start_offset']}, {info['log_end_offset']})"
                  f" {info['size_bytes'] / 1e6:.1f} MB in {info['segments']} segment(s) on node {info['node_id'][:8]}")
    finally:
        ray.shutdown()
        shutil.rmtree(data_root, ignore_errors=True)


if __name__ == "__main__":
    main()
