"""The test harness's shared parts. Importing this package first sets the environment every test
process needs before Ray is imported (tests/conftest.py does for the suite; ``python -m
tests.support.chaos`` and the other harness entry points get it from here, without the Makefile's
exports)."""

import os

# A client thread left running by a failed test must not re-attach Ray on its own after a fixture
# shut it down (Ray's auto-connect would otherwise join the next test's cluster, or a dead one).
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")
# Loopback only, as the Makefile exports it: Ray reads this when it is first imported (before any test
# module), and without it rewrites 127.0.0.1 to the machine's address when a client connects.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# The tests' Rays run without Ray's dashboard (raylog.connect starts it by default): it costs every
# start-up ~1.4 s and ~0.9 GB here (docs/performance.md). tests/integration/test_metrics.py turns it on.
os.environ.setdefault("RAYLOG_INCLUDE_DASHBOARD", "0")
