"""PartitionLog.reconfigure: a topic config altered on a live log applies where its docstring says."""

from __future__ import annotations

import dataclasses

import pytest

from raylog.config import TopicConfig
from raylog.errors import InvalidConfigError, RecordTooLargeError
from raylog.storage import batch as rb
from raylog.storage.log import PartitionLog
from tests.support.builders import read_all
from tests.support.clock import FakeClock


def test_lowered_retention_ms_deletes_the_old_segments_at_the_next_delete_old_segments(tmp_path):
    clock = FakeClock(100_000)
    config = TopicConfig(segment_bytes=2048, retention_ms=-1)
    log = PartitionLog(tmp_path, config, clock)
    for i in range(40):
        log.append(rb.build([b"x" * 100], timestamps_ms=10_000 + i, compression="none"))
    log.roll()
    log.append(rb.build([b"new"], timestamps_ms=clock(), compression="none"))
    assert log.delete_old_segments() == 0 and log.next_maintenance_ms() is None
    log.reconfigure(dataclasses.replace(config, retention_ms=60_000))
    assert log.next_maintenance_ms() <= clock(), "old segments are due at once"
    assert log.delete_old_segments() > 0
    assert log.log_start_offset == 40
    assert [v for _, _, v in read_all(log)] == [b"new"]


def test_lowered_retention_bytes_deletes_the_oldest_segments(tmp_path):
    config = TopicConfig(segment_bytes=1024, retention_ms=-1)
    log = PartitionLog(tmp_path, config)
    for _ in range(60):
        log.append(rb.build([b"x" * 100], compression="none"))
    size = log.size_bytes
    log.reconfigure(dataclasses.replace(config, retention_bytes=3000))
    assert log.delete_old_segments() > 0
    assert log.size_bytes < size and log.log_start_offset > 0
    assert [o for o, _, _ in read_all(log)] == list(range(log.log_start_offset, 60))


def test_a_lowered_segment_bytes_rolls_the_active_segment_sooner(tmp_path):
    config = TopicConfig(segment_bytes=64 * 1024, retention_ms=-1)
    log = PartitionLog(tmp_path, config)
    for _ in range(10):
        log.append(rb.build([b"x" * 100], compression="none"))
    assert len(log.segments) == 1
    log.reconfigure(dataclasses.replace(config, segment_bytes=1024))
    for _ in range(20):
        log.append(rb.build([b"x" * 100], compression="none"))
    assert len(log.segments) >= 3
    assert all(s.size <= 1024 for s in log.segments[1:])
    assert [o for o, _, _ in read_all(log)] == list(range(30))


def test_a_raised_segment_bytes_keeps_the_active_segment_in_its_file_and_sizes_the_next(tmp_path):
    config = TopicConfig(segment_bytes=1024, retention_ms=-1)
    log = PartitionLog(tmp_path, config)
    log.append(rb.build([b"x" * 100], compression="none"))
    log.reconfigure(dataclasses.replace(config, segment_bytes=8192))
    for _ in range(40):
        log.append(rb.build([b"x" * 100], compression="none"))
    assert log.segments[0].size <= 1024, "the segment made for 1024 bytes never grew past its file"
    assert max(s.size for s in log.segments[1:]) > 1024
    assert [o for o, _, _ in read_all(log)] == list(range(41))


def test_a_lowered_max_message_bytes_refuses_the_next_bigger_batch(tmp_path):
    config = TopicConfig(retention_ms=-1)
    log = PartitionLog(tmp_path, config)
    big = rb.build([b"x" * 4000], compression="none")
    log.append(big)
    log.reconfigure(dataclasses.replace(config, max_message_bytes=1024))
    with pytest.raises(RecordTooLargeError):
        log.append(big)
    assert log.log_end_offset == 1


def test_compact_to_delete_makes_retention_apply(tmp_path):
    clock = FakeClock(100_000)
    config = TopicConfig(cleanup_policy="compact", segment_bytes=1024, retention_ms=1000)
    log = PartitionLog(tmp_path, config, clock)
    for i in range(30):
        log.append(rb.build([b"x" * 100], keys=[b"k%d" % i], timestamps_ms=1000 + i, compression="none"))
    assert log.delete_old_segments() == 0, "a compacted topic has no retention"
    log.reconfigure(dataclasses.replace(config, cleanup_policy="delete"))
    assert log.delete_old_segments() > 0


def test_reconfigure_takes_only_a_topic_config(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig())
    with pytest.raises(InvalidConfigError):
        log.reconfigure({"retention_ms": 1})
