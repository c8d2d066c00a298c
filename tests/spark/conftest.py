"""One raylog cluster and one Spark session per test module (Spark takes about 15 s to start):
a RayDP app master and one executor on the same local Ray as raylog's replicas. Both are shut
down when the module ends, even after a failed test."""

from __future__ import annotations

import pytest
import ray

import raylog
import spark_bridge

SPARK_APP = "raylog-tests"
"""RayDP names its app master actor after it (a test looks for that actor)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = raylog.connect(data_root=str(tmp_path_factory.mktemp("spark")), num_cpus=2,
                       object_store_memory=400 * 1024 * 1024, cluster_config={"offsets_topic_num_partitions": 1})
    yield c
    ray.shutdown()


@pytest.fixture(scope="module")
def spark(cluster):
    session = spark_bridge.session(app_name=SPARK_APP)
    try:
        yield session
    finally:
        session.stop(timeout_s=60)
