"""Shared fixtures: one seed per run for every randomized test (RAYLOG_TEST_SEED replays it)."""

import os
import random

import pytest

import tests.support  # noqa: F401 - Ray's environment for the tests, set before Ray is imported


@pytest.fixture
def seed(request):
    value = int(os.environ.get("RAYLOG_TEST_SEED", random.randrange(2**32)))
    request.node.user_properties.append(("seed", value))
    print(f"RAYLOG_TEST_SEED={value}")
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name, value in item.user_properties:
            if name == "seed":
                report.sections.append(("seed", f"rerun with RAYLOG_TEST_SEED={value}"))


LONG = ("tests/faults/", "tests/integration/test_many_partitions.py",
        "tests/spark/test_connector.py::test_a_cancelled_read_stops_its_tasks_at_once_and_frees_their_memory",
        "tests/spark/test_spark_bridge.py::test_stop_returns_by_force_when_raydp_hangs_and_a_new_session_starts",
        "tests/integration/test_replication.py::test_with_no_in_sync_replica_alive_the_partition_stays_offline",
        "tests/integration/test_replication.py::test_a_topic_deleted_while_a_replica_was_stopped_is_not_reopened")
"""The longest scenarios (simulated clusters killed, paused, restarted; 64 partitions; a Spark
session stopped by force; a replica stopped for good): marked ``long``, run by ``make
test-long`` rather than ``make test``, and by CI after it. make test took 19:39 of its 20
minutes in CI with the last four in it."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(LONG):
            item.add_marker(pytest.mark.long)
