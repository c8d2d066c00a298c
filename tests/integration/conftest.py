"""A real local Ray per test module, on loopback, shut down at the module's end."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def wait_for(predicate, timeout_s: float = 30.0, interval_s: float = 0.1, describe=None):
    """Poll ``predicate`` until it returns a truthy value (returned) or the deadline passes;
    ``describe()`` (if given) is called on failure and its result put in the error."""
    deadline = time.monotonic() + timeout_s
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last_exc = exc
        time.sleep(interval_s)
    state = ""
    if describe is not None:
        try:
            state = f"; state: {describe()!r}"
        except Exception as exc:  # noqa: BLE001
            state = f"; describe failed: {exc!r}"
    raise AssertionError(f"condition not met within {timeout_s}s (last error: {last_exc!r}){state}")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("raylog-data")


@pytest.fixture(scope="module")
def cluster(data_root):
    import ray

    import raylog

    c = raylog.connect(data_root=str(data_root), num_cpus=2, object_store_memory=300 * 1024 * 1024)
    yield c
    ray.shutdown()
