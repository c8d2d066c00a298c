"""Shared fixtures: one seed per run for every randomized test (RAYLOG_TEST_SEED replays it)."""

import os
import random

import pytest


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
