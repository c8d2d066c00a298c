"""One raylog cluster and one Spark session for every module here (Ray and Spark take about 20 s
to start, once per module before): a RayDP app master and one executor on the same local Ray as
raylog's replicas. Both are shut down when the package's last test ends, even after a failed test.
Each module's topics are deleted when it ends, so the shared cluster does not carry one module's
replica processes into the next."""

from __future__ import annotations

import pytest
import ray

import raylog
import spark_bridge

SPARK_APP = "raylog-tests"
"""RayDP names its app master actor after it (a test looks for that actor)."""

ENDS_THE_SESSION = "tests/spark/test_spark_bridge.py::test_stop_returns_by_force_when_raydp_hangs_and_a_new_session_starts"
"""Stops the shared session by force: it runs after every other test of this package."""


def pytest_collection_modifyitems(items):
    spark = [i for i, item in enumerate(items) if item.nodeid.startswith("tests/spark/")]
    ender = [i for i in spark if items[i].nodeid == ENDS_THE_SESSION]
    if ender and ender[0] != spark[-1]:
        items.insert(spark[-1], items.pop(ender[0]))


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    c = raylog.connect(data_root=str(tmp_path_factory.mktemp("spark")), num_cpus=2,
                       object_store_memory=400 * 1024 * 1024, cluster_config={"offsets_topic_num_partitions": 1})
    yield c
    ray.shutdown()


@pytest.fixture(scope="package")
def spark(cluster):
    session = spark_bridge.session(app_name=SPARK_APP)
    try:
        yield session
    finally:
        session.stop(timeout_s=60)


@pytest.fixture(scope="module", autouse=True)
def module_topics_deleted(cluster):
    admin = cluster.admin()
    before = set(admin.list_topics())
    yield
    admin.delete_topics(sorted(set(admin.list_topics()) - before))
