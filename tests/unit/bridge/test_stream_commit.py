"""spark_bridge.stream's commit of a finished batch to the group: it rides out retriable errors
(a coordinator restarting) and gives up after its timeout (finding 7 of issue 32: with no
deadline, a coordinator that never came back held foreachBatch, and the query, forever)."""

from __future__ import annotations

import pytest

from raylog.errors import CoordinatorNotAvailableError, InvalidConfigError, KafkaTimeoutError
from spark_bridge.stream import _retrying


def test_a_commit_rides_out_retriable_errors_until_it_succeeds():
    failures = [CoordinatorNotAvailableError("coordinator 0 is restarting")] * 3
    calls = []

    def commit():
        calls.append(1)
        if failures:
            raise failures.pop()

    _retrying(commit, 0.0, 60.0, "the commit of batch 4")
    assert len(calls) == 4


def test_a_commit_that_stays_retriable_fails_with_a_timeout_naming_the_batch():
    def commit():
        raise CoordinatorNotAvailableError("coordinator 0 is not registered")

    with pytest.raises(KafkaTimeoutError, match="the commit of batch 7 did not succeed within 0.2 s") as caught:
        _retrying(commit, 0.01, 0.2, "the commit of batch 7")
    assert isinstance(caught.value.__cause__, CoordinatorNotAvailableError)


def test_a_commit_error_that_is_not_retriable_fails_at_once():
    calls = []

    def commit():
        calls.append(1)
        raise InvalidConfigError("not retriable")

    with pytest.raises(InvalidConfigError):
        _retrying(commit, 0.0, 60.0, "the commit of batch 1")
    assert len(calls) == 1
