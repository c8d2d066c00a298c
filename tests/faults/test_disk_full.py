"""A partition's data directory fills up (ENOSPC), on a real 2 MiB tmpfs.

Fault model: the filesystem holding the log has no free block left, because
something else filled it (a ballast file) or the log itself did. Writes
through write(2) fail with ENOSPC, and a store into an unallocated page of a
shared mapping (the sparse index files) kills the process with SIGBUS.

What must hold: an append on a full disk raises KafkaStorageError naming the
directory and appends nothing (log end unchanged, every earlier record
readable, no partial batch returned); the process never dies; appends work
again, at the next offsets, once space returns; reopening after a clean close
or a crash finds every acknowledged record; reopening after a crash while the
disk is still full fails with LogDirError or succeeds, never worse.

Needs permission to mount a tmpfs (root here); skipped elsewhere. No Ray.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from raylog.config import TopicConfig
from raylog.errors import KafkaStorageError, LogDirError
from raylog.storage import batch as rb
from raylog.storage.log import PartitionLog
from raylog.storage.producer_state import ProducerStateManager, ProducerStateTable
from tests.support.builders import read_all
from tests.support.disks import can_mount_tmpfs, fill, mount_tmpfs, unmount

CONFIG = TopicConfig(segment_bytes=64 * 1024, index_interval_bytes=0, retention_ms=-1)
"""An index entry per batch and a roll every 64 KiB: index pages and new segments are needed often."""
DISK_BYTES = 2 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path):
    """A fresh 2 MiB tmpfs, unmounted afterwards."""
    if not can_mount_tmpfs():
        pytest.skip("the test needs permission to mount a tmpfs (root, as here)")
    mount_point = tmp_path / "disk"
    mount_tmpfs(mount_point, DISK_BYTES >> 20)
    try:
        yield mount_point
    finally:
        unmount(mount_point)


def fill_disk(directory: Path) -> Path:
    """Fill the filesystem with a ballast file; returns its path."""
    ballast = directory / "ballast"
    fill(ballast)
    return ballast


def batch_of(rng: random.Random, nbytes: int, ts: int = 1_000) -> tuple[bytearray, list[bytes]]:
    """One uncompressed batch of random (incompressible) values, about ``nbytes`` long."""
    values = [rng.randbytes(100) for _ in range(max(1, nbytes // 110))]
    return rb.build(values, timestamps_ms=ts, compression="none"), values


def snapshot_every_roll(directory: Path):
    """The replica's roll hook: a producer-state snapshot, a file written on the append path."""
    manager, table = ProducerStateManager(directory), ProducerStateTable()
    return lambda offset: manager.take_snapshot(table, offset)


def assert_unchanged(log: PartitionLog, before: tuple) -> None:
    assert (log.log_end_offset, log.size_bytes, read_all(log)) == before, "a failed append changed the log"


@pytest.mark.parametrize("reopen", ["close", "close_unclean"])
def test_append_on_a_full_disk_fails_cleanly_and_works_again_once_space_returns(small_disk, reopen):
    rng = random.Random(3)
    directory = small_disk / "topic-0"
    directory.mkdir()
    log = PartitionLog(directory, CONFIG, on_roll=snapshot_every_roll(directory))
    acked: list[bytes] = []
    for _ in range(12):
        data, values = batch_of(rng, 8 * 1024)
        log.append(data)
        acked += values
    assert len(log.segments) > 1
    ballast = fill_disk(small_disk)
    before = (log.log_end_offset, log.size_bytes, read_all(log))

    for size in (8 * 1024, 40 * 1024):
        data, _ = batch_of(rng, size)
        with pytest.raises(KafkaStorageError, match=str(directory)) as failed:
            log.append(data)
        assert failed.value.retriable
        assert_unchanged(log, before)
    follower_batch, _ = batch_of(rng, 8 * 1024)
    rb.RecordBatch(follower_batch, 0).stamp(log.log_end_offset, 0)
    with pytest.raises(KafkaStorageError, match=str(directory)):
        log.append_as_follower(follower_batch)
    assert_unchanged(log, before)
    segments = len(log.segments)
    with pytest.raises(KafkaStorageError, match=str(directory)):
        log.append(batch_of(rng, 63 * 1024)[0])  # does not fit: a roll, whose snapshot cannot be written
    assert len(log.segments) == segments
    assert_unchanged(log, before)

    ballast.unlink()
    for size in (8 * 1024, 63 * 1024, 8 * 1024):
        data, values = batch_of(rng, size)
        assert log.append(data).base_offset == len(acked)
        acked += values
    assert [v for _, _, v in read_all(log)] == acked
    getattr(log, reopen)()

    log = PartitionLog(directory, CONFIG)
    assert [v for _, _, v in read_all(log)] == acked
    assert [o for o, _, _ in read_all(log)] == list(range(len(acked)))
    log.close()


