"""Drop-behind (page_cache.py): a log's files keep only their newest bytes in the page cache, on a
real file system, checked with mincore(2); what was dropped reads back the same from disk, across
rolls and after a crash."""

from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage import page_cache
from raylog.storage.log import PartitionLog
from raylog.storage.page_cache import DropBehind
from tests.support.builders import read_all

MiB = 1 << 20
PAGE = mmap.PAGESIZE

pytestmark = pytest.mark.skipif(not page_cache.available, reason="sync_file_range is Linux's")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_mib(path, start: int, end: int) -> float:
    """MiB of the file's bytes [start, end) now in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        length = end - start
        addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer((length + PAGE - 1) // PAGE)
            assert _libc.mincore(addr, length, vec) == 0, os.strerror(ctypes.get_errno())
            return sum(b & 1 for b in vec.raw) * PAGE / MiB
        finally:
            _libc.munmap(addr, length)
    finally:
        os.close(fd)


@pytest.fixture
def dropping_fs(tmp_path):
    """tmp_path, if its file system drops clean pages when asked (tmpfs keeps them: skip)."""
    probe = tmp_path / "probe"
    probe.write_bytes(os.urandom(MiB))
    fd = os.open(probe, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, MiB, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if resident_mib(probe, 0, MiB) > 0.5:
        pytest.skip("this file system keeps clean pages in memory (tmpfs)")
    probe.unlink()
    return tmp_path


def test_only_the_newest_window_of_an_appended_file_stays_in_the_page_cache(dropping_fs):
    path = dropping_fs / "file"
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    chunk = os.urandom(MiB)
    drop = DropBehind(fd, window=8 * MiB, chunk=2 * MiB)
    for i in range(48):
        os.pwrite(fd, chunk, i * MiB)
        assert drop.advance((i + 1) * MiB)
    os.close(fd)
    assert drop.dropped >= 48 * MiB - 8 * MiB - 2 * MiB
    assert resident_mib(path, 0, drop.dropped) == 0
    assert resident_mib(path, 40 * MiB, 48 * MiB) == 8  # the window: never asked to leave
    assert path.read_bytes() == chunk * 48


def test_a_cut_back_file_starts_over_from_the_cut(dropping_fs):
    fd = os.open(dropping_fs / "file", os.O_CREAT | os.O_RDWR)
    drop = DropBehind(fd, window=2 * MiB, chunk=MiB)
    os.pwrite(fd, os.urandom(8 * MiB), 0)
    assert drop.advance(8 * MiB) and drop.dropped == 6 * MiB
    os.ftruncate(fd, 3 * MiB)
    assert drop.advance(3 * MiB)
    assert (drop.submitted, drop.dropped) == (3 * MiB, 3 * MiB)
    os.close(fd)


def test_a_log_with_a_window_reads_back_every_record_across_rolls_and_a_crash(dropping_fs):
    config = TopicConfig(segment_bytes=24 * MiB, retention_ms=-1)
    log = PartitionLog(dropping_fs, config)
    log.page_cache_window_bytes = 4 * MiB
    values = [os.urandom(1000) for _ in range(100)]
    for i in range(600):  # ~60 MiB: two rolls
        log.append(rb.build(values, timestamps_ms=i, compression="none"))
    assert len(log.segments) == 3
    first, middle = log.segments[0], log.segments[1]
    # Dropped: the first segment, the second's older part (but pages the segment's own read map
    # has touched, which the kernel does not drop while mapped); the active keeps its window.
    assert resident_mib(first.log_path, 0, first.size) < 0.25
    assert resident_mib(middle.log_path, 0, middle.size - 4 * MiB - 8 * MiB) < 0.25
    want = [v for _ in range(600) for v in values]
    assert [v for _, _, v in read_all(log)] == want
    for seg in log.segments:
        seg.close_unclean()  # a crash: nothing trimmed or synced by close
    reopened = PartitionLog(dropping_fs, config)
    assert [v for _, _, v in read_all(reopened)] == want
    reopened.close()


def test_without_a_window_the_kernel_keeps_what_was_written(dropping_fs):
    log = PartitionLog(dropping_fs, TopicConfig(retention_ms=-1))
    for i in range(40):
        log.append(rb.build([os.urandom(1000) for _ in range(500)], timestamps_ms=i, compression="none"))
    active = log.active
    assert resident_mib(active.log_path, 0, active.size) > 15
    log.close()