def test_delete_records_and_a_full_truncation_on_a_full_disk_change_nothing(small_disk):
    # A follower behind its leader's log start is reset with truncate_fully_and_start_at; with
    # no room for the new segment it must keep the log it has and succeed once space returns.
    rng = random.Random(5)
    directory = small_disk / "topic-0"
    directory.mkdir()
    log = PartitionLog(directory, CONFIG)
    for _ in range(12):
        log.append(batch_of(rng, 8 * 1024)[0])
    ballast = fill_disk(small_disk)
    before = (log.log_start_offset, log.log_end_offset, read_all(log))

    with pytest.raises(KafkaStorageError, match=str(directory)):
        log.delete_records(log.log_end_offset // 2)
    assert (log.log_start_offset, log.log_end_offset, read_all(log)) == before
    with pytest.raises(KafkaStorageError, match=str(directory)):
        log.truncate_fully_and_start_at(log.log_end_offset + 100)
    assert (log.log_start_offset, log.log_end_offset, read_all(log)) == before

    ballast.unlink()
    start = before[1] + 100
    log.truncate_fully_and_start_at(start)
    assert (log.log_start_offset, log.log_end_offset, read_all(log)) == (start, start, [])
    data, values = batch_of(rng, 8 * 1024)
    assert log.append(data).base_offset == start
    log.close()
    log = PartitionLog(directory, CONFIG)
    assert [v for _, _, v in read_all(log)] == values
    assert [p.name for p in directory.iterdir() if p.suffix == ".log"] == [f"{start:020d}.log"]
    log.close()


def fill_the_disk_by_appending(directory: Path, seed: int) -> None:
    """Child process: append seeded batches of random sizes until the disk is full, check the log in
    place, and exit 0; prints one line per acknowledged batch (its first offset and record count)."""
    rng = random.Random(seed)
    reserve = directory.parent / "reserve"
    reserve.write_bytes(b"\xff" * 64 * 1024)  # freed by the parent so that recovery has room
    log = PartitionLog(directory, CONFIG, on_roll=snapshot_every_roll(directory))
    acked = []
    failures = 0
    while failures < 20:
        data, values = batch_of(rng, rng.choice([150, 600, 3000, 9000]), ts=len(acked))
        before = (log.log_end_offset, log.size_bytes)
        try:
            info = log.append(data)
        except KafkaStorageError as exc:
            assert str(directory) in str(exc)
            assert (log.log_end_offset, log.size_bytes) == before
            failures += 1
            continue
        acked += values
        print(info.base_offset, len(values), flush=True)
    assert [v for _, _, v in read_all(log)] == acked, "the log after the disk filled differs from what was acked"
    log.close_unclean()
    try:
        PartitionLog(directory, CONFIG).close_unclean()  # recovery on the full disk: may fail, cleanly
    except LogDirError:
        pass


def test_appending_until_the_disk_is_full_never_kills_the_process_and_leaves_a_consistent_log(small_disk, seed):
    directory = small_disk / "topic-0"
    child = subprocess.run([sys.executable, "-m", "tests.faults.test_disk_full", str(directory), str(seed)],
                           capture_output=True, text=True, cwd=os.getcwd(), timeout=300)
    assert child.returncode == 0, f"the appender died (exit {child.returncode}): {child.stderr[-2000:]}"
    acked = [tuple(map(int, line.split())) for line in child.stdout.splitlines()]
    acked_records = sum(count for _, count in acked)
    assert acked_records > 1000, "the disk filled up with records"
    (small_disk / "reserve").unlink()

    log = PartitionLog(directory, CONFIG)
    records = read_all(log)
    assert [o for o, _, _ in records] == list(range(acked_records)), "every acknowledged record, no more"
    rng = random.Random(seed)
    log.append(batch_of(rng, 150)[0])
    log.close()


if __name__ == "__main__":
    fill_the_disk_by_appending(Path(sys.argv[1]), int(sys.argv[2]))
